//! The chunk scanner (the fast path of `ChatProcessor::decode`) against the
//! serde path: whenever the scanner accepts a text, serde_json accepts it
//! too and builds the same chunk, also when the envelope comes from the
//! scanner's memo of the previous text (mutations share long prefixes). Checked on every data line of the
//! recorded fixtures, on hand-written lines for each construct, and on
//! mutations of them (truncated, a byte replaced, deleted or inserted
//! anywhere).

mod common;

use common::Harness;
use openai_stream::chat::Options;
use openai_stream::chat::{scan, Chunk};
use openai_stream::lenient::Field;

/// The scanner's chunk, when it reads `text`.
fn scanned<'a>(text: &'a str, memo: &mut scan::ScanMemo) -> Option<Chunk<'a>> {
    let mut out = Chunk::default();
    scan::read(text, &mut out, memo).then_some(out)
}

fn serde_path(text: &str) -> Option<Chunk<'_>> {
    match serde_json::from_str::<Field<Chunk>>(text) {
        Ok(Field::Value(c)) => Some(c),
        _ => None,
    }
}

/// The scanner's result, checked against the serde path. True when the
/// scanner accepted the text.
fn check(text: &str) -> bool {
    check_after(None, text)
}

/// As `check`, with the memo of the scanner that read `before` first (as in
/// a stream): `text` may then be read through the envelope or the template
/// that `before` left.
fn check_after(before: Option<&str>, text: &str) -> bool {
    let mut memo = scan::ScanMemo::default();
    if let Some(before) = before {
        let _ = scanned(before, &mut memo);
    }
    let first = scanned(text, &mut memo);
    // Again: now the envelope of `text` is remembered (when it has one),
    // and read from the memo instead of scanned.
    let Some(scanned) = scanned(text, &mut memo) else {
        assert!(first.is_none(), "read once, then not: {text:?}");
        return false;
    };
    assert_eq!(first.as_ref(), Some(&scanned), "the memo changed the result for {text:?}");
    match serde_path(text) {
        Some(parsed) => assert_eq!(scanned, parsed, "scanner and serde differ on {text:?}"),
        None => panic!("the scanner accepted what the serde path rejects or reads otherwise: {text:?}"),
    }
    true
}

/// The streams of spec/fixtures and of its `recorded/` folder, in name order.
fn fixture_paths() -> Vec<std::path::PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../spec/fixtures");
    let mut paths: Vec<_> = [dir.to_owned(), format!("{dir}/recorded")]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "sse"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        paths.iter().any(|p| p.to_string_lossy().contains("/recorded/")),
        "no recorded fixtures in {dir}"
    );
    paths.sort();
    paths
}

fn fixture_lines() -> Vec<String> {
    let mut lines = Vec::new();
    for path in fixture_paths() {
        let text = std::fs::read_to_string(path).expect("fixture is UTF-8");
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                let data = data.trim();
                if data.starts_with('{') {
                    lines.push(data.to_owned());
                }
            }
        }
    }
    lines
}

