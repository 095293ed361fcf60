//! The chunk scanner (the fast path of `ChatProcessor::decode`) against the
//! serde path: whenever the scanner accepts a text, serde_json accepts it
//! too and builds the same chunk, also when the envelope comes from the
//! scanner's memo of the previous text (mutations share long prefixes). Checked on every data line of the
//! recorded fixtures, on hand-written lines for each construct, and on
//! mutations of them (truncated, a byte replaced, deleted or inserted
//! anywhere). The Responses processor's fast reading of delta events (the
//! same scanner and templates) against its whole reading of the same
//! streams, on hand-written events and mutations of them.

mod common;

use common::Harness;
use openai_stream::anomaly::AnomalyKind;
use openai_stream::chat::Options;
use openai_stream::chat::{scan, Chunk};
use openai_stream::lenient::Field;
use openai_stream::output::Output;
use openai_stream::responses::scan::{self as deltas, DeltaMemo};
use openai_stream::responses::{self, ResponsesProcessor};

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

// ---- Responses delta events -------------------------------------------------

/// One line per shape of a delta event the fast reading reads, or leaves to
/// the whole reading. The first ones are read fast.
const EVENTS: &[&str] = &[
    // The bench workloads' shapes, and OpenAI's with `obfuscation`.
    r#"{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_a","output_index":1,"content_index":0,"delta":"carries a ","logprobs":[]}"#,
    r#"{"type":"response.function_call_arguments.delta","sequence_number":7,"item_id":"fc_a","output_index":0,"delta":"{\"pat"}"#,
    r#"{"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_a","output_index":1,"content_index":0,"delta":"Hi","logprobs":[],"obfuscation":"x9Q"}"#,
    r#" { "type" : "response.function_call_arguments.delta" , "output_index" : 0 , "delta" : "\u00e9\n\"" } "#,
    r#"{"delta":"late type","item_id":null,"output_index":null,"type":"response.output_text.delta"}"#,
    // Duplicate keys: the last wins, in both readings.
    r#"{"type":"response.output_text.delta","delta":"a","item_id":"msg_a","delta":"b","item_id":null}"#,
    r#"{"type":"response.output_text.delta","delta":"d","type":"response.function_call_arguments.delta","output_index":0}"#,
    // Skipped values of every kind.
    r#"{"type":"response.output_text.delta","a":-1.5,"b":[1,{"c":null}],"d":true,"e":{"f":"g"},"delta":"h"}"#,
    // Left to the whole reading: other types (also before the last
    // `type`), other shapes, the envelope.
    r#"{"type":"response.completed","type":"response.output_text.delta","delta":"c"}"#,
    r#"{"type":"response.output_text.delta","delta":{"a":1}}"#,
    r#"{"type":"response.output_text.delta","delta":null}"#,
    r#"{"type":"response.output_text.delta"}"#,
    r#"{"delta":"no type"}"#,
    r#"{"type":"response.output_text.delta","output_index":"1","delta":"x"}"#,
    r#"{"type":"response.output_text.delta","output_index":-1,"delta":"x"}"#,
    r#"{"type":"response.output_text.delta","output_index":1.0,"delta":"x"}"#,
    r#"{"type":"response.output_text.delta","output_index":123456789012345678901,"delta":"x"}"#,
    r#"{"type":"response.output_text.delta","item_id":7,"delta":"x"}"#,
    r#"{"type":"response.output_text.delta","delta":"x","response":{"usage":{"output_tokens":1}}}"#,
    r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"1}","item":{}}"#,
    r#"{"type":"response.output_text.delta","delta":"x","error":null}"#,
    r#"{"type":"response.completed","delta":"x"}"#,
    r#"{"type":"response.output_text.delta","delta":"surrogates \ud83d\ude00"}"#,
    r#"{"type":"response.output_text.delta","delta":"x","n":1e400}"#,
    r#"{"type":"response.output_text.delta","delta":"x"} trailing"#,
    r#"["type","response.output_text.delta"]"#,
];

