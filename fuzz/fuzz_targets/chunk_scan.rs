//! The chunk scanner (the fast path of `ChatProcessor::decode`) against the
//! serde path it must agree with: whenever `chat::scan::read` accepts a
//! text, serde_json reads the same text as an object and builds exactly the
//! same `Chunk`. (When the scanner gives up, serde_json decides alone, so
//! there is nothing to compare.)
//!
//! Input: texts separated by LF, read one after the other with one
//! envelope memo, as a processor reads a stream, so the memo (the bytes
//! before `choices` of the last chunk) is exercised with repeated and almost
//! repeated prefixes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openai_stream::chat::{scan, Chunk};
use openai_stream::lenient::Field;

fuzz_target!(|data: &[u8]| {
    let mut memo = scan::ScanMemo::default();
    for piece in data.split(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(piece);
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
