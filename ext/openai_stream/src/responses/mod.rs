//! The Responses API processor: streamed events (parsed by the caller, or
//! decoded here from raw SSE bytes with `event:` and `data:` lines) in, items
//! out. It shares the chat processor's driver (`driver.rs`: SSE framing and
//! the error rules of a read) and layers: the per-call argument accumulation
//! and incremental parser (`Calls`), the argument parsing and repair rules,
//! anomalies, the output buffers and the usage totals. What is its own: the
//! event model (`event.rs`) and the state per output item, keyed by
//! `output_index` and item id (`items.rs`).

mod event;
mod items;

pub use event::{DeltaEvent, ItemKind, OutputItem, Place, Status};
pub use items::Reasoning;

use crate::anomaly::{excerpt, Anomaly, AnomalyKind};
use crate::calls::CallId;
use crate::driver::{Driver, OutputLimit, Protocol, State};
use crate::error::{Error, StreamErrorKind};
use crate::event_data::invalid_json;
use crate::json::{parse_complete, JsonValue};
use crate::output::{Output, Thinking};
use crate::sse::DEFAULT_MAX_LINE_BYTES;
use crate::usage::UsageMode;

/// How a Responses processor behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Report calls while their arguments stream.
    pub partial_tool_calls: bool,
    /// Return reasoning summaries as thinking items.
    pub output_thinking: bool,
    /// Longest SSE line (and event) accepted by [`ResponsesProcessor::decode`].
    pub max_line_bytes: usize,
    /// Raise a stream error for every event that cannot be read, as the
    /// chat processor's `strict`; by default such an event is skipped and
    /// reported (`unreadable_event`), and limits raise either way.
    pub strict: bool,
    /// The calls still open at `response.incomplete`, and items whose
    /// status is `"incomplete"`.
    pub output_limit: OutputLimit,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            partial_tool_calls: false,
            output_thinking: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            strict: false,
            output_limit: OutputLimit::default(),
        }
    }
}

/// See the module documentation.
pub type ResponsesProcessor = Driver<Responses>;

/// The Responses protocol's own state of a [`ResponsesProcessor`].
#[derive(Debug, Default)]
pub struct Responses {
    options: Options,
    items: items::Items,
}

impl Default for ResponsesProcessor {
    fn default() -> Self {
        ResponsesProcessor::new(Options::default())
    }
}

impl ResponsesProcessor {
    pub fn new(options: Options) -> Self {
        let own = Responses { options, items: items::Items::default() };
        let Options { partial_tool_calls, max_line_bytes, strict, output_limit, .. } = options;
        // Usage is reported net of cached input.
        Driver::build(partial_tool_calls, max_line_bytes, strict, UsageMode::Current, output_limit, own)
    }

    /// One parsed streamed event (the Hash path).
    pub fn process_event(&mut self, event: &JsonValue) -> Result<&Output, Error> {
        self.step(|s| s.apply_value(event, false))
    }

    /// An event, or (`whole`) a whole response, as JSON text: the Hash
    /// path, whose reader writes a parsed Hash back as JSON.
    pub fn process_json(&mut self, text: &str, whole: bool) -> Result<&Output, Error> {
        self.step(|s| {
            let value = parse_complete(text)
                .map_err(|e| Error::stream(StreamErrorKind::InvalidChunk, e.to_string(), excerpt(text)))?;
            if whole {
                s.apply_message(&value)
            } else {
                s.apply_value(&value, false)
            }
        })
    }

    /// A whole non-streamed response (`output`, `usage`).
    pub fn process_message(&mut self, response: &JsonValue) -> Result<&Output, Error> {
        self.step(|s| s.apply_message(response))
    }

    /// The output item ids of a call: (`id`, `call_id`) as the server sent
    /// them (`call_id` is also the call's id, unless one was generated).
    pub fn call_item(&self, call: CallId) -> Option<(Option<&str>, Option<&str>)> {
        let (id, call_id) = self.state.own.items.call_items.get(call.index())?;
        Some((id.as_deref(), call_id.as_deref()))
    }

    /// A finished reasoning item (the number an [`crate::output::Item::Thinking`] names).
    pub fn reasoning(&self, n: u32) -> Option<&Reasoning> {
        self.state.own.items.reasonings.get(n as usize)
    }

    /// The response's output items, with `output_thinking` (the completed
    /// response's `output`, else the items seen done), for the thinking
    /// items that carry them.
    pub fn output_items(&self) -> &[JsonValue] {
        &self.state.own.items.output_items
    }