/// The items added before the events, so that deltas find them.
const ITEMS: &str = concat!(
    r#"data: {"type":"response.output_item.added","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"f","arguments":""}}"#,
    "\n\n",
    r#"data: {"type":"response.output_item.added","output_index":1,"item":{"id":"msg_a","type":"message","content":[]}}"#,
    "\n\n",
);

/// What a Responses stream decodes to (the items of each read, the calls at
/// the end, the anomalies, the errors), read fast or (`whole`) every event
/// whole.
fn responses_run(body: &[u8], read: usize, whole: bool) -> (Vec<String>, Vec<String>, String) {
    let options = responses::Options { partial_tool_calls: read % 2 == 1, ..responses::Options::default() };
    let mut p = ResponsesProcessor::new(options);
    if whole {
        p.read_whole_events();
    }
    let mut outs = Vec::new();
    let mut results: Vec<_> =
        body.chunks(read.max(1)).map(|r| p.decode(r).map(|o| format!("{o:?}"))).collect();
    results.push(p.finish().map(|o| format!("{o:?}")));
    outs.extend(results.into_iter().map(|r| format!("{r:?}")));
    let calls = (0..p.calls().len() as u32)
        .filter_map(|n| p.calls().get(openai_stream::calls::CallId(n)))
        .map(|c| format!("{} {} {}", c.id, c.name, c.raw_arguments()))
        .collect();
    (outs, calls, format!("{:?}", p.anomalies().all()))
}

/// The fast reading of delta events decodes `body` as the whole reading
/// of every event does.
fn responses_agree(body: &[u8], read: usize) {
    let fast = responses_run(body, read, false);
    let whole = responses_run(body, read, true);
    assert_eq!(fast, whole, "the fast reading differs on {:?}", String::from_utf8_lossy(body));
}

#[test]
fn delta_events_are_read_as_the_whole_reading_reads_them() {
    for (n, line) in EVENTS.iter().enumerate() {
        let read = deltas::read(line, &mut DeltaMemo::default());
        assert_eq!(read.is_some(), n < 8, "read fast or not: {line}");
        let body = format!("{ITEMS}event: x\ndata: {line}\n\ndata: {line}\n\n");
        for read in [7, 512] {
            responses_agree(body.as_bytes(), read);
        }
    }
    // An error event is read whole, also when a template would read it.
    let error = format!("{ITEMS}data: {0}\n\nevent: error\ndata: {0}\n\n", EVENTS[0]);
    responses_agree(error.as_bytes(), 512);
}

/// An event whose item id comes last, and one with two output indexes.
const ID_LAST: &str = r#"{"type":"response.output_text.delta","delta":"x","item_id":"a"}"#;
const OUTPUT_TWICE: &str =
    r#"{"type":"response.output_text.delta","output_index":0,"delta":"x","output_index":1}"#;

