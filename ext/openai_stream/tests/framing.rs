//! The raw path: SSE framing rules and bad bytes, through ChatProcessor::decode.

mod common;

use common::*;
use openai_stream::anomaly::AnomalyKind;
use openai_stream::chat::Options;
use openai_stream::error::{Error, StreamErrorKind};
use openai_stream::sse::MaxLineBytes;
use serde_json::json;

fn decode_all(h: &mut Harness, reads: &[&[u8]]) -> Vec<Out> {
    let mut items = Vec::new();
    for r in reads {
        items.extend(h.raw(r).expect("decodes"));
    }
    items.extend(h.finish().expect("finishes"));
    items
}

/// The items and anomaly kinds of `stream` read in one go by a fresh processor.
fn read_whole(stream: &[u8]) -> (Vec<Out>, Vec<AnomalyKind>) {
    let mut h = Harness::new(false);
    let items = decode_all(&mut h, &[stream]);
    (items, h.anomaly_kinds())
}

const HEADER: &str = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":""}}]}}]}"#;
const ARGS: &str = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":\"héllo \\u00e9\"}"}}]}}]}"#;
const END: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;

fn expected_call() -> serde_json::Value {
    json!({"q": "héllo é"})
}

#[test]
fn every_line_ending_works() {
    for sep in ["\n", "\r\n", "\r"] {
        let stream = format!(
            "data: {HEADER}{sep}{sep}data: {ARGS}{sep}{sep}data: {END}{sep}{sep}data: [DONE]{sep}{sep}"
        );
        let mut h = Harness::new(false);
        let items = decode_all(&mut h, &[stream.as_bytes()]);
        assert_eq!(final_calls(&items)[0].params, expected_call(), "separator {sep:?}");
    }
}

#[test]
fn any_split_of_the_bytes_gives_the_same_items() {
    let stream = format!(
        "\u{feff}: OPENROUTER PROCESSING\r\n\r\ndata:{HEADER}\r\n\r\ndata: {ARGS}\r\n\r\n{}data: {END}\r\n\r\ndata: [DONE]\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\u00e9\\ud83d\\ude00 ok\"}}]}\r\n\r\n"
    );
    let bytes = stream.as_bytes();
    let whole = decode_all(&mut Harness::new(false), &[bytes]);
    assert_eq!(texts(&whole), ["é😀 ok"]);
    assert_eq!(final_calls(&whole)[0].params, expected_call());
    for i in 0..=bytes.len() {
        let split = decode_all(&mut Harness::new(false), &[&bytes[..i], &bytes[i..]]);
        assert_eq!(split, whole, "split at byte {i}");
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode_all(&mut Harness::new(false), &singles), whole);
}

#[test]
fn data_with_or_without_a_space_and_multi_line_data() {
    let stream = format!(
        "data:{}\n\ndata: {{\"choices\":[{{\"index\":0,\n data: \"delta\":{{\"content\":\"b\"}}}}]}}\n\n",
        text_chunk("a")
    );
    // The second event spans two data lines joined with "\n".
    let stream = stream.replace("\n data: ", "\ndata: ");
    assert_eq!(texts(&read_whole(stream.as_bytes()).0), ["a", "b"]);
}

