//! The Responses API processor: streamed events (parsed by the caller, or
//! decoded here from raw SSE bytes with `event:` and `data:` lines) in, items
//! out. It shares the chat processor's layers: the SSE line reader, the
//! per-call argument accumulation and incremental parser (`Calls`), the
//! argument parsing and repair rules, anomalies, the output buffers and the
//! usage totals. What is its own: the event model (`event.rs`) and the state
//! per output item, keyed by `output_index` and item id (`items.rs`).

mod event;
mod items;

pub use event::{DeltaEvent, Event, ItemKind, OutputItem, Place, Status};
pub use items::Reasoning;

use crate::anomaly::{excerpt, excerpt_bytes, Anomalies, Anomaly, AnomalyKind};
use crate::calls::{CallId, Calls};
use crate::completion;
use crate::error::{Error, StreamErrorKind};
use crate::event_data::{
    completeness, invalid_json, line_too_long, starts_event, truncated_event, Completeness,
};
use crate::json::JsonValue;
use crate::output::Output;
use crate::sse::{Event as SseEvent, Line, LineReader, DEFAULT_MAX_LINE_BYTES};
use crate::usage::{UsageMode, UsageReport, UsageTotals};

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            partial_tool_calls: false,
            output_thinking: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            strict: false,
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct ResponsesProcessor {
    reader: LineReader,
    state: State,
}

impl Default for ResponsesProcessor {
    fn default() -> Self {
        ResponsesProcessor::new(Options::default())
    }
}

#[derive(Debug)]
struct State {
    options: Options,
    calls: Calls,
    usage: UsageTotals,
    anomalies: Anomalies,
    out: Output,
    items: items::Items,
    /// Data lines of an event whose JSON is not complete yet.
    pending: Vec<u8>,
    /// The current SSE event is `event: error`.
    error_event: bool,
    /// `finish` ran: the next call starts a new stream.
    ended: bool,
    /// Calls whose view events the caller has been shown.
    shown_views: Vec<CallId>,
    reported_fields: Vec<Vec<u8>>,
    reported_unprefixed: bool,
    reported_usage_clamp: bool,
}

impl ResponsesProcessor {
    pub fn new(options: Options) -> Self {
        ResponsesProcessor {
            reader: LineReader::new(options.max_line_bytes),
            state: State {
                options,
                calls: Calls::new(options.partial_tool_calls),
                usage: UsageTotals::default(),
                anomalies: Anomalies::default(),
                out: Output::default(),
                items: items::Items::default(),
                pending: Vec::new(),
                error_event: false,
                ended: false,
                shown_views: Vec::new(),
                reported_fields: Vec::new(),
                reported_unprefixed: false,
                reported_usage_clamp: false,
            },
        }
    }

    pub fn options(&self) -> Options {
        self.state.options
    }

    /// One parsed streamed event (the Hash path).
    pub fn process_event(&mut self, event: &JsonValue) -> Result<&Output, Error> {
        self.state.begin();
        self.state.apply_value(event, false)?;
        Ok(&self.state.out)
    }

    /// A text or arguments delta read by [`DeltaEvent`]: does what
    /// [`ResponsesProcessor::process_event`] does with the same event.
    pub fn process_delta(&mut self, event: &DeltaEvent) -> Result<&Output, Error> {
        self.state.begin();
        self.state.apply_delta(event);
        Ok(&self.state.out)
    }

    /// A whole non-streamed response (`output`, `usage`).
    pub fn process_message(&mut self, response: &JsonValue) -> Result<&Output, Error> {
        self.state.begin();
        self.state.apply_message(response)?;
        Ok(&self.state.out)
    }

