//! The chunk scanner (the fast path of `ChatProcessor::decode`) against the
//! serde path it must agree with: whenever `chat::scan::read` accepts a
//! text, serde_json reads the same text as an object and builds exactly the
//! same `Chunk`. (When the scanner gives up, serde_json decides alone, so
//! there is nothing to compare.) The same for the Responses processor's fast
//! reading of delta events (`responses::scan`, the same scanner): whenever it
//! reads an event, through its template or not, the event's JSON value holds
//! that type, delta, item id and output index, and no response envelope.
//!
//! Input: texts separated by LF, read one after the other with one
//! envelope memo, as a processor reads a stream, so the memo (the bytes
//! before `choices` of the last chunk, the templates of the last delta
//! events, one per item) is exercised with repeated and almost repeated
//! prefixes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openai_stream::chat::{scan, Chunk};
use openai_stream::lenient::Field;
use openai_stream::responses::scan::{self as deltas, DeltaMemo};
use serde_json::Value;

/// What the Responses processor's whole reading takes from a delta event:
/// (arguments, delta, item_id, output_index); None when it is not one or
/// carries a response envelope (whose usage that reading applies).
fn whole_delta(text: &str) -> Option<(bool, String, Option<String>, Option<i64>)> {
    let value: Value = serde_json::from_str(text).ok()?;
    let arguments = match value.get("type")?.as_str()? {
        "response.output_text.delta" => false,
        "response.function_call_arguments.delta" => true,
        _ => return None,
    };
    if value.get("response").is_some_and(Value::is_object) {
        return None;
    }
    let item_id = value.get("item_id").and_then(Value::as_str).map(str::to_owned);
    let delta = value.get("delta")?.as_str()?.to_owned();
    Some((arguments, delta, item_id, value.get("output_index").and_then(Value::as_i64)))
}

fuzz_target!(|data: &[u8]| {
    let mut memo = scan::ScanMemo::default();
    let mut delta_memo = DeltaMemo::default();
    for piece in data.split(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(piece);
        let plain = deltas::plain(text.as_bytes(), &mut delta_memo);
        if let Some(event) = plain.clone().or_else(|| deltas::read(&text, &mut delta_memo)) {
            let fast = (
                event.arguments,
                event.delta.into_owned(),
                event.item_id.map(|i| i.into_owned()),
                event.output_index,
            );
            assert_eq!(Some(fast), whole_delta(&text), "fast reading vs the event's value for {text:?}");
            if plain.is_some() {
                assert_eq!(
                    plain,
                    deltas::read(&text, &mut DeltaMemo::default()),
                    "template vs scanner for {text:?}"
                );
            }
        }
        let mut scanned = Chunk::default();
        if !scan::read(&text, &mut scanned, &mut memo) {
            continue;
        }
        match serde_json::from_str::<Field<Chunk>>(&text) {
            Ok(Field::Value(chunk)) => assert_eq!(scanned, chunk, "scanner vs serde for {text:?}"),
            other => panic!("the scanner accepted {text:?}; serde_json: {other:?}"),
        }
    }
});