/// Rule 47 before rule 53: a data line that is a whole JSON object alone
/// may still go on with the event's JSON (an array element, a nested
/// object on its own line); the next line or the event's end decides.
#[test]
fn a_data_line_whole_alone_that_continues_the_events_json_is_joined() {
    let call = r#"{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"lookup","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}"#;
    let stream = format!("data: {{\"choices\":[\ndata: {call}\ndata: ]}}\n\ndata: [DONE]\n\n");
    let (items, kinds) = same_at_every_split(stream.as_bytes(), &[], Options::default());
    assert_eq!(ids(&items), ["a"]);
    assert!(kinds.is_empty(), "{kinds:?}");
    let nested = "data: {\"choices\":[{\"index\":0,\"delta\":\ndata: {\"content\":\"z\"}\ndata: }]}\n\n";
    let (items, kinds) = same_at_every_split(nested.as_bytes(), &[], Options::default());
    assert_eq!(texts(&items), ["z"]);
    assert!(kinds.is_empty(), "{kinds:?}");
    // The JSON cannot go on: the line was an event of its own after a lost
    // blank line, whether the event's end or the next line says so.
    let cut = "data: {\"choices\":[\n";
    let one = format!("data: {}\n\n", text_chunk("x"));
    let two = format!("data: {}\ndata: {}\n\n", text_chunk("x"), text_chunk("y"));
    for (rest, want) in [(one, vec!["x"]), (two, vec!["x", "y"])] {
        let (items, kinds) = same_at_every_split(format!("{cut}{rest}").as_bytes(), &[], Options::default());
        assert_eq!(texts(&items), want);
        assert_eq!(kinds, [AnomalyKind::UnreadableEvent]);
    }
}

#[test]
fn events_without_blank_lines_between_them_still_work() {
    let stream = format!("data: {}\ndata: {}\n", text_chunk("a"), text_chunk("b"));
    assert_eq!(texts(&read_whole(stream.as_bytes()).0), ["a", "b"]);
}

#[test]
fn comments_keep_alives_and_empty_data_are_skipped() {
    let stream = format!(
        ": OPENROUTER PROCESSING\n\ndata:\n\ndata: \n\nid: 7\nretry: 100\nevent: message\ndata: {}\n\n",
        text_chunk("x")
    );
    let (items, kinds) = read_whole(stream.as_bytes());
    assert_eq!(texts(&items), ["x"]);
    assert!(kinds.is_empty(), "{kinds:?}");
}

#[test]
fn non_json_data_is_skipped_and_reported() {
    let (items, kinds) = read_whole(format!("data: ping\n\ndata: {}\n\n", text_chunk("x")).as_bytes());
    assert_eq!(texts(&items), ["x"]);
    assert_eq!(kinds, [AnomalyKind::NonJsonData]);
}

#[test]
fn an_event_with_none_of_a_chunks_fields_is_skipped_and_reported() {
    // FastAPI's error body mid-stream; a chunk with only an id still reads.
    let stream = format!(
        "data: {}\n\ndata: {{\"detail\":\"Internal server error\"}}\n\ndata: {{\"id\":\"c\",\"choices\":[]}}\n\n",
        text_chunk("x")
    );
    let mut h = Harness::new(false);
    let items = decode_all(&mut h, &[stream.as_bytes()]);
    assert_eq!(texts(&items), ["x"]);
    let all = h.processor.anomalies().all();
    assert_eq!(all.iter().map(|a| a.kind).collect::<Vec<_>>(), [AnomalyKind::UnexpectedPayload]);
    assert!(all[0].excerpt.as_deref().is_some_and(|e| e.contains("Internal server error")), "{all:?}");
}

#[test]
fn done_or_eof_ends_the_stream() {
    let with_done = sse(&[HEADER, ARGS]);
    let mut h = Harness::new(false);
    let items = decode_all(&mut h, &[&with_done]);
    assert_eq!(final_calls(&items)[0].params, expected_call());
    assert!(!h.anomaly_kinds().contains(&AnomalyKind::Truncated));

    // No finish_reason, no [DONE], and the last line has no newline.
    let truncated = format!("data: {HEADER}\n\ndata: {ARGS}");
    let mut h = Harness::new(false);
    let items = decode_all(&mut h, &[truncated.as_bytes()]);
    assert_eq!(final_calls(&items)[0].params, expected_call());
    assert!(h.anomaly_kinds().contains(&AnomalyKind::Truncated));
}