    /// Raw bytes from the HTTP body, split anywhere. As with the chat
    /// processor, the whole read is decoded; the first error of the read is
    /// returned after it (its items are in [`ResponsesProcessor::output`]),
    /// later ones are anomalies.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<&Output, Error> {
        self.state.begin();
        let state = &mut self.state;
        let mut first_error = None;
        self.reader.feed(bytes, &mut |event| state.on_sse(event, &mut first_error, false));
        match first_error {
            None => Ok(&self.state.out),
            Some(e) => Err(e),
        }
    }

    /// End of stream: the last buffered event is read, every call still open
    /// is completed from what arrived (the response did not complete it: an
    /// anomaly), and the processor is ready for a new stream.
    pub fn finish(&mut self) -> Result<&Output, Error> {
        self.state.begin();
        let mut first_error = None;
        let state = &mut self.state;
        self.reader.finish(&mut |event| state.on_sse(event, &mut first_error, true));
        if let Err(e) = self.state.flush_pending(true) {
            self.state.note_error(e, &mut first_error, true);
        }
        if let Err(e) = self.state.complete_open_at_end() {
            first_error.get_or_insert(e);
        }
        self.state.ended = true;
        match first_error {
            Some(e) => Err(e),
            None => Ok(&self.state.out),
        }
    }

    /// The items of the last call (also after it returned an error).
    pub fn output(&self) -> &Output {
        &self.state.out
    }

    pub fn calls(&self) -> &Calls {
        &self.state.calls
    }

    /// The output item ids of a call: (`id`, `call_id`) as the server sent
    /// them (`call_id` is also the call's id, unless one was generated).
    pub fn call_item(&self, call: CallId) -> Option<(Option<&str>, Option<&str>)> {
        self.state.items.call_item(call)
    }

    /// A finished reasoning item (the number an [`crate::output::Item::Thinking`] names).
    pub fn reasoning(&self, n: u32) -> Option<&Reasoning> {
        self.state.items.reasoning(n)
    }

    /// Finished reasoning items that learnt the id of the message after
    /// them during the last call (their thinking items were returned
    /// earlier; the caller updates them).
    pub fn linked_reasonings(&self) -> &[u32] {
        self.state.items.linked()
    }

    /// Raw bytes held between reads (bounded by `max_line_bytes` each).
    pub fn buffered_bytes(&self) -> usize {
        self.reader.buffered() + self.state.pending.len()
    }

    /// Usage as the readers report it: prompt tokens net of cached input.
    pub fn usage(&self) -> UsageReport {
        self.state.usage.report(UsageMode::Current)
    }

    pub fn anomalies(&self) -> &Anomalies {
        &self.state.anomalies
    }

    pub fn anomalies_mut(&mut self) -> &mut Anomalies {
        &mut self.state.anomalies
    }

    pub fn push_anomaly(&mut self, anomaly: Anomaly) {
        self.state.anomalies.push(anomaly);
    }
}

impl State {
    fn begin(&mut self) {
        self.out.clear();
        self.items.begin();
        if self.ended {
            self.end_stream();
        }
        for call in self.shown_views.drain(..) {
            self.calls.clear_view(call);
        }
    }

    fn end_stream(&mut self) {
        self.ended = false;
        self.shown_views.clear();
        self.calls.clear();
        self.items.clear();
        self.pending.clear();
        self.error_event = false;
        self.reported_fields.clear();
        self.reported_unprefixed = false;
        self.reported_usage_clamp = false;
    }

    // ---- SSE framing (over the shared line reader) -------------------------

    fn on_sse(&mut self, event: SseEvent<'_>, first_error: &mut Option<Error>, at_end: bool) {
        let result = match event {
            SseEvent::Line(line) => self.on_line(line, first_error, at_end),
            SseEvent::TooLong(e) => {
                self.pending.clear();
                Err(line_too_long(&e))
            }
        };
        if let Err(e) = result {
            self.note_error(e, first_error, at_end);
        }
    }

    /// The rules of the chat processor: the first error of a read is
    /// returned; later ones, and stream errors at the end of the stream,
    /// are recorded; an event that cannot be read is skipped and recorded
    /// unless the processor is strict or a limit was hit. Every open call
    /// may have lost input with an unreadable event: none is repaired.
    fn note_error(&mut self, e: Error, first_error: &mut Option<Error>, at_end: bool) {
        let skipped = match &e {
            Error::Stream { kind, excerpt, .. } => {
                self.calls.note_lost(&format!("an unreadable event ({}): {excerpt}", kind.name()));
                !self.options.strict && !kind.is_limit()
            }
            _ => false,
        };
        let raise = first_error.is_none() && !skipped && !(at_end && matches!(e, Error::Stream { .. }));
        if raise {
            *first_error = Some(e);
            return;
        }
        let anomaly = match e {
            Error::Stream { message, excerpt, .. } => {
                let what = if skipped {
                    "an event that could not be read was skipped"
                } else if at_end {
                    "an event at the end of the stream could not be read"
                } else {
                    "an event after an earlier error in the same read could not be read"
                };
                Anomaly::new(AnomalyKind::UnreadableEvent, format!("{what}: {message}")).excerpt(&excerpt)
            }
            Error::Provider { message, .. } => Anomaly::new(
                AnomalyKind::ProviderError,
                format!("the provider sent another error in the same read: {message}"),
            ),
            // Already recorded as invalid_arguments when the call completed.
            Error::Arguments { .. } => return,
        };
        self.anomalies.push(anomaly);
    }

