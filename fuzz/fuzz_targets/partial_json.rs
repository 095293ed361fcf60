//! The incremental JSON parser, fed arbitrary text in fuzzer-chosen
//! fragments, against serde_json as the oracle.
//!
//! Input: one seed byte for the split points, then the text (invalid UTF-8
//! is replaced, fragments are cut at char boundaries, since a tool call's
//! arguments fragments are Rust strings).
//!
//! Invariants:
//! - no panic; the view events are well formed (the mirror panics otherwise);
//! - fragmented and whole parsing give the same value, or the same error at
//!   the same offset;
//! - after every feed the view is consistent with the final value (a prefix
//!   of it), and after the last feed it is the final value;
//! - we accept exactly what serde_json accepts, with two honest exceptions:
//!   numbers outside f64 (`1e400`) are valid JSON that serde_json's `Value`
//!   rejects (its syntax-only `IgnoredAny` pass accepts them), and nesting:
//!   we allow 128 open containers and fail deeper ones with `TooDeep` at the
//!   129th, which is checked against an independent depth count.
#![no_main]

mod common;

use common::{consistent, cut, longest_piece, ruby_view, to_serde, Mirror, Rng};
use libfuzzer_sys::fuzz_target;
use openai_stream::json::{
    parse_complete, IncrementalParser, JsonValue, SyntaxErrorKind, ViewEvents, DEFAULT_MAX_DEPTH,
};

fuzz_target!(|data: &[u8]| run(data));

fn run(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(body);
    let text: &str = &text;

    let fragments = split(text, seed);
    let mut parser = IncrementalParser::new();
    let mut events = ViewEvents::default();
    let mut mirror = Mirror::default();
    // The mirror's state after each successful feed, to check against the
    // final value once it is known.
    let mut snapshots: Vec<(Option<JsonValue>, Vec<common::Slot>, bool)> = Vec::new();
    let mut feed_error = None;
    for fragment in &fragments {
        events.clear();
        let result = parser.feed(fragment, &mut events);
        for event in events.iter() {
            mirror.apply(event);
        }
        match result {
            Ok(()) => snapshots.push((mirror.root.clone(), mirror.path.clone(), mirror.root_open)),
            Err(e) => {
                // Poisoned: every later feed returns the same error.
                assert_eq!(parser.feed("1", &mut ()), Err(e.clone()));
                feed_error = Some(e);
                break;
            }
        }
    }
    let ours = match feed_error {
        Some(e) => Err(e),
        None => parser.finish(),
    };

    // Fragmentation does not matter.
    let whole = parse_complete(text);
    assert_eq!(ours, whole, "fragments {fragments:?} vs whole");

    if let Ok(value) = &ours {
        for (root, path, root_open) in &snapshots {
            if let Some(view) = root {
                let open = root_open.then_some(&path[..]);
                assert!(consistent(view, value, open), "view {view:?} (open {open:?}) vs final {value:?}");
            }
        }
        // After the last feed the view is the value, except a number at
        // the root, which only `finish` completes (no event).
        match (&mirror.root, value) {
            (None, JsonValue::Number(_)) => {}
            (view, value) => assert_eq!(view.as_ref(), Some(&ruby_view(value)), "final view"),
        }
        assert!(!mirror.root_open && mirror.path.is_empty(), "containers left open: {mirror:?}");
    }

    oracle(text, &ours);
}

fn oracle(text: &str, ours: &Result<JsonValue, openai_stream::json::SyntaxError>) {
    // Syntax only: no range check for numbers, no depth limit (it keeps an
    // explicit stack), no surrogate pairing check.
    let syntax = serde_json::from_str::<serde::de::IgnoredAny>(text);
    match ours {
        Ok(value) => {
            assert!(syntax.is_ok(), "we accepted what serde_json's grammar rejects: {syntax:?}");
            assert!(depth(value) <= DEFAULT_MAX_DEPTH);
            match (full_parse(text), to_serde(value)) {
                (Some(Ok(expected)), Some(got)) => assert_eq!(got, expected, "value differs from serde_json"),
                (Some(Ok(expected)), None) => {
                    panic!("serde_json read {expected} but a number of ours does not")
                }
                (Some(Err(e)), _) => assert!(
                    e.to_string().contains("number out of range"),
                    "serde_json rejects what we accept: {e}"
                ),
                (None, _) => {}
            }
        }
        Err(e) if e.kind == SyntaxErrorKind::TooDeep => {
            assert_eq!(
                depth_at(text, e.offset),
                Some(DEFAULT_MAX_DEPTH + 1),
                "TooDeep at byte {} is not the container past the limit",
                e.offset
            );
        }
        Err(e) => {
            if let Some(full) = full_parse(text) {
                assert!(full.is_err(), "we rejected ({e}) what serde_json accepts");
            }
            // Lone surrogates pass serde_json's syntax-only pass.
            if e.kind != SyntaxErrorKind::InvalidUnicode {
                assert!(syntax.is_err(), "we rejected ({e}) what serde_json's grammar accepts");
            }
        }
    }
}

/// serde_json's full parse with no recursion limit, when the text is small
/// enough for its recursion to be safe on the stack.
fn full_parse(text: &str) -> Option<Result<serde_json::Value, serde_json::Error>> {
    if text.len() > 64 * 1024 {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = serde::Deserialize::deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    Some(value)
}

/// Nesting depth of a value (arrays and objects).
fn depth(v: &JsonValue) -> usize {
    match v {
        JsonValue::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        JsonValue::Object(pairs) => 1 + pairs.iter().map(|(_, v)| depth(v)).max().unwrap_or(0),
        _ => 0,
    }
}

/// Open containers once the byte at `offset` is read, counting brackets
/// outside strings; `None` if `offset` is not a `[` or `{` outside a string.
fn depth_at(text: &str, offset: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if i == offset {
            return (!in_string && matches!(b, b'[' | b'{')).then_some(depth);
        }
    }
    None
}

/// Cuts `text` at char boundaries: sometimes byte by byte, sometimes in
/// short or long runs.
fn split(text: &str, seed: u8) -> Vec<&str> {
    let mut rng = Rng::new(u64::from(seed));
    let longest = longest_piece(seed, 4, 32, text.len());
    let mut out: Vec<&str> = cut(text.len(), || 1 + rng.below(longest), |end| text.is_char_boundary(end))
        .into_iter()
        .map(|piece| &text[piece])
        .collect();
    if out.is_empty() || seed & 0x10 != 0 {
        // An empty fragment is a valid feed too.
        out.insert(rng.below(out.len() + 1), "");
    }
    out
}