#[test]
fn an_error_event_raises_a_provider_error_and_keeps_earlier_text() {
    let stream = format!(
        "data: {}\n\nevent: error\ndata: {{\"error\":{{\"message\":\"overloaded\",\"code\":529}}}}\n\n",
        text_chunk("partial answer")
    );
    let mut h = Harness::new(false);
    match h.raw(stream.as_bytes()) {
        Err(Error::Provider { message, payload }) => {
            assert_eq!(message, "overloaded");
            assert!(payload.is_some());
        }
        other => panic!("expected a provider error, got {other:?}"),
    }
    let earlier: Vec<_> = h.processor.output().items().collect();
    assert_eq!(earlier.len(), 1, "the text decoded before the error is in the output");
    // An error event whose payload holds a number serde_json refuses, or
    // hands over rounded, keeps its payload, numbers as sent.
    for number in ["1e20", "18446744073709551617", "1e400"] {
        let stream = format!("event: error\ndata: {{\"message\":\"x\",\"n\":{number}}}\n\n");
        match Harness::new(false).raw(stream.as_bytes()) {
            Err(Error::Provider { payload: Some(payload), .. }) => {
                assert_eq!(payload.get("n").map(|n| n.to_json()), Some(number.to_owned()));
            }
            other => panic!("expected a provider error with its payload, got {other:?}"),
        }
    }
}