    fn on_line(&mut self, line: &[u8], first_error: &mut Option<Error>, at_end: bool) -> Result<(), Error> {
        match Line::parse(line) {
            Line::Blank => {
                let r = self.flush_pending(false);
                self.error_event = false;
                r
            }
            Line::Comment(_) => Ok(()),
            Line::Field { name: b"data", value } => self.on_data(value, first_error, at_end),
            Line::Field { name: b"event", value } => {
                self.error_event = value.trim_ascii() == b"error";
                Ok(())
            }
            Line::Field { name: b"id" | b"retry", .. } => Ok(()),
            Line::Field { .. } if line.first() == Some(&b'{') => {
                if !self.reported_unprefixed {
                    self.reported_unprefixed = true;
                    self.anomalies.push(
                        Anomaly::new(
                            AnomalyKind::UnprefixedData,
                            "a JSON line without \"data:\" was read as data",
                        )
                        .excerpt(&excerpt_bytes(line)),
                    );
                }
                self.on_data(line, first_error, at_end)
            }
            Line::Field { name, .. } => {
                if !self.reported_fields.iter().any(|f| f == name) && self.reported_fields.len() < 16 {
                    self.reported_fields.push(name.to_vec());
                    self.anomalies.push(
                        Anomaly::new(
                            AnomalyKind::UnknownSseField,
                            format!("SSE field {:?} is not known; skipped", excerpt_bytes(name)),
                        )
                        .excerpt(&excerpt_bytes(line)),
                    );
                }
                Ok(())
            }
        }
    }

    fn on_data(&mut self, value: &[u8], first_error: &mut Option<Error>, at_end: bool) -> Result<(), Error> {
        let fresh = value.trim_ascii();
        if !self.pending.is_empty() {
            let mut joined = std::mem::take(&mut self.pending);
            if joined.len() + 1 + value.len() > self.options.max_line_bytes {
                return Err(Error::stream(
                    StreamErrorKind::LineTooLong,
                    format!(
                        "SSE event longer than {} bytes ({} bytes of data lines)",
                        self.options.max_line_bytes,
                        joined.len() + 1 + value.len()
                    ),
                    excerpt_bytes(&joined),
                ));
            }
            let earlier = joined.len();
            joined.push(b'\n');
            joined.extend_from_slice(value);
            match completeness(&joined) {
                Completeness::Complete => return self.payload(&joined).map(|_| ()),
                Completeness::Incomplete
                    if !starts_event(value) || completeness(fresh) != Completeness::Complete =>
                {
                    self.pending = joined;
                    return Ok(());
                }
                _ if starts_event(value) => {
                    // The earlier data was cut; this line is an event of its own.
                    let e = truncated_event(&joined[..earlier]);
                    self.note_error(e, first_error, at_end);
                }
                _ => return Err(truncated_event(&joined)),
            }
        }
        match fresh.first() {
            None => Ok(()),
            Some(_) if fresh == b"[DONE]" => Ok(()),
            // Parsed at once (no separate completeness check): JSON that
            // ends early waits for the next data line.
            Some(b'{' | b'[') => match self.payload(fresh)? {
                true => Ok(()),
                false => {
                    self.pending.extend_from_slice(fresh);
                    Ok(())
                }
            },
            Some(_) if self.error_event => {
                let text = String::from_utf8_lossy(fresh).into_owned();
                Err(Error::Provider { message: text.clone(), payload: Some(JsonValue::String(text)) })
            }
            Some(_) => {
                self.anomalies.push(
                    Anomaly::new(AnomalyKind::NonJsonData, "a data payload that is not JSON was skipped")
                        .excerpt(&excerpt_bytes(fresh)),
                );
                Ok(())
            }
        }
    }

