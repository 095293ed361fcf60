//! In-band provider errors: an error sent as a chunk after HTTP 200
//! (`{"error": ...}`, vLLM's `object: "error"`, OpenRouter's choice error).

use super::{Choice, Chunk};
use crate::anomaly::excerpt;
use crate::error::{says_error, Error};
use crate::json::JsonValue;
use crate::lenient::{Any, Field, Text};

/// An in-band error in a chunk: `{"error": ...}` or vLLM's `object: "error"`.
#[inline(always)]
pub(crate) fn provider_error_of(chunk: &Chunk) -> Option<Error> {
    if let Some(v) = present_error(&chunk.error) {
        return Some(Error::Provider { message: error_message(v), payload: Some(v.clone()) });
    }
    if let Field::Value(Text(object)) = &chunk.object {
        if object == "error" {
            let message = match &chunk.message {
                Field::Value(Text(m)) if !m.is_empty() => m.to_string(),
                _ => "the provider sent an error event".to_owned(),
            };
            return Some(Error::Provider { message, payload: None });
        }
    }
    None
}

/// OpenRouter: a choice that ended in an error (`error` next to
/// `finish_reason: "error"`, or either alone). With no error object, the
/// message names the `native_finish_reason` when there is one.
#[inline(always)]
pub(crate) fn choice_error(choice: &Choice) -> Option<Error> {
    let error = present_error(&choice.error);
    let finished_in_error = matches!(&choice.finish_reason, Field::Value(Text(r)) if r == "error");
    if !finished_in_error && error.is_none() {
        return None;
    }
    let message = error.map(error_message).unwrap_or_else(|| match &choice.native_finish_reason {
        // OpenRouter relays the upstream's own reason (Gemini's
        // MALFORMED_FUNCTION_CALL): the only diagnosis there is.
        Field::Value(Text(native)) if finished_in_error && !native.is_empty() => format!(
            "the provider ended the response with finish_reason \"error\" (native finish reason: {})",
            excerpt(native)
        ),
        _ => "the provider ended the response with finish_reason \"error\"".to_owned(),
    });
    Some(Error::Provider { message, payload: error.cloned() })
}

/// An `error` field's value, unless it is absent or says no error.
fn present_error(field: &Field<Any>) -> Option<&JsonValue> {
    field.get().map(|Any(v)| v).filter(|v| says_error(v))
}

/// The human message of an error payload: its `message` (also nested in
/// `error`), else the payload as JSON.
fn error_message(v: &JsonValue) -> String {
    match v {
        JsonValue::String(s) => s.clone(),
        JsonValue::Object(_) => {
            if let Some(m) = v.get("message").and_then(JsonValue::as_str) {
                return m.to_owned();
            }
            if let Some(inner) = v.get("error") {
                return error_message(inner);
            }
            excerpt(&v.to_json())
        }
        other => excerpt(&other.to_json()),
    }
}