#[test]
fn in_band_error_objects_in_data_lines() {
    for (line, message) in [
        (r#"{"error":{"message":"Rate limit","type":"rate_limit"}}"#, "Rate limit"),
        (
            r#"{"object":"error","message":"bad request","type":"BadRequestError","param":null,"code":400}"#,
            "bad request",
        ),
    ] {
        let mut h = Harness::new(false);
        match h.raw(format!("data: {line}\n\n").as_bytes()) {
            Err(Error::Provider { message: m, payload }) => {
                assert_eq!(m, message);
                let payload = payload.expect("payload kept");
                assert!(payload.is_object());
            }
            other => panic!("expected a provider error, got {other:?}"),
        }
    }
}

#[test]
fn strict_invalid_json_raises_naming_the_line_and_keeps_completed_calls() {
    let mistral = tool_chunk(r#"[{"id":"a","function":{"name":"f","arguments":"{}"}}]"#, Some("tool_calls"));
    let stream =
        format!("data: {mistral}\n\ndata: {{\"choices\": [oops]}}\n\ndata: {}\n\n", text_chunk("after"));
    let mut h = Harness::with(Options { strict: true, ..Options::default() });
    match h.raw(stream.as_bytes()) {
        Err(Error::Stream { kind, message, excerpt }) => {
            assert_eq!(kind, StreamErrorKind::InvalidJson);
            assert!(message.contains("oops"), "{message}");
            assert!(excerpt.contains("oops"));
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
    // The whole read was decoded: the call before the bad line and the text
    // after it are in the failing call's output, nothing is held back.
    let out: Vec<_> = h.processor.output().items().collect();
    assert_eq!(out.len(), 2);
    assert!(matches!(out[1], openai_stream::output::Item::Text("after")));
    assert_eq!(h.processor.buffered_bytes(), 0);
    assert!(h.raw(b"").unwrap().is_empty());
    assert!(h.finish().unwrap().is_empty());
}

#[test]
fn strict_later_bad_lines_of_a_read_are_recorded_and_the_first_is_raised() {
    let stream = format!("data: {{]\n\ndata: {}\n\ndata: {{x\n\n", text_chunk("between"));
    let mut h = Harness::with(Options { strict: true, ..Options::default() });
    assert!(matches!(
        h.raw(stream.as_bytes()),
        Err(Error::Stream { kind: StreamErrorKind::InvalidJson, .. })
    ));
    assert_eq!(h.processor.output().items().count(), 1);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::UnreadableEvent]);
}

#[test]
fn a_line_over_the_limit_raises_without_buffering_it() {
    let mut h = Harness::with(Options { max_line_bytes: MaxLineBytes(1024), ..Options::default() });
    h.raw(format!("data: {HEADER}\n\n").as_bytes()).unwrap();
    let big = vec![b'x'; 4096];
    match h.raw(&big) {
        Err(Error::Stream { kind: StreamErrorKind::LineTooLong, .. }) => {}
        other => panic!("expected line_too_long, got {other:?}"),
    }
    for _ in 0..100 {
        h.raw(&big).expect("the rest of the long line is skipped");
    }
    let items = h.raw(format!("\ndata: {ARGS}\n\ndata: {END}\n\n").as_bytes()).unwrap();
    assert_eq!(final_calls(&items)[0].params, expected_call());
}

#[test]
fn strict_invalid_utf8_raises() {
    let mut h = Harness::with(Options { strict: true, ..Options::default() });
    let mut bytes = b"data: {\"choices\":[{\"delta\":{\"content\":\"a".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b"\"}}]}\n\n");
    match h.raw(&bytes) {
        Err(Error::Stream { kind: StreamErrorKind::InvalidUtf8, message, .. }) => {
            assert!(message.contains("UTF-8"), "{message}")
        }
        other => panic!("expected invalid_utf8, got {other:?}"),
    }
}

#[test]
fn json_nested_too_deep_raises() {
    let deep = format!("data: {{\"x\":{}{}}}\n\n", "[".repeat(10_000), "]".repeat(10_000));
    let mut h = Harness::new(false);
    match h.raw(deep.as_bytes()) {
        Err(Error::Stream { kind: StreamErrorKind::TooDeep, .. }) => {}
        other => panic!("expected too_deep, got {other:?}"),
    }
}

#[test]
fn a_truncated_event_at_eof_is_reported_not_raised() {
    let mut h = Harness::new(false);
    let args =
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#;
    h.raw(format!("data: {HEADER}\n\ndata: {args}\n\ndata: {{\"choices\":[{{\"delta\"").as_bytes()).unwrap();
    let out = h.finish().unwrap();
    assert_eq!(ids(&out), ["c1"]);
    let kinds = h.anomaly_kinds();
    assert!(kinds.contains(&AnomalyKind::TruncatedEvent), "{kinds:?}");
    assert!(kinds.contains(&AnomalyKind::Truncated), "{kinds:?}");
}

#[test]
fn a_tool_call_repeated_within_one_read_is_returned_once() {
    let mut h = Harness::new(true);
    let stream = format!(
        "data: {}\n\ndata: {}\n\ndata: {}\n\n",
        tool_chunk(r#"[{"index":0,"id":"p","function":{"name":"f","arguments":"{\"a\":\"x"}}]"#, None),
        fragment_chunk(0, "y"),
        fragment_chunk(0, r#"z"}"#),
    );
    let items = h.raw(stream.as_bytes()).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].call().unwrap().params, json!({"a": "xyz"}));
    assert!(items[0].call().unwrap().partial);
}

#[test]
fn the_legacy_simulation_counts_what_the_old_processor_ran() {
    let three = tool_chunk(
        r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},
            {"index":1,"id":"b","function":{"name":"f","arguments":"{}"}},
            {"index":2,"id":"c","function":{"name":"f","arguments":"{}"}}]"#,
        Some("tool_calls"),
    );
    // One line: a newline inside would split the SSE data line.
    let three = three.replace('\n', "");
    let mut h = Harness::with(Options { simulate_legacy: true, ..Options::default() });
    let items = decode_all(&mut h, &[&sse(&[&three])]);
    assert_eq!(ids(&items), ["a", "b", "c"]);
    let legacy = h.processor.legacy_outcome().expect("simulated");
    assert_eq!(legacy.emitted, ["a"]);
    assert!(Harness::new(false).processor.legacy_outcome().is_none());
}

#[test]
fn a_call_started_after_an_earlier_finish_reason_and_never_finished_is_truncated() {
    let mut h = Harness::new(false);
    let first =
        tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]"#, Some("tool_calls"));
    let late = tool_chunk(r#"[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]"#, None);
    let items = decode_all(&mut h, &[format!("data: {first}\n\ndata: {late}\n\n").as_bytes()]);
    assert_eq!(ids(&items), ["a", "b"]);
    assert!(h.anomaly_kinds().contains(&AnomalyKind::Truncated));
}