/// One line per construct the scanner reads (and some it leaves to serde).
const LINES: &[&str] = &[
    // The bench workloads' shapes.
    r#"{"id":"chatcmpl-bench0","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"content":"carries a "},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pat"}}]},"logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write_file","arguments":""}}]},"finish_reason":null}]}"#,
    r#"{"id":"x","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":800,"total_tokens":2000,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0}}}"#,
    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
    // Escapes of every kind, whitespace everywhere, empty containers.
    r#" { "choices" : [ { "delta" : { "content" : "a\"b\\c\/d\be\ff\ng\rh\ti\u00e9j\u0000k\u20ac" } } ] } "#,
    "{\"choices\":[{\"delta\":{\"content\":\"tab\\tand\\nnewline\"}}]}\n",
    r#"{"choices":[{"delta":{"content":"surrogates \ud83d\ude00 go to serde"}}]}"#,
    r#"{"choices":[{"delta":{"content":"lone \ud83d"}}]}"#,
    r#"{"choices":[{"delta":{"content":"bad \x escape"}}]}"#,
    r#"{"ch\u006fices":[{"delta":{"content":"escaped key"}}]}"#,
    r#"{}"#,
    r#"{"choices":[{}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
    // Duplicate keys: the last wins.
    r#"{"choices":[{"delta":{"content":"a","content":"b"}}],"choices":[{"delta":{"content":"c"}}]}"#,
    // Null everywhere.
    r#"{"choices":null,"usage":null,"x_groq":null,"error":null,"object":null,"message":null}"#,
    r#"{"choices":[{"delta":null,"message":null,"finish_reason":null,"error":null}]}"#,
    r#"{"choices":[{"delta":{"content":null,"tool_calls":null}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":null,"id":null,"function":null}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":null,"arguments":null,"id":null}}]}}]}"#,
    r#"{"choices":[null]}"#,
    // Other types in known fields: the serde path reports them.
    r#"{"choices":[{"delta":{"tool_calls":[{"index":"1","id":7,"function":{"name":["x"],"arguments":{"a":1}}}]}}]}"#,
    r#"{"choices":[{"delta":{"content":[{"type":"text","text":"parts"}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1.0}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":123456789012345678901234}]}}]}"#,
    r#"{"choices":"no","usage":5,"object":true}"#,
    r#"{"error":{"message":"boom","code":500}}"#,
    r#"{"object":"error","message":"vLLM says no","code":400}"#,
    r#"{"choices":[{"finish_reason":"error","error":{"message":"upstream"}}]}"#,
    // Reasoning beside text and calls (rules 77 to 79), and of other types.
    r#"{"choices":[{"delta":{"content":null,"reasoning_content":"Let \u0041 me","reasoning":"x"}}]}"#,
    r#"{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.text","text":"a","index":0},{"type":"reasoning.encrypted","data":"b","index":0}]}}]}"#,
    r#"{"choices":[{"delta":{"reasoning_content":5,"reasoning":["x"],"reasoning_details":{"a":1}}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"s"}}}]}}]}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"x"},"extra_content":null}]}}]}"#,
    // Groq, DeepSeek, Claude-compat usage.
    r#"{"choices":[],"x_groq":{"id":"req_1","usage":{"prompt_tokens":10,"completion_tokens":5}}}"#,
    r#"{"usage":{"prompt_tokens":10,"prompt_cache_hit_tokens":4,"cache_creation_tokens":2,"prompt_tokens_details":{"cache_write_tokens":1,"cache_creation_tokens":3}}}"#,
    r#"{"usage":{"prompt_tokens":10.5}}"#,
    // Skipped values of every kind.
    r#"{"a":-0,"b":-12.5,"c":0.25,"d":true,"e":false,"f":null,"g":[1,[2,{"h":[]}]],"i":{"j":{"k":"l"}},"choices":[]}"#,
    r#"{"a":1e5,"choices":[]}"#,
    r#"{"a":1E-3,"choices":[]}"#,
    r#"{"a":01,"choices":[]}"#,
    r#"{"a":1.,"choices":[]}"#,
    r#"{"a":.5,"choices":[]}"#,
    r#"{"a":-,"choices":[]}"#,
    r#"{"a":12345678901234567890123,"choices":[]}"#,
    r#"{"a":tru,"choices":[]}"#,
    r#"{"a":nul}"#,
    // Syntax errors and truncation.
    r#"{"choices":[],}"#,
    r#"{"choices":[1,]}"#,
    r#"{"choices":[]} x"#,
    r#"{"choices":[]}{}"#,
    r#"{"choices" []}"#,
    r#"{"choices":[{"delta":{"content":"unterminated}}]}"#,
    "{\"choices\":[{\"delta\":{\"content\":\"control \u{1} char\"}}]}",
    r#"{"choices":[{"delta":{"content":"x"}}]"#,
    r#"[{"choices":[]}]"#,
    r#""just a string""#,
    "",
    " ",
];

#[test]
fn hand_written_lines_agree_with_serde() {
    let accepted = LINES.iter().filter(|line| check(line)).count();
    // The common shapes go the fast way.
    for line in &LINES[..5] {
        assert!(scanned(line, &mut scan::ScanMemo::default()).is_some(), "the scanner gave up on {line}");
    }
    assert!(accepted > 15, "only {accepted} lines scanned");
}

