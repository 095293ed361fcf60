//! Errors the processor reports to its caller. Each carries what the caller
//! needs to say what went wrong without the whole payload.

use crate::json::JsonValue;

/// Why a stream could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamErrorKind {
    /// A data payload that starts like JSON but does not parse.
    InvalidJson,
    /// Invalid UTF-8 inside a data payload.
    InvalidUtf8,
    /// JSON nested deeper than the parser's limit.
    TooDeep,
    /// A line (or an event) longer than the processor's limit.
    LineTooLong,
    /// The value handed to the processor is not a chunk.
    InvalidChunk,
}

impl StreamErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            StreamErrorKind::InvalidJson => "invalid_json",
            StreamErrorKind::InvalidUtf8 => "invalid_utf8",
            StreamErrorKind::TooDeep => "too_deep",
            StreamErrorKind::LineTooLong => "line_too_long",
            StreamErrorKind::InvalidChunk => "invalid_chunk",
        }
    }

    /// A limit that protects the process (line length, nesting depth): raised
    /// even when unreadable events are skipped.
    pub fn is_limit(self) -> bool {
        matches!(self, StreamErrorKind::TooDeep | StreamErrorKind::LineTooLong)
    }
}

/// An error of the processor.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The provider sent an error inside the stream (after HTTP 200).
    /// `payload` is the error object (`{"error": {...}}`), or the whole
    /// event when the error is the event itself (vLLM's `object: "error"`);
    /// `None` when only the caller still has it (a Ruby Hash).
    #[error("provider error: {message}")]
    Provider { message: String, payload: Option<JsonValue> },
    /// Bytes that cannot be read as an SSE stream of JSON chunks.
    #[error("{message}")]
    Stream { kind: StreamErrorKind, message: String, excerpt: String },
    /// A tool call whose arguments do not parse, even after repair.
    #[error("tool call {name:?} (id {id:?}) has invalid arguments: {message}")]
    Arguments { id: String, name: String, raw: String, message: String },
}

impl Error {
    pub(crate) fn stream(kind: StreamErrorKind, message: String, excerpt: String) -> Self {
        Error::Stream { kind, message, excerpt }
    }
}

/// Whether an in-band `error` value says there was one: not when it is
/// empty (`null`, `false`, `""`, `{}`), which some servers send with
/// every event (rule 40).
pub(crate) fn says_error(value: &JsonValue) -> bool {
    match value {
        JsonValue::Null | JsonValue::Bool(false) => false,
        JsonValue::String(s) => !s.is_empty(),
        JsonValue::Object(pairs) => !pairs.is_empty(),
        _ => true,
    }
}