#[test]
fn a_delta_event_through_the_template_is_the_scanned_event() {
    // The next event of the same item: another sequence number and delta,
    // read through the template of the first.
    for (first, next) in [
        (
            EVENTS[0],
            EVENTS[0].replace(r#"number":1,"#, r#"number":23,"#).replace("carries a ", "caf\u{e9} \\u00e9"),
        ),
        (EVENTS[1], EVENTS[1].replace(r#":7,"#, r#":8,"#)),
        (EVENTS[2], EVENTS[2].replace("x9Q", "").replace(r#""Hi""#, r#""""#)),
        (EVENTS[4], EVENTS[4].replace(r#""item_id":null"#, r#""item_id":"msg_b""#)),
        // Ids that stay holes: escaped, duplicated, longer than compared
        // whole; an empty id and one after the delta compared whole; a
        // duplicated output index read as a hole.
        (&*EVENTS[0].replace("msg_a", r"msg\u005fa"), EVENTS[0].replace("msg_a", "msg_b")),
        (&*EVENTS[5].replace("b", "c"), EVENTS[5].replace(r#""item_id":"msg_a""#, r#""item_id":"msg_b""#)),
        (&*EVENTS[0].replace("msg_a", &"m".repeat(200)), EVENTS[0].replace("msg_a", "msg_b")),
        (&*EVENTS[0].replace("msg_a", ""), EVENTS[0].replace("msg_a", "").replace("carries", "takes")),
        (ID_LAST, ID_LAST.replace(r#""x""#, r#""yz""#)),
        (OUTPUT_TWICE, OUTPUT_TWICE.replace(":0,", ":2,")),
    ] {
        let mut memo = DeltaMemo::default();
        assert!(deltas::read(first, &mut memo).is_some(), "{first}");
        let plain = deltas::plain(next.as_bytes(), &mut memo);
        assert!(plain.is_some(), "not through the template: {next}");
        assert_eq!(plain, deltas::read(&next, &mut DeltaMemo::default()), "{next}");
    }
    // Another key, another type, a value of another kind, or another item
    // is not.
    let mut memo = DeltaMemo::default();
    let _ = deltas::read(EVENTS[0], &mut memo);
    for other in [
        EVENTS[0].replace("output_text", "reasoning_summary_text"),
        EVENTS[0].replace("item_id", "item_ix"),
        EVENTS[0].replace(r#""msg_a""#, "7"),
        EVENTS[0].replace("[]", "[1]"),
        EVENTS[0].replace(r#"":1,"#, r#"":1.5,"#),
        EVENTS[0].replace(r#"a ""#, r#"a","delta":"b""#),
        EVENTS[0].replace("msg_a", "msg_b"),
        EVENTS[0].replace(r#""output_index":1"#, r#""output_index":2"#),
        EVENTS[0].replace(r#""content_index":0"#, r#""content_index":1"#),
    ] {
        assert_eq!(deltas::plain(other.as_bytes(), &mut memo), None, "{other}");
    }
    let mut memo = DeltaMemo::default();
    let _ = deltas::read(ID_LAST, &mut memo);
    assert_eq!(deltas::plain(ID_LAST.replace(r#""a""#, r#""b""#).as_bytes(), &mut memo), None);
}

#[test]
fn the_deltas_of_interleaved_items_are_read_through_a_template_each() {
    // Twelve deltas to `items` calls in turn: each call's first is
    // scanned, the rest read through its template, as the scanner reads
    // them. The memo keeps four templates: five calls in turn always find
    // theirs replaced.
    let event = |item: usize, seq: usize| {
        let id = format!("fc_{item}");
        EVENTS[1]
            .replace("fc_a", &id)
            .replace(":0,", &format!(":{item},"))
            .replace(":7,", &format!(":{seq},"))
    };
    for (items, scans) in [(1, 1), (2, 2), (3, 3), (4, 4), (5, 12)] {
        let mut memo = DeltaMemo::default();
        let mut scanned = 0;
        for seq in 0..12 {
            let text = event(seq % items, seq);
            let alone = deltas::read(&text, &mut DeltaMemo::default());
            match deltas::plain(text.as_bytes(), &mut memo) {
                Some(plain) => assert_eq!(Some(plain), alone, "{text}"),
                None => {
                    scanned += 1;
                    assert_eq!(deltas::read(&text, &mut memo), alone, "{text}");
                }
            }
        }
        assert_eq!(scanned, scans, "{items} calls in turn");
    }
}

#[test]
fn mutated_delta_events_are_read_as_the_whole_reading_reads_them() {
    let mut hits = 0usize;
    for line in EVENTS.iter().take(8) {
        mutations(line, |text| {
            let mut memo = DeltaMemo::default();
            let _ = deltas::read(line, &mut memo);
            hits += usize::from(deltas::plain(text.as_bytes(), &mut memo).is_some());
            let body = format!("{ITEMS}data: {line}\n\ndata: {text}\n\ndata: {text}\n\n");
            responses_agree(body.as_bytes(), 1 << 12);
        });
    }
    assert!(hits > 300, "only {hits} mutations were read through a template");
}

// ---- Whole events read at once ----------------------------------------------

/// What a Responses stream decodes to, read in `reads`: the items in order
/// (not by read), the calls, the anomalies other than errors, and how many
/// errors there were (the first of a read is raised, later ones are
/// recorded: how many of each depends on the reads, not their sum).
fn responses_items(
    reads: &[&[u8]],
    options: responses::Options,
) -> (Vec<String>, Vec<String>, String, usize) {
    let mut p = ResponsesProcessor::new(options);
    let (mut seen, mut errors) = (Vec::new(), 0);
    for r in reads.iter().map(Some).chain([None]) {
        let failed = match r {
            Some(r) => p.decode(r).is_err(),
            None => p.finish().is_err(),
        };
        errors += usize::from(failed);
        seen.extend(shown(p.output()));
    }
    let calls = (0..p.calls().len() as u32)
        .filter_map(|n| p.calls().get(openai_stream::calls::CallId(n)))
        .map(|c| format!("{} {} {}", c.id, c.name, c.raw_arguments()))
        .collect();
    let recorded = [AnomalyKind::ProviderError, AnomalyKind::UnreadableEvent];
    let (recorded, others): (Vec<_>, Vec<_>) =
        p.anomalies().all().iter().partition(|a| recorded.contains(&a.kind));
    (seen, calls, format!("{others:?}"), errors + recorded.len())
}

/// The items of one output, each as its Debug text.
fn shown(out: &Output) -> Vec<String> {
    out.items().map(|i| format!("{i:?}")).collect()
}

/// Where the last line of `read` ends (after its LF or CR), 0 if none does.
fn last_line_end(read: &[u8]) -> usize {
    read.iter().rposition(|&b| b == b'\n' || b == b'\r').map_or(0, |i| i + 1)
}

/// The items of a Responses processor's first read.
fn first_read(read: &[u8]) -> Vec<String> {
    let mut p = ResponsesProcessor::new(responses::Options::default());
    let _ = p.decode(read);
    shown(p.output())
}

/// An event the driver reads at once (`event:`, `data:` and a blank line,
/// each ended by a lone LF, whose JSON the template reads) decodes as its
/// lines do, whatever the framing around the delta events: in one read
/// (where such events are read at once), in two at every split, and byte by
/// byte (where they never are: no line is whole at its start); also with
/// lines around the limit, against one read per line.
#[test]
fn events_read_at_once_decode_as_their_lines_do() {
    let first = EVENTS[0];
    let next = EVENTS[0].replace(r#":1,"#, r#":2,"#).replace("carries a ", "then");
    let args = EVENTS[1].replace(r#"{\"pat"#, r#"7}"#);
    for framing in [
        "event: response.output_text.delta\ndata: {}\n\n",
        "data: {}\n\n",
        "event: error\ndata: {}\n\n",
        "event:  error \ndata: {}\n\n",
        "event: x\r\ndata: {}\n\n",
        "event: x\ndata: {}\r\n\r\n",
        "event: x\rdata: {}\n\n",
        "event: x\ndata: {}\n",
        "event: x\ndata:{}\n\n",
        "event:x\ndata: {}\n\n",
        "event: x\ndata:  {} \n\n",
        "id: 1\ndata: {}\n\n",
        ": ping\ndata: {}\n\n",
        "data: {}\ndata: {}\n\n",
        "event: x\nevent: error\ndata: {}\n\n",
        "event: x\n\ndata: {}\n\n",
        "data: {\"type\":\"response.output_text.delta\",\ndata: {}\n\n",
        "event: x\ndata: {}\n\ndata: [DONE]\n\n",
        "event: x\ndata: {}\n\nevent: error\ndata: {}\n\nevent: x\ndata: {}\n\n",
        "event: response.output_text.delta\ndata: {}\n\nevent: response.output_text.deltb\ndata: {}\n\n",
        // Name lines of 64 bytes (kept to compare) and 65 (not kept).
        "event: response.output_text.delta.aaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ndata: {}\n\n",
        "event: response.output_text.delta.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ndata: {}\n\n",
    ] {
        let framed = |event: &str| framing.replace("{}", event);
        let body = format!(
            "{ITEMS}data: {first}\n\n{}{}data: {args}\n\n{}event: x\ndata: {first}\n\n",
            framed(&next),
            framed(&args),
            framed(&next)
        );
        let bytes = body.as_bytes();
        let options = responses::Options::default();
        let whole = responses_items(&[bytes], options);
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(whole, responses_items(&singles, options), "byte by byte: {framing:?}");
        for at in 0..bytes.len() {
            let split = responses_items(&[&bytes[..at], &bytes[at..]], options);
            assert_eq!(split, whole, "split at {at}: {framing:?}");
            // The start of an event a read cuts, held to be read at once
            // with the next read, delays nothing: a read returns the items
            // of the lines it ends, as one that stops at its last line end.
            let line_end = last_line_end(&bytes[..at]);
            assert_eq!(first_read(&bytes[..at]), first_read(&bytes[..line_end]), "read of {at}: {framing:?}");
        }
    }
    let body = format!("{ITEMS}data: {first}\n\nevent: x\ndata: {next}\n\nevent: x\ndata: {next}\n\n");
    let bytes = body.as_bytes();
    // (A line over the limit is reported when its bytes pass the limit, so
    // byte by byte they are reported apart: here one read per line, where
    // no event is read at once, and the items, calls and anomalies other
    // than errors compared: how errors of one read are counted is not this
    // test's.)
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    for limit in [40, next.len() + 5, next.len() + 6, next.len() + 7] {
        let max_line_bytes = openai_stream::sse::MaxLineBytes(limit);
        let options = responses::Options { max_line_bytes, ..responses::Options::default() };
        let (whole, by_line) = (responses_items(&[bytes], options), responses_items(&lines, options));
        assert_eq!((&whole.0, &whole.1, &whole.2), (&by_line.0, &by_line.1, &by_line.2), "limit {limit}");
    }
}

/// The chat processor's items of one read each, and of `finish`.
fn chat_reads(reads: &[&[u8]]) -> Vec<Vec<String>> {
    let mut p = openai_stream::chat::ChatProcessor::new(Options::default());
    let mut outs: Vec<Vec<String>> = Vec::new();
    for r in reads {
        let _ = p.decode(r);
        outs.push(shown(p.output()));
    }
    let _ = p.finish();
    outs.push(shown(p.output()));
    outs
}

/// Chat chunks whose reads cut them (held whole up to the data line's end
/// and read at once with the next read): each read returns the items of
/// the lines it ends, in two reads at every split and in three.
#[test]
fn chat_chunks_a_read_cuts_are_read_as_their_lines_are() {
    let (text, call) = (LINES[0], LINES[2]);
    let body = format!(
        "data: {text}\n\ndata: {call}\n\ndata: {text}\r\n\r\n: ping\ndata: {text}\n\ndata: [DONE]\n\n"
    );
    let bytes = body.as_bytes();
    let whole: Vec<String> = chat_reads(&[bytes]).concat();
    // (A read that ends with a data line, before its blank line, returns
    // its item: only a cut before the data line's end is held.)
    assert_eq!(chat_reads(&[format!("data: {text}\n").as_bytes()])[0].len(), 1);
    for at in 0..=bytes.len() {
        let split = chat_reads(&[&bytes[..at], &bytes[at..]]);
        assert_eq!(split[0], chat_reads(&[&bytes[..last_line_end(&bytes[..at])]])[0], "first read of {at}");
        assert_eq!(split.concat(), whole, "split at {at}");
        let third = (at + bytes.len()) / 2;
        assert_eq!(
            chat_reads(&[&bytes[..at], &bytes[at..third], &bytes[third..]]).concat(),
            whole,
            "at {at}, {third}"
        );
    }
}

/// A read that ends with a delta event's data line, before its blank line,
/// returns the delta: only a cut before the data line's end is held.
#[test]
fn a_read_that_ends_a_data_line_returns_its_item() {
    let first = EVENTS[0];
    let event = format!("event: response.output_text.delta\ndata: {first}\n");
    for body in [format!("{ITEMS}{event}"), format!("{ITEMS}{event}\n{event}")] {
        assert_eq!(
            first_read(body.as_bytes()).iter().filter(|i| i.contains("carries a ")).count(),
            body.matches("carries a ").count()
        );
    }
}