#[test]
fn an_unreadable_last_line_at_eof_is_recorded_and_finish_still_returns_the_calls() {
    let mut h = Harness::new(false);
    h.raw(format!("data: {HEADER}\n\ndata: {ARGS}\n\ndata: {{\"x\": nope").as_bytes()).unwrap();
    let out = h.finish().expect("finish does not raise for the end of the stream");
    assert_eq!(final_calls(&out)[0].params, expected_call());
    assert!(h.anomaly_kinds().contains(&AnomalyKind::UnreadableEvent));
    // A provider error as the last line is still raised, after completing.
    let mut h = Harness::new(false);
    h.raw(format!("data: {HEADER}\n\ndata: {{\"error\":{{\"message\":\"gone\"}}}}").as_bytes()).unwrap();
    assert!(matches!(h.finish(), Err(Error::Provider { .. })));
    assert_eq!(h.processor.output().items().count(), 1);
}

/// Decodes `bytes` whole, one byte at a time, at every single split point
/// and at the given split points; all must give the same items, which are
/// returned.
fn same_at_every_split(bytes: &[u8], pieces: &[usize], options: Options) -> (Vec<Out>, Vec<AnomalyKind>) {
    let mut h = Harness::with(options);
    let whole = decode_all(&mut h, &[bytes]);
    let kinds = h.anomaly_kinds();
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode_all(&mut Harness::with(options), &singles), whole, "one byte at a time");
    for i in 0..=bytes.len() {
        let split = decode_all(&mut Harness::with(options), &[&bytes[..i], &bytes[i..]]);
        assert_eq!(split, whole, "split at byte {i}");
    }
    let mut reads = Vec::new();
    let mut start = 0;
    for &end in pieces.iter().chain([bytes.len()].iter()) {
        reads.push(&bytes[start..end]);
        start = end;
    }
    assert_eq!(decode_all(&mut Harness::with(options), &reads), whole, "split at {pieces:?}");
    (whole, kinds)
}

/// Discourse's "recovers from malformed streamed payloads": an event whose
/// JSON lacks its last brace sits between text events.
const MALFORMED: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"test,\"}}]}\n\n\
    data: {\"choices\":[{\"delta\":{\"content\":\"test1 ,\"}}]\n\n\
    data: {\"choices\":[{\"delta\":{\"content\":\"test2 ,\"}}]}\n\n\
    data: {\"choices\":[{\"delta\":{\"content\":\"test3,\"}}]}\n\n\
    data: {\"choices\":[{\"delta\":{\"content\":\"test4\"}}]}\n\n\
    data: [DONE]";

#[test]
fn an_unreadable_event_is_skipped_and_reported_and_the_stream_goes_on() {
    let (items, kinds) = same_at_every_split(MALFORMED.as_bytes(), &[1, 60, 120], Options::default());
    assert_eq!(texts(&items).concat(), "test,test2 ,test3,test4");
    assert_eq!(kinds, [AnomalyKind::UnreadableEvent]);
    let mut h = Harness::new(false);
    h.raw(MALFORMED.as_bytes()).expect("not raised");
    let a = &h.processor.anomalies().all()[0];
    assert!(a.excerpt.as_deref().is_some_and(|e| e.contains("test1 ,")), "{a:?}");
    assert!(a.message.contains("skipped"), "{}", a.message);

    // Calls on both sides, and malformed (not only cut) JSON, invalid UTF-8.
    let before =
        tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":1}"}}]"#, None);
    let after =
        tool_chunk(r#"[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]"#, Some("tool_calls"));
    let mut bytes =
        format!("data: {before}\n\ndata: {{\"choices\": [oops]}}\n\ndata: {{\"a\":\"").into_bytes();
    bytes.extend_from_slice(b"\xff\"}\n\n");
    bytes.extend_from_slice(format!("data: {after}\n\ndata: [DONE]\n\n").as_bytes());
    let (items, kinds) = same_at_every_split(&bytes, &[], Options::default());
    assert_eq!(ids(&items), ["a", "b"]);
    assert_eq!(final_calls(&items)[0].params, json!({"x": 1}));
    assert_eq!(kinds, [AnomalyKind::UnreadableEvent, AnomalyKind::UnreadableEvent]);
}

