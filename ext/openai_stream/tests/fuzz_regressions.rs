//! Findings of the fuzz targets (fuzz/), each reduced to a minimal test.
//!
//! Each test failed before its fix.

use openai_stream::anomaly::AnomalyKind;
use openai_stream::chat::{ChatProcessor, Options};
use openai_stream::sse::MaxLineBytes;

/// A line that is a clear error (invalid JSON), 9 bytes with its LF.
const BAD_LINE: &[u8] = b"data: {]\n";

/// A strict processor: these findings are about the errors a read returns
/// and records, and only a strict processor raises for an unreadable event
/// (by default each one is skipped and recorded).
fn processor(max_line_bytes: usize) -> ChatProcessor {
    ChatProcessor::new(Options {
        max_line_bytes: MaxLineBytes(max_line_bytes),
        strict: true,
        ..Options::default()
    })
}

/// sse_decode: `decode` used to stop at a failed line and keep the rest of
/// the read for the next call, which read one more line of that backlog; a
/// caller that kept feeding after errors made the reader hold every read it
/// was given (memory growing with the stream, each call copying the whole
/// backlog again). Now the whole read is decoded every time.
#[test]
fn a_caller_feeding_on_after_errors_keeps_buffered_bytes_bounded() {
    let max_line = 64;
    let read = BAD_LINE.repeat(10);
    let mut p = processor(max_line);
    for n in 0..100 {
        assert!(p.decode(&read).is_err());
        assert!(
            p.buffered_bytes() <= max_line + read.len(),
            "after read {n}: {} bytes buffered (limit {max_line}, read {} bytes)",
            p.buffered_bytes(),
            read.len()
        );
    }
}

/// Nothing is lost or kept after the stream ends: every bad line is either
/// the error a `decode` returned or recorded as an anomaly.
#[test]
fn every_line_of_the_backlog_is_read_by_finish() {
    let read = BAD_LINE.repeat(10);
    let mut p = processor(64);
    let mut raised = 0;
    for _ in 0..100 {
        raised += usize::from(p.decode(&read).is_err());
    }
    assert!(p.finish().is_ok());
    assert_eq!(p.buffered_bytes(), 0);
    // Identical anomalies share one entry and count.
    let recorded: u64 =
        p.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::UnreadableEvent).map(|a| a.count).sum();
    let raised = raised as u64;
    assert_eq!(raised, 100, "one error returned per read");
    assert_eq!(raised + recorded, 1000);
    // By default every one is skipped and recorded.
    let mut p = ChatProcessor::new(Options { max_line_bytes: MaxLineBytes(64), ..Options::default() });
    for _ in 0..100 {
        assert!(p.decode(&read).is_ok());
    }
    assert!(p.finish().is_ok());
    let recorded: u64 =
        p.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::UnreadableEvent).map(|a| a.count).sum();
    assert_eq!(recorded, 1000);
}

/// sse_decode: a bad line left in the backlog used to be read by `finish`
/// and recorded, while the same line in a later read was raised, so what
/// was reported depended on the reads. A read returns at most one error, so
/// the split still decides which bad line is raised and which recorded; what
/// holds is that each is reported exactly once either way.
#[test]
fn every_bad_line_is_reported_once_whatever_the_reads() {
    let stream = b"data: {]\n\ndata: {x\n\n";
    let reports = |reads: &[&[u8]]| {
        let mut p = processor(1024);
        let mut errors = 0;
        for r in reads {
            errors += usize::from(p.decode(r).is_err());
        }
        errors += usize::from(p.finish().is_err());
        errors + p.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::UnreadableEvent).count()
    };
    let (head, tail) = stream.split_at(10);
    assert_eq!(reports(&[stream]), 2);
    assert_eq!(reports(&[head, tail]), 2);
    for i in 0..=stream.len() {
        let (a, b) = stream.split_at(i);
        assert_eq!(reports(&[a, b]), 2, "split at {i}");
    }
}

/// sse_decode: a call whose arguments fail after an earlier error of the
/// same read was reported invalid twice: once when it was completed (as
/// every invalid call is) and again when the processor recorded the error it
/// could not raise.
#[test]
fn a_call_is_reported_invalid_once_when_its_error_is_not_the_first_of_the_read() {
    let stream = concat!(
        "data: {]\n\n",
        r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"x"}}]},"finish_reason":"tool_calls"}]}"#,
        "\n\n"
    );
    let mut p = processor(1024);
    assert!(p.decode(stream.as_bytes()).is_err());
    assert!(p.finish().is_ok());
    let invalid: Vec<_> =
        p.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::InvalidArguments).collect();
    assert_eq!(invalid.len(), 1, "{invalid:#?}");
    assert_eq!(invalid[0].call_id.as_deref(), Some("a"));
}
