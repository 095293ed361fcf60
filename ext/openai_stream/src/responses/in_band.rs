//! The Responses API's errors: an `error` event, a failed response's
//! `error`, or an `event: error` payload, raised as the provider's error.

use super::model::str_at;
use crate::anomaly::excerpt;
use crate::error::Error;
use crate::json::JsonValue;

/// The provider error of an `error` event, a failed response's `error`, or
/// an `event: error` payload: its `message` (also nested in `error`).
pub(super) fn provider_error(body: &JsonValue) -> Error {
    let message = str_at(body, "message")
        .or_else(|| body.get("error").and_then(|e| str_at(e, "message")))
        .or_else(|| body.get("response").and_then(|r| r.get("error")).and_then(|e| str_at(e, "message")))
        .map(str::to_owned)
        .or_else(|| body.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("error event: {}", excerpt(&body.to_json())));
    Error::Provider { message, payload: Some(body.clone()) }
}