    /// Finished reasoning items that learnt the id of the message after
    /// them during the last call (their thinking items were returned
    /// earlier; the caller updates them).
    pub fn linked_reasonings(&self) -> &[u32] {
        &self.state.own.items.linked
    }

    pub fn options(&self) -> Options {
        self.state.own.options
    }
}

impl Protocol for State<Responses> {
    const EVENT: &'static str = "Responses API event (a JSON object whose \"type\" is \"response.*\")";

    fn payload(&mut self, data: &[u8]) -> Result<bool, Error> {
        let text = self.utf8(data)?;
        if !self.error_event {
            if let Ok(e) = serde_json::from_str::<DeltaEvent>(text) {
                self.saw_event = true;
                let item_id = e.item_id.as_deref().filter(|s| !s.is_empty());
                self.apply_delta(e.arguments, Place { output_index: e.output_index, item_id }, &e.delta);
                return Ok(true);
            }
        }
        let value: JsonValue = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) if e.is_eof() => return Ok(false),
            Err(e) => return Err(self.lost(invalid_json(&e, text))),
        };
        self.apply_value(&value, true).map(|()| true)
    }

    fn begin_output(&mut self) {
        self.own.items.linked.clear();
    }

    fn reset(&mut self) {
        self.own.items = items::Items::default();
    }

    /// Open calls are completed from what arrived (in order of first
    /// appearance, as `output_limit` allows after `response.incomplete`),
    /// reported unless the response said it was done with them. After web
    /// searches, one thinking item carries the output items (kept only with
    /// `output_thinking`).
    fn close(&mut self) -> Result<(), Error> {
        let result = self.close_calls();
        if self.own.items.output_items.iter().any(|i| OutputItem::read(i).kind == ItemKind::WebSearch) {
            self.out.push_thinking("", Thinking::OutputItems);
        }
        result
    }
}

impl State<Responses> {
    fn close_calls(&mut self) -> Result<(), Error> {
        let ids = self.open_ids();
        if ids.is_empty() {
            return Ok(());
        }
        let why = match self.own.items.ending.as_ref().map(|(s, r)| (*s, r.as_deref())) {
            Some((Status::Incomplete, Some(reason))) => format!("the response ended incomplete ({reason})"),
            Some((Status::Incomplete, None)) => "the response ended incomplete".to_owned(),
            Some((Status::Failed, _)) => "the response failed".to_owned(),
            Some(_) => "the response completed".to_owned(),
            None => "the stream ended before response.completed".to_owned(),
        };
        self.anomalies.push(Anomaly::new(
            AnomalyKind::Truncated,
            format!(
                "{why} with {} call(s) whose output_item.done never came: {}; each is completed from the \
                 argument deltas that arrived, unless the output limit drops it",
                ids.len(),
                ids.join(", ")
            ),
        ));
        self.complete_open()
    }

    /// One event object. `raw`: it came from the SSE stream (where an
    /// `event: error` line makes it an error).
    fn apply_value(&mut self, value: &JsonValue, raw: bool) -> Result<(), Error> {
        if raw && self.error_event {
            return Err(match value.is_object() {
                true => items::provider_error(value),
                false => Error::Provider { message: excerpt(&value.to_json()), payload: Some(value.clone()) },
            });
        }
        if !value.is_object() {
            self.anomalies.push(
                Anomaly::new(
                    AnomalyKind::UnexpectedPayload,
                    format!("an event that is a JSON {} was skipped", value.kind()),
                )
                .excerpt(&value.to_json()),
            );
            return Ok(());
        }
        self.apply_event(value)
    }

    // ---- usage -------------------------------------------------------------

    /// Merges a Responses usage object (`input_tokens`, `output_tokens`,
    /// `input_tokens_details.cached_tokens`): every field takes the latest
    /// value sent; a missing or bad field keeps the earlier one.
    fn apply_usage(&mut self, usage: &JsonValue) {
        let Some(u) = items::usage_of(usage) else {
            if !matches!(usage, JsonValue::Null) {
                self.anomalies.push(
                    Anomaly::new(
                        AnomalyKind::IgnoredField,
                        format!("usage is not an object (a JSON {}); ignored", usage.kind()),
                    )
                    .field("response.usage")
                    .excerpt(&usage.to_json()),
                );
            }
            return;
        };
        self.merge_usage(
            [(&u, "")],
            items::responses_field_name,
            "cached tokens exceed input_tokens; net prompt tokens reported as 0",
        );
    }
}

#[cfg(test)]
mod tests;