#[test]
fn strict_mode_raises_for_an_unreadable_event() {
    let mut h = Harness::with(Options { strict: true, ..Options::default() });
    match h.raw(MALFORMED.as_bytes()) {
        Err(Error::Stream { kind: StreamErrorKind::InvalidJson, message, .. }) => {
            assert!(message.contains("truncated"), "{message}")
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
    // The rest of the read was still decoded.
    assert_eq!(h.processor.output().items().count(), 4);
}

/// Discourse's endpoint-compliance mocks glue `data: [DONE]` onto the last
/// event's line; here the last event carries the end of the arguments.
#[test]
fn an_event_glued_to_the_next_line_ends_at_its_json() {
    let header =
        tool_chunk(r#"[{"index":0,"id":"tool_0","function":{"name":"get_weather","arguments":""}}]"#, None);
    let start = fragment_chunk(0, r#"{"location":"Sydney""#);
    let end = tool_chunk(r#"[{"index":0,"function":{"arguments":",\"unit\":\"c\"}"}}]"#, Some("tool_calls"));
    let stream = format!("data: {header}\n\ndata: {start}\n\ndata: {end}data: [DONE]");
    let (items, kinds) = same_at_every_split(stream.as_bytes(), &[40, 200], Options::default());
    assert_eq!(final_calls(&items)[0].params, json!({"location": "Sydney", "unit": "c"}));
    assert_eq!(kinds, [AnomalyKind::GluedEvent]);
    // Text events too, with a space before the glued line, and several
    // values on one line.
    let stream = format!("data: {}data: {} data: [DONE]\n\n", text_chunk("a"), text_chunk("b"));
    let (items, _) = same_at_every_split(stream.as_bytes(), &[], Options::default());
    assert_eq!(texts(&items), ["a", "b"]);
    // At most 16 values glued onto one line are read (each costs a copy of
    // the rest of the line); the rest of the line is skipped and reported.
    let many = format!("data: {}{}\n\n", text_chunk("x").repeat(20), "{}".repeat(100_000));
    let (items, kinds) = read_whole(many.as_bytes());
    assert_eq!(texts(&items).concat(), "x".repeat(17));
    assert_eq!(kinds, [AnomalyKind::GluedEvent, AnomalyKind::UnprefixedData, AnomalyKind::UnreadableEvent]);
    // The excerpts of the rest of the line give its own length, not that of
    // a quote of it.
    let mut h = Harness::new(false);
    decode_all(&mut h, &[many.as_bytes()]);
    for a in h.processor.anomalies().all() {
        if matches!(
            a.kind,
            AnomalyKind::GluedEvent | AnomalyKind::UnprefixedData | AnomalyKind::UnreadableEvent
        ) {
            let excerpt = a.excerpt.as_deref().unwrap_or_default();
            let length = excerpt.rsplit_once(" (").and_then(|(_, n)| n.strip_suffix(" bytes)")?.parse().ok());
            assert!(length.is_some_and(|n: usize| n > 100_000), "{:?}: {excerpt}", a.kind);
        }
    }
}

/// Discourse's SambaNova spec stream indents its first `data:` line.
#[test]
fn leading_spaces_before_data_are_not_part_of_the_field_name() {
    let stream =
        format!("    data: {}\n\n\t data: {}\n\ndata: [DONE]\n", text_chunk("I am"), text_chunk(" a bot"));
    let (items, kinds) = same_at_every_split(stream.as_bytes(), &[2, 7], Options::default());
    assert_eq!(texts(&items), ["I am", " a bot"]);
    assert!(kinds.is_empty(), "{kinds:?}");
}

/// Rule 23: repairing `{"location":"Sydney"` after `,"unit":"c"}` was lost
/// hands the tool plausible but wrong parameters.
#[test]
fn a_call_open_when_an_event_was_lost_is_never_repaired() {
    let header =
        tool_chunk(r#"[{"index":0,"id":"tool_0","function":{"name":"get_weather","arguments":""}}]"#, None);
    let start = fragment_chunk(0, r#"{"location":"Sydney""#);
    let lost = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":",\"unit\":\"c\"}"}}]}}]"#;
    for (label, tail) in [
        ("malformed", format!("data: {lost}\n\ndata: {}\n\n", finish_chunk("tool_calls"))),
        ("cut at the end of the stream", format!("data: {}", &lost[..40])),
    ] {
        for partial in [false, true] {
            let stream = format!("data: {header}\n\ndata: {start}\n\n{tail}");
            let mut h = Harness::new(partial);
            let result = h.raw(stream.as_bytes()).and_then(|_| h.finish());
            match result {
                Err(Error::Arguments { id, raw, message, .. }) => {
                    assert_eq!(id, "tool_0");
                    assert_eq!(raw, r#"{"location":"Sydney""#);
                    assert!(message.contains("lost"), "{label}: {message}");
                    assert!(
                        message.contains("unreadable event (invalid_json)")
                            || message.contains("cut by the end of the stream"),
                        "{label}: {message}"
                    );
                }
                other => panic!("{label}: expected an arguments error, got {other:?}"),
            }
            assert!(!h.anomaly_kinds().contains(&AnomalyKind::RepairedArguments), "{label}");
        }
    }
    // The lost event is quoted once, so the message gives its own length.
    let cut = format!("{}{}", &lost[..40], "x".repeat(300));
    let mut h = Harness::new(false);
    h.raw(format!("data: {header}\n\ndata: {start}\n\ndata: {cut}").as_bytes()).unwrap();
    match h.finish() {
        Err(Error::Arguments { message, .. }) => {
            assert!(message.contains(&format!("({} bytes)", cut.len())), "{message}")
        }
        other => panic!("expected an arguments error, got {other:?}"),
    }
    // Nor is it `{}` when its arguments are empty: the lost event may have
    // held them all.
    let mut h = Harness::new(false);
    h.raw(format!("data: {HEADER}\n\ndata: {{\"choices\":[{{\"delta\"").as_bytes()).unwrap();
    match h.finish() {
        Err(Error::Arguments { id, message, .. }) => {
            assert_eq!(id, "c1");
            assert!(message.contains("empty") && message.contains("cut by the end"), "{message}");
        }
        other => panic!("expected an arguments error, got {other:?}"),
    }
    // Arguments that parse as they are come out; so does a call that
    // started after the lost event.
    let whole = tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"q\":1"}}]"#, None);
    let rest = fragment_chunk(0, "}");
    let later = tool_chunk(r#"[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"r\":2"}}]"#, None);
    let stream =
        format!("data: {whole}\n\ndata: {{oops}}\n\ndata: {rest}\n\ndata: {later}\n\ndata: [DONE]\n\n");
    let calls = final_calls(&read_whole(stream.as_bytes()).0);
    assert_eq!((calls[0].params.clone(), calls[1].params.clone()), (json!({"q": 1}), json!({"r": 2})));
}

/// Numbers beyond f64's range read as Infinity, as Ruby's `JSON.parse`
/// reads them: however many there are, in an event split over data lines
/// too, and without turning the largest finite number into one of them.
#[test]
fn numbers_beyond_f64_cost_no_event_and_change_no_other_number() {
    let many = vec!["1e400"; 70].join(",");
    let text = format!(r#"{{"choices":[{{"delta":{{"content":"hi"}}}}],"x":[{many}]}}"#);
    let split = "data: {\"choices\":\ndata: [{\"delta\":{\"content\":\"split\"}}],\"x\":1e400}\n\n";
    let max = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"m","function":{"name":"f","arguments":{"m":1.7976931348623157e308}}}]},"finish_reason":"tool_calls"}]}"#;
    let stream = [sse(&[&text]), split.as_bytes().to_vec(), sse(&[max])].concat();
    let (items, kinds) = read_whole(&stream);
    assert_eq!(texts(&items), ["hi", "split"]);
    assert_eq!(final_calls(&items)[0].params, json!({"m": f64::MAX}));
    assert!(kinds.is_empty(), "{kinds:?}");
}