#[test]
fn deep_values_go_to_serde() {
    for depth in [10, 31, 32, 33, 127, 128, 129, 5000] {
        let text = format!(r#"{{"a":{}1{},"choices":[]}}"#, "[".repeat(depth), "]".repeat(depth));
        check(&text);
        let text = format!(r#"{{"a":{}{},"choices":[]}}"#, "{\"b\":".repeat(depth), "}".repeat(depth));
        check(&text);
    }
}

#[test]
fn every_fixture_line_agrees_with_serde() {
    let lines = fixture_lines();
    assert!(lines.len() > 50, "fixtures not found ({} lines)", lines.len());
    let accepted = lines.iter().filter(|line| check(line)).count();
    eprintln!("scanned {accepted} of {} fixture lines", lines.len());
    assert!(accepted * 2 > lines.len(), "the scanner read only {accepted} of {} fixture lines", lines.len());
}

/// Bytes that change the meaning of JSON the most when put anywhere.
const MUTANTS: &[u8] = b"\"\\{}[],:0-.e nx\t\x01";

fn mutations(line: &str, mut each: impl FnMut(&str)) {
    let bytes = line.as_bytes();
    for cut in 0..bytes.len() {
        if line.is_char_boundary(cut) {
            each(&line[..cut]);
        }
    }
    for at in 0..bytes.len() {
        for &m in MUTANTS {
            for variant in [
                [&bytes[..at], &[m][..], &bytes[at + 1..]].concat(),
                [&bytes[..at], &[m][..], &bytes[at..]].concat(),
            ] {
                if let Ok(text) = std::str::from_utf8(&variant) {
                    each(text);
                }
            }
        }
        let deleted = [&bytes[..at], &bytes[at + 1..]].concat();
        if let Ok(text) = std::str::from_utf8(&deleted) {
            each(text);
        }
    }
}

#[test]
fn mutated_lines_agree_with_serde() {
    let mut lines: Vec<String> = LINES.iter().take(34).map(|l| (*l).to_owned()).collect();
    // A sample of the fixtures (every distinct shape is in the first lines
    // of some file), short enough for a debug build.
    let fixtures = fixture_lines();
    lines.extend(fixtures.iter().step_by(7).take(25).cloned());
    let mut cases = 0usize;
    let mut accepted = 0usize;
    for line in &lines {
        mutations(line, |text| {
            cases += 1;
            accepted += usize::from(check(text));
            // After the original line: its envelope and template are
            // remembered, and the mutation shares most of its bytes.
            check_after(Some(line), text);
        });
    }
    eprintln!("scanned {accepted} of {cases} mutations");
    assert!(accepted > 1000, "{accepted} of {cases} mutations scanned");
}

/// The processor's shortcut for a delta read through the template
/// (`scan::plain`, no chunk built) does what the whole chunk does: every
/// stream decodes to the same items, errors and anomalies, and the legacy
/// simulator to the same outcome, as when every chunk is read whole.
fn plain_path_agrees(body: &[u8], read: usize) {
    let run = |whole: bool| {
        let options =
            Options { simulate_legacy: true, partial_tool_calls: read % 2 == 1, ..Options::default() };
        let mut h = Harness::with(options);
        if whole {
            h.processor.read_whole_chunks();
        }
        let mut outs: Vec<_> = body.chunks(read.max(1)).map(|r| h.raw(r)).collect();
        outs.push(h.finish());
        (outs, h.processor.anomalies().all().to_vec(), h.processor.legacy_outcome().cloned())
    };
    let (fast, whole) = (run(false), run(true));
    assert_eq!(fast, whole, "the plain path differs on {:?}", String::from_utf8_lossy(body));
}

#[test]
fn plain_deltas_are_read_as_their_chunks_are() {
    for path in fixture_paths() {
        let body = std::fs::read(path).expect("fixture");
        for read in [7, 512] {
            plain_path_agrees(&body, read);
        }
    }
    // A delta, then a mutation of it (mostly read through the delta's
    // template, or refused by it), twice.
    let mut hits = 0usize;
    for line in LINES.iter().take(3) {
        mutations(line, |text| {
            let mut memo = scan::ScanMemo::default();
            let _ = scanned(line, &mut memo);
            hits += usize::from(scan::plain(text.as_bytes(), &memo).is_some());
            let body = format!("data: {line}\n\ndata: {text}\n\ndata: {text}\n\n");
            plain_path_agrees(body.as_bytes(), 1 << 12);
        });
    }
    // vLLM's `object: "error"` on a text delta; an error event; escapes.
    let error_object = LINES[0].replace("chat.completion.chunk", "error");
    for (line, text) in [
        (error_object.clone(), error_object.replace("carries a ", "x")),
        (LINES[0].to_owned(), LINES[0].replace("carries a ", "x")),
        (LINES[1].to_owned(), LINES[1].replace(r#"{\"pat"#, r#"\u00e9\"}"#)),
    ] {
        let body = format!("data: {line}\n\ndata: {text}\n\nevent: error\ndata: {text}\n\n");
        plain_path_agrees(body.as_bytes(), 1 << 12);
    }
    assert!(hits > 100, "only {hits} mutations were plain deltas");
}
