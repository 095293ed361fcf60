//! Data payloads of SSE events: whether one is whole, still incomplete or
//! invalid, and the errors for those that cannot be read.

use crate::anomaly::{excerpt, excerpt_bytes};
use crate::error::{Error, StreamErrorKind};
use crate::json::{parse_complete, JsonValue};
use crate::sse::LineTooLong;

/// A data payload serde_json refused.
pub(crate) fn invalid_json(e: &serde_json::Error, text: &str) -> Error {
    let message = e.to_string();
    let kind = if message.contains("recursion limit") {
        StreamErrorKind::TooDeep
    } else {
        StreamErrorKind::InvalidJson
    };
    Error::stream(kind, format!("data line is not valid JSON ({message}): {}", excerpt(text)), excerpt(text))
}

/// A chunk or event the caller parsed, as JSON text (the Hash path): its
/// value, or an `InvalidChunk` error.
pub(crate) fn parsed_json(text: &str) -> Result<JsonValue, Error> {
    parse_complete(text).map_err(|e| invalid_chunk(e.to_string(), text))
}

/// The error for a chunk or event the caller parsed that cannot be read.
pub(crate) fn invalid_chunk(message: String, text: &str) -> Error {
    Error::stream(StreamErrorKind::InvalidChunk, message, excerpt(text))
}

/// True when a data line starts like an event of its own.
pub(crate) fn starts_event(value: &[u8]) -> bool {
    let v = value.trim_ascii();
    v.first() == Some(&b'{') || v == b"[DONE]"
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completeness {
    Complete,
    /// Valid so far, ends too early.
    Incomplete,
    Invalid,
}

/// Whether `data` is one complete JSON value (checked without building it).
pub(crate) fn completeness(data: &[u8]) -> Completeness {
    let Ok(text) = std::str::from_utf8(data) else {
        return Completeness::Invalid;
    };
    match serde_json::from_str::<crate::lenient::Skip>(text) {
        Ok(_) => Completeness::Complete,
        Err(e) if e.is_eof() => Completeness::Incomplete,
        Err(e) => match crate::json::beyond_f64(text, &e) {
            Some(crate::json::Reparsed::Value(_)) => Completeness::Complete,
            Some(crate::json::Reparsed::Incomplete) => Completeness::Incomplete,
            None => Completeness::Invalid,
        },
    }
}

/// The error for an event whose JSON ended early.
pub(crate) fn truncated_event(data: &[u8]) -> Error {
    Error::stream(
        StreamErrorKind::InvalidJson,
        format!("an event ended before its JSON was complete (truncated): {}", excerpt_bytes(data)),
        excerpt_bytes(data),
    )
}

pub(crate) fn line_too_long(e: &LineTooLong) -> Error {
    Error::stream(StreamErrorKind::LineTooLong, e.to_string(), excerpt_bytes(&e.head))
}

/// Where the first JSON value of `text` ends, when more than whitespace
/// follows it on the same line (`{...}data: [DONE]`).
pub(crate) fn glued_value_end(text: &str) -> Option<usize> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<crate::lenient::Skip>();
    match values.next() {
        Some(Ok(_)) => {
            let end = values.byte_offset();
            text.get(end..).filter(|rest| !rest.trim_ascii().is_empty()).map(|_| end)
        }
        _ => None,
    }
}