    /// The end of an SSE event: pending data must be complete now.
    fn flush_pending(&mut self, at_end: bool) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.pending);
        match completeness(&data) {
            Completeness::Complete => self.payload(&data).map(|_| ()),
            Completeness::Incomplete if at_end => {
                self.calls
                    .note_lost(&format!("an event cut by the end of the stream: {}", excerpt_bytes(&data)));
                self.anomalies.push(
                    Anomaly::new(
                        AnomalyKind::TruncatedEvent,
                        "the stream ended inside an event whose JSON was not complete; skipped",
                    )
                    .excerpt(&excerpt_bytes(&data)),
                );
                Ok(())
            }
            Completeness::Incomplete => Err(truncated_event(&data)),
            Completeness::Invalid => self.payload(&data).map(|_| ()),
        }
    }

    /// Parses and applies one JSON payload. `Ok(false)`: the JSON ended
    /// early (more data lines may follow); nothing was applied.
    fn payload(&mut self, data: &[u8]) -> Result<bool, Error> {
        let text = std::str::from_utf8(data).map_err(|e| {
            Error::stream(
                StreamErrorKind::InvalidUtf8,
                format!("invalid UTF-8 at byte {} of a data line: {}", e.valid_up_to(), excerpt_bytes(data)),
                excerpt_bytes(data),
            )
        })?;
        if !self.error_event {
            if let Ok(event) = serde_json::from_str::<DeltaEvent>(text) {
                self.apply_delta(&event);
                return Ok(true);
            }
        }
        let value: JsonValue = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) if e.is_eof() => return Ok(false),
            Err(e) => return Err(invalid_json(&e, text)),
        };
        self.apply_value(&value, true).map(|()| true)
    }

    /// One event object. `raw`: it came from the SSE stream (where an
    /// `event: error` line makes it an error).
    fn apply_value(&mut self, value: &JsonValue, raw: bool) -> Result<(), Error> {
        if !value.is_object() {
            if raw && self.error_event {
                return Err(Error::Provider {
                    message: excerpt(&value.to_json()),
                    payload: Some(value.clone()),
                });
            }
            self.anomalies.push(
                Anomaly::new(
                    AnomalyKind::UnexpectedPayload,
                    format!("an event that is a JSON {} was skipped", value.kind()),
                )
                .excerpt(&value.to_json()),
            );
            return Ok(());
        }
        if raw && self.error_event {
            return Err(items::provider_error(value));
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
        let mut bad = Vec::new();
        self.usage.merge(&u, &mut |b| bad.push(b));
        for b in bad {
            let kind = if b.converted { AnomalyKind::ConvertedField } else { AnomalyKind::IgnoredField };
            let verb = if b.converted { "converted to an integer" } else { "ignored" };
            let field = items::responses_field_name(b.field);
            let message = match &b.value {
                Some(v) => {
                    format!("{field} is not a non-negative integer: {v} ({}); {verb}", b.kind.described())
                }
                None => format!("{field} was {}; {verb}", b.kind.described()),
            };
            let mut a = Anomaly::new(kind, message).field(field);
            a.excerpt = b.value;
            self.anomalies.push(a);
        }
        if !self.reported_usage_clamp && self.usage.report(UsageMode::Current).clamped {
            self.reported_usage_clamp = true;
            self.anomalies.push(Anomaly::new(
                AnomalyKind::NegativePromptTokens,
                "cached tokens exceed input_tokens; net prompt tokens reported as 0",
            ));
        }
    }

    // ---- completion --------------------------------------------------------

    fn complete(&mut self, call: CallId) -> Result<(), Error> {
        completion::complete(&mut self.calls, &mut self.out, &mut self.anomalies, call)
    }

    /// At the end of the stream: open calls are completed from what arrived
    /// (in order of first appearance), reported unless the response said it
    /// was done with them. The first failure is returned.
    fn complete_open_at_end(&mut self) -> Result<(), Error> {
        let open: Vec<CallId> = self.calls.open().collect();
        if open.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = open.iter().filter_map(|&c| self.calls.get(c)).map(|c| c.id.clone()).collect();
        let why = match self.items.ending() {
            Some((Status::Incomplete, Some(reason))) => format!("the response ended incomplete ({reason})"),
            Some((Status::Incomplete, None)) => "the response ended incomplete".to_owned(),
            Some((Status::Failed, _)) => "the response failed".to_owned(),
            Some(_) => "the response completed".to_owned(),
            None => "the stream ended before response.completed".to_owned(),
        };
        self.anomalies.push(Anomaly::new(
            AnomalyKind::Truncated,
            format!(
                "{why} with {} call(s) whose output_item.done never came; completed from the argument deltas that arrived: {}",
                ids.len(),
                ids.join(", ")
            ),
        ));
        completion::complete_open(&mut self.calls, &mut self.out, &mut self.anomalies)
    }
}

#[cfg(test)]
mod tests;
