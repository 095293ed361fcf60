//! The processor: chunks (parsed by the caller, or decoded here from raw SSE
//! bytes) in, items out. It owns the calls of one stream, the usage totals
//! and the anomalies.

use crate::anomaly::{excerpt, excerpt_bytes, Anomalies, Anomaly, AnomalyKind};
use crate::calls::{CallId, Calls};
use crate::chunk::scan::{Plain, ScanMemo};
use crate::chunk::{
    Choice, Chunk, Content, ContentPart as Part, Delta, Field, Kind, List, Text, ToolCallDelta,
};
use crate::completion;
use crate::error::{Error, StreamErrorKind};
use crate::event_data::{
    completeness, glued_value_end, invalid_json, line_too_long, starts_event, truncated_event, Completeness,
};
use crate::in_band::{choice_error, provider_error_of};
use crate::json::{JsonValue, Reparsed};
use crate::legacy::{LegacyOutcome, LegacySimulator};
use crate::output::Output;
use crate::sse::{Event, Line, LineReader, DEFAULT_MAX_LINE_BYTES};
use crate::usage::{UsageMode, UsageReport, UsageTotals};

/// Events read from one line glued together (`{...}data: {...}...`); each
/// one costs a copy of the rest of the line.
const MAX_GLUED: usize = 16;

/// How a processor behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Report calls while their arguments stream (Discourse's
    /// `partial_tool_calls: true`).
    pub partial_tool_calls: bool,
    pub usage_mode: UsageMode,
    /// Longest SSE line (and event) accepted by [`Processor::decode`].
    pub max_line_bytes: usize,
    /// Also follow the stream the way the legacy Discourse processor did,
    /// to count the calls it would have run (for audits).
    pub simulate_legacy: bool,
    /// Raise a stream error for every event that cannot be read (JSON cut
    /// short or malformed, invalid UTF-8). By default such an event is
    /// skipped and reported (`unreadable_event`) and the stream goes on;
    /// limits that protect the process (`max_line_bytes`, nesting depth)
    /// raise either way.
    pub strict: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            partial_tool_calls: false,
            usage_mode: UsageMode::Current,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            simulate_legacy: false,
            strict: false,
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct Processor {
    reader: LineReader,
    state: State,
}

/// Everything but the line reader, so the reader can feed lines to it.
#[derive(Debug)]
struct State {
    options: Options,
    calls: Calls,
    usage: UsageTotals,
    anomalies: Anomalies,
    out: Output,
    /// Data lines of an event whose JSON is not complete yet.
    pending: Vec<u8>,
    /// Errors of the current line found before its own (see `on_event`).
    deferred: Vec<Error>,
    /// What followed an event's JSON on its line (`}data: [DONE]`): read as
    /// the next line (see `on_event`).
    glued: Option<Vec<u8>>,
    /// The event being applied is the head of a glued line.
    in_glued: bool,
    /// Values glued onto the current line so far (see `MAX_GLUED`).
    glued_in_line: usize,
    /// The envelope of this stream's last chunk, for the scanner.
    envelope: ScanMemo,
    /// The current event is `event: error`.
    error_event: bool,
    saw_finish_reason: bool,
    saw_done: bool,
    /// Text came out in this stream (so a whole `message` echoes it).
    streamed_text: bool,
    /// `finish` ran: the next call starts a new stream. (The calls stay
    /// until then, so the caller can read `finish`'s output.)
    ended: bool,
    /// Calls whose view events the caller has been shown.
    shown_views: Vec<CallId>,
    legacy: Option<LegacySimulator>,
    /// What the legacy processor would have run in the last finished stream.
    legacy_outcome: Option<LegacyOutcome>,
    /// SSE anomalies reported once per stream.
    reported_unprefixed: bool,
    reported_glued: bool,
    reported_fields: Vec<Vec<u8>>,
    reported_choices: bool,
    reported_usage_clamp: bool,
}

impl Default for Processor {
    fn default() -> Self {
        Processor::new(Options::default())
    }
}

impl Processor {
    pub fn new(options: Options) -> Self {
        Processor {
            reader: LineReader::new(options.max_line_bytes),
            state: State {
                options,
                calls: Calls::new(options.partial_tool_calls),
                usage: UsageTotals::default(),
                anomalies: Anomalies::default(),
                out: Output::default(),
                pending: Vec::new(),
                deferred: Vec::new(),
                glued: None,
                in_glued: false,
                glued_in_line: 0,
                envelope: ScanMemo::default(),
                error_event: false,
                saw_finish_reason: false,
                saw_done: false,
                streamed_text: false,
                ended: false,
                shown_views: Vec::new(),
                legacy: options.simulate_legacy.then(LegacySimulator::default),
                legacy_outcome: None,
                reported_unprefixed: false,
                reported_glued: false,
                reported_fields: Vec::new(),
                reported_choices: false,
                reported_usage_clamp: false,
            },
        }
    }

    pub fn options(&self) -> Options {
        self.state.options
    }

    /// One parsed streamed chunk (the Hash path).
    pub fn process_chunk(&mut self, chunk: &Chunk) -> Result<&Output, Error> {
        self.state.begin();
        self.state.apply_chunk(chunk)?;
        Ok(&self.state.out)
    }

    /// A streamed chunk that is nothing but a text delta,
    /// `{"choices":[{"delta":{"content": text}}]}` (plus keys no struct
    /// reads): does exactly what [`Processor::process_chunk`] does with it,
    /// without building it. The binding reads the Hash path's commonest
    /// event this way.
    pub fn process_text(&mut self, text: &str) -> Result<&Output, Error> {
        self.state.begin();
        // Of that chunk, apply_chunk reads only the content: no envelope,
        // error, usage or tool calls, one choice, no finish_reason (so the
        // legacy simulator, which follows tool calls, has nothing to see).
        self.state.apply_text(text);
        Ok(&self.state.out)
    }

    /// A value that is not a chunk object was given where a chunk was expected.
    pub fn process_non_object(&mut self, kind: Kind) -> Result<&Output, Error> {
        self.state.begin();
        Err(Error::stream(
            StreamErrorKind::InvalidChunk,
            format!("expected a chunk object, got {}", kind.name()),
            String::new(),
        ))
    }

    /// A whole non-streamed response: every tool call of the message.
    pub fn process_message(&mut self, chunk: &Chunk) -> Result<&Output, Error> {
        self.state.begin();
        self.state.apply_message(chunk)?;
        Ok(&self.state.out)
    }

    /// Raw bytes from the HTTP body, split anywhere. The whole read is
    /// always decoded: when a line cannot be read, the first such error of
    /// the read is returned (after the rest of the read, whose items are in
    /// [`Processor::output`]), and later ones are recorded as anomalies. So
    /// nothing is held back for the next read and nothing is lost.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<&Output, Error> {
        self.state.begin();
        let state = &mut self.state;
        let mut first_error = None;
        self.reader.feed(bytes, &mut |event| state.on_event(event, &mut first_error, false));
        match first_error {
            None => Ok(&self.state.out),
            Some(e) => Err(e),
        }
    }

    /// End of stream: the last buffered event is read, every open call is
    /// completed in order of first appearance, and the processor is ready for
    /// a new stream (usage and anomalies are kept). The stream is over, so
    /// bytes that cannot be read any more are recorded, not raised, and the
    /// calls are still returned; a provider error is raised after the calls
    /// are completed, so they are in [`Processor::output`].
    pub fn finish(&mut self) -> Result<&Output, Error> {
        self.state.begin();
        let mut first_error = None;
        let state = &mut self.state;
        self.reader.finish(&mut |event| state.on_event(event, &mut first_error, true));
        let flushed = self.state.flush_pending(true);
        self.state.settle(flushed, &mut first_error, true);
        let state = &mut self.state;
        if state.calls.any_open() && !state.saw_finish_reason && !state.saw_done {
            let open: Vec<String> =
                state.calls.open().filter_map(|c| state.calls.get(c)).map(|c| c.id.clone()).collect();
            state.anomalies.push(Anomaly::new(
                AnomalyKind::Truncated,
                format!(
                    "stream ended without finish_reason or [DONE]; completed {} open call(s) from what arrived: {}",
                    open.len(),
                    open.join(", ")
                ),
            ));
        }
        if let Err(e) = state.complete_open() {
            first_error.get_or_insert(e);
        }
        state.ended = true;
        if let Some(legacy) = state.legacy.as_mut() {
            state.legacy_outcome = Some(legacy.finish());
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(&self.state.out),
        }
    }

    /// With [`Options::simulate_legacy`]: what the legacy processor would
    /// have run in the last finished stream.
    pub fn legacy_outcome(&self) -> Option<&LegacyOutcome> {
        self.state.legacy_outcome.as_ref()
    }

    /// The items of the last call (also after it returned an error).
    pub fn output(&self) -> &Output {
        &self.state.out
    }

    pub fn calls(&self) -> &Calls {
        &self.state.calls
    }

    /// Raw bytes held between calls to [`Processor::decode`]: the line
    /// reader's unterminated line plus the data lines of an event whose JSON
    /// is not complete; each is bounded by `max_line_bytes`.
    /// Read-only; for memory-bound checks (fuzzing).
    pub fn buffered_bytes(&self) -> usize {
        self.reader.buffered() + self.state.pending.len()
    }

    /// Usage as the readers report it.
    pub fn usage(&self) -> UsageReport {
        self.state.usage.report(self.state.options.usage_mode)
    }

    pub fn anomalies(&self) -> &Anomalies {
        &self.state.anomalies
    }

    pub fn anomalies_mut(&mut self) -> &mut Anomalies {
        &mut self.state.anomalies
    }

    /// Records an anomaly found by the caller (the binding's conversions).
    pub fn push_anomaly(&mut self, anomaly: Anomaly) {
        self.state.anomalies.push(anomaly);
    }
}

impl State {
    /// Starts an output: view events shown last time are dropped.
    #[inline(always)]
    fn begin(&mut self) {
        self.out.clear();
        if self.ended {
            self.end_stream();
        }
        for call in self.shown_views.drain(..) {
            self.calls.clear_view(call);
        }
    }

    fn on_event(&mut self, event: Event<'_>, first_error: &mut Option<Error>, at_end: bool) {
        self.glued_in_line = 0;
        let result = match event {
            Event::Line(line) => self.on_line(line),
            Event::TooLong(e) => {
                self.pending.clear();
                Err(self.lost(line_too_long(&e)))
            }
        };
        // Most lines: nothing to settle (a call of `settle` and of an
        // out-of-line `on_line` were a tenth of a text event).
        if result.is_err() || !self.deferred.is_empty() || self.glued.is_some() {
            self.settle(result, first_error, at_end);
        }
    }

    /// The errors of one line: those found before its own (a truncated
    /// earlier event), then its own. Then the rest of a glued line is read
    /// as the next line, as long as there is one (a loop, not recursion:
    /// `{}{}{}...` is one line).
    #[inline(never)]
    fn settle(&mut self, mut result: Result<(), Error>, first_error: &mut Option<Error>, at_end: bool) {
        loop {
            if !self.deferred.is_empty() {
                for e in std::mem::take(&mut self.deferred) {
                    self.note_error(e, first_error, at_end);
                }
            }
            if let Err(e) = result {
                self.note_error(e, first_error, at_end);
            }
            let Some(rest) = self.glued.take() else {
                return;
            };
            self.glued_in_line += 1;
            result = self.on_line(&rest);
        }
    }

    /// An error while decoding: the first of a read is returned; later ones,
    /// and stream errors at the end of the stream, are recorded. An event
    /// that cannot be read is skipped and recorded unless the processor is
    /// strict or the error is a limit that protects the process.
    fn note_error(&mut self, e: Error, first_error: &mut Option<Error>, at_end: bool) {
        let skipped = match &e {
            Error::Stream { kind, .. } => !self.options.strict && !kind.is_limit(),
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
            // Completing the call already recorded its invalid_arguments
            // anomaly (`Calls::complete`): once is enough.
            Error::Arguments { .. } => return,
        };
        self.anomalies.push(anomaly);
    }

    fn end_stream(&mut self) {
        self.ended = false;
        self.shown_views.clear();
        self.calls.clear();
        self.pending.clear();
        self.deferred.clear();
        self.error_event = false;
        self.saw_finish_reason = false;
        self.saw_done = false;
        self.streamed_text = false;
        self.reported_unprefixed = false;
        self.reported_glued = false;
        self.glued = None;
        self.reported_fields.clear();
        self.reported_choices = false;
        self.reported_usage_clamp = false;
    }

    // ---- SSE events -------------------------------------------------------

    #[inline]
    fn on_line(&mut self, line: &[u8]) -> Result<(), Error> {
        match Line::parse(line) {
            Line::Blank => {
                let r = self.flush_pending(false);
                self.error_event = false;
                r
            }
            Line::Comment(_) => Ok(()),
            Line::Field { name: b"data", value } => self.on_data(value),
            Line::Field { name: b"event", value } => {
                self.error_event = value == b"error";
                Ok(())
            }
            Line::Field { name: b"id" | b"retry", .. } => Ok(()),
            Line::Field { name, .. } if line.first() == Some(&b'{') => {
                let _ = name;
                if !self.reported_unprefixed {
                    self.reported_unprefixed = true;
                    self.anomalies.push(
                        Anomaly::new(
                            AnomalyKind::UnprefixedData,
                            "a JSON line without \"data:\" was read as data",
                        )
                        .excerpt(&String::from_utf8_lossy(&line[..line.len().min(200)])),
                    );
                }
                self.on_data(line)
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

    fn on_data(&mut self, value: &[u8]) -> Result<(), Error> {
        if !self.pending.is_empty() {
            if self.pending.len() + 1 + value.len() > self.options.max_line_bytes {
                let len = self.pending.len() + 1 + value.len();
                let head = excerpt_bytes(&self.pending);
                self.pending.clear();
                return Err(self.lost(Error::stream(
                    StreamErrorKind::LineTooLong,
                    format!(
                        "SSE event longer than {} bytes ({len} bytes of data lines)",
                        self.options.max_line_bytes
                    ),
                    head,
                )));
            }
            if starts_event(value) {
                return self.on_data_after_pending(value);
            }
            self.pending.push(b'\n');
            self.pending.extend_from_slice(value);
            let data = std::mem::take(&mut self.pending);
            return match self.payload(&data) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    self.pending = data;
                    Ok(())
                }
                Err(e) => Err(e),
            };
        }
        let trimmed = value.trim_ascii();
        match trimmed.first() {
            None => Ok(()),
            Some(_) if trimmed == b"[DONE]" => {
                self.saw_done = true;
                Ok(())
            }
            Some(b'{' | b'[') => match self.payload(trimmed)? {
                true => Ok(()),
                false => {
                    self.pending.extend_from_slice(trimmed);
                    Ok(())
                }
            },
            Some(_) if self.error_event => Err(Error::Provider {
                message: String::from_utf8_lossy(trimmed).into_owned(),
                payload: Some(JsonValue::String(String::from_utf8_lossy(trimmed).into_owned())),
            }),
            Some(_) => {
                self.anomalies.push(
                    Anomaly::new(AnomalyKind::NonJsonData, "a data payload that is not JSON was skipped")
                        .excerpt(&excerpt_bytes(trimmed)),
                );
                Ok(())
            }
        }
    }

    /// A data line that starts like a new event (`{`, `[DONE]`) while the
    /// data of an earlier line is still incomplete. Joined, they are one
    /// event when that parses (or may still parse and the line alone would
    /// not: JSON split over data lines). Otherwise the earlier data was
    /// truncated (a server or proxy cut the line and lost the blank line
    /// after it): it is reported as an unreadable event, and the new line is
    /// read on its own, so the event it carries is not lost with it.
    fn on_data_after_pending(&mut self, value: &[u8]) -> Result<(), Error> {
        let mut joined = std::mem::take(&mut self.pending);
        let truncated_len = joined.len();
        joined.push(b'\n');
        joined.extend_from_slice(value);
        let fresh = value.trim_ascii();
        match completeness(&joined) {
            Completeness::Complete => {
                return self.payload(&joined).map(|_| ());
            }
            Completeness::Incomplete if completeness(fresh) != Completeness::Complete => {
                self.pending = joined;
                return Ok(());
            }
            _ => {}
        }
        let truncated = truncated_event(&joined[..truncated_len]);
        let truncated = self.lost(truncated);
        self.deferred.push(truncated);
        self.on_data(value)
    }

    /// The end of an event: data still pending must be complete now. At the
    /// end of the stream an incomplete event is recorded (the stream was
    /// cut); before it, it is an error (issue 4: data that starts like JSON
    /// and does not parse), raised after the rest of the read is decoded.
    fn flush_pending(&mut self, at_end: bool) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.pending);
        match self.payload(&data) {
            Ok(true) => Ok(()),
            Ok(false) if at_end => {
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
            Ok(false) => Err(self.lost(truncated_event(&data))),
            Err(e) => Err(e),
        }
    }

    /// An event that cannot be read (skipped, or raised): every call open
    /// now may have lost input with it, so none of them will be repaired
    /// (see `Calls::note_lost`).
    fn lost(&mut self, e: Error) -> Error {
        if let Error::Stream { kind, excerpt, .. } = &e {
            self.calls.note_lost(&format!("an unreadable event ({}): {excerpt}", kind.name()));
        }
        e
    }

    /// An event's JSON value followed on its line by more than whitespace
    /// (Discourse's mocks glue `data: [DONE]` onto the last event): the value
    /// ends the event and the rest is read as the next line, once this
    /// line's errors are settled. The line reader hands on whole lines, so
    /// this does not depend on where reads split. Each rest is copied and
    /// read again, so a line holds at most `MAX_GLUED` glued values; what
    /// follows them is skipped as an unreadable event.
    fn glued_event(&mut self, text: &str, end: usize) -> Result<bool, Error> {
        let (head, rest) = text.split_at(end);
        if self.glued_in_line >= MAX_GLUED {
            self.calls.note_lost(&format!("the rest of a line of glued events: {}", excerpt(rest)));
            self.anomalies.push(
                Anomaly::new(
                    AnomalyKind::UnreadableEvent,
                    format!(
                        "more than {MAX_GLUED} events glued onto one line; the rest of the line was skipped"
                    ),
                )
                .excerpt(&excerpt(rest)),
            );
            self.in_glued = true;
            let applied = self.payload(head.as_bytes());
            self.in_glued = false;
            return applied.map(|_| true);
        }
        if !self.reported_glued {
            self.reported_glued = true;
            self.anomalies.push(
                Anomaly::new(
                    AnomalyKind::GluedEvent,
                    "an event's JSON was followed by more text on its line; the JSON ended the event and \
                     the rest was read as the next line",
                )
                .excerpt(&excerpt(rest)),
            );
        }
        self.in_glued = true;
        let applied = self.payload(head.as_bytes());
        self.in_glued = false;
        self.error_event = false;
        self.glued = Some(rest.as_bytes().to_vec());
        applied.map(|_| true)
    }

    /// Parses and applies one JSON payload. `Ok(false)`: the JSON is not
    /// complete yet (more data lines may follow).
    fn payload(&mut self, data: &[u8]) -> Result<bool, Error> {
        // Most events: the last delta with another string, and nothing
        // else in the chunk. (An error event, and the legacy simulator,
        // read the whole chunk.)
        if !self.error_event && self.legacy.is_none() {
            if let Some(plain) = crate::chunk::scan::plain(data, &self.envelope) {
                return self.apply_plain(&plain).map(|()| true);
            }
        }
        let text = match std::str::from_utf8(data) {
            Ok(text) => text,
            Err(e) => {
                return Err(self.lost(Error::stream(
                    StreamErrorKind::InvalidUtf8,
                    format!(
                        "invalid UTF-8 at byte {} of a data line: {}",
                        e.valid_up_to(),
                        excerpt_bytes(data)
                    ),
                    excerpt_bytes(data),
                )))
            }
        };
        // The scanner reads the usual shapes (in place: a chunk is large);
        // serde_json decides the rest.
        let mut scanned = Chunk::default();
        if crate::chunk::scan::read(text, &mut scanned, &mut self.envelope) {
            return self.apply_payload(text, &scanned);
        }
        let reparsed: JsonValue;
        let field: Field<Chunk> = match serde_json::from_str(text) {
            Ok(f) => f,
            Err(e) if e.is_eof() => return Ok(false),
            Err(e) => {
                if let (false, Some(end)) = (self.in_glued, glued_value_end(text)) {
                    return self.glued_event(text, end);
                }
                // Numbers beyond f64's range read as Infinity, as in Ruby.
                match crate::json::beyond_f64(text, &e) {
                    Some(Reparsed::Value(v)) => {
                        reparsed = v;
                        match serde::Deserialize::deserialize(&reparsed) {
                            Ok(f) => f,
                            Err(_) => return Err(self.lost(invalid_json(&e, text))),
                        }
                    }
                    Some(Reparsed::Incomplete) => return Ok(false),
                    None => return Err(self.lost(invalid_json(&e, text))),
                }
            }
        };
        let chunk = match field {
            Field::Value(c) | Field::Converted(c, _) => c,
            other => {
                let kind = match other {
                    Field::Wrong(k) => k,
                    _ => Kind::Null,
                };
                if self.error_event {
                    return Err(Error::Provider {
                        message: excerpt(text),
                        payload: serde_json::from_str(text).ok(),
                    });
                }
                self.anomalies.push(
                    Anomaly::new(
                        AnomalyKind::UnexpectedPayload,
                        format!("a data payload that is a JSON {} was skipped", kind.name()),
                    )
                    .excerpt(text),
                );
                return Ok(true);
            }
        };
        self.apply_payload(text, &chunk)
    }

    /// A chunk that is nothing but one delta (not an error event): what
    /// `apply_chunk` does with it (see `Template::plain`).
    fn apply_plain(&mut self, plain: &Plain<'_>) -> Result<(), Error> {
        match plain {
            Plain::Text(text) => {
                self.apply_text(text);
                Ok(())
            }
            Plain::Call(call) => call.with_delta(|call| {
                self.calls.begin_list();
                let mut first_error = Ok(());
                self.apply_call(call, false, &mut first_error);
                first_error
            }),
        }
    }

    /// Applies the chunk read from the JSON payload `text`.
    fn apply_payload(&mut self, text: &str, chunk: &Chunk) -> Result<bool, Error> {
        let result = if self.error_event {
            Err(provider_error_of(chunk).unwrap_or_else(|| Error::Provider {
                message: format!("error event: {}", excerpt(text)),
                payload: None,
            }))
        } else {
            self.apply_chunk(chunk)
        };
        match result {
            // The whole event is the payload when the error is the event.
            Err(Error::Provider { message, payload: None }) => {
                Err(Error::Provider { message, payload: serde_json::from_str(text).ok() })
            }
            Err(e) => Err(e),
            Ok(()) => Ok(true),
        }
    }

    // ---- chunks -----------------------------------------------------------

    fn apply_chunk(&mut self, chunk: &Chunk) -> Result<(), Error> {
        // The legacy decoder matched `data: {...}` up to the end of the
        // line: it never saw the event of a glued line.
        if let (Some(legacy), false) = (self.legacy.as_mut(), self.in_glued) {
            legacy.observe(chunk);
        }
        self.check_envelope(chunk);
        if let Some(e) = provider_error_of(chunk) {
            return Err(e);
        }
        let mut result = Ok(());
        let choice = self.first_choice(&chunk.choices);
        if let Some(choice) = choice {
            result = self.apply_choice(choice, is_whole_response(chunk));
        }
        self.apply_usage(chunk, choice);
        result
    }

    /// `object` and `message` (read for vLLM's in-band errors) of the
    /// wrong type are reported.
    #[inline(always)]
    fn check_envelope(&mut self, chunk: &Chunk) {
        if let Field::Wrong(kind) = chunk.object {
            self.ignored("object", kind);
        }
        if let Field::Wrong(kind) = chunk.message {
            self.ignored("message", kind);
        }
    }

    #[inline(always)]
    fn first_choice<'c, 'a>(&mut self, choices: &'c Field<List<Choice<'a>>>) -> Option<&'c Choice<'a>> {
        let list = self.field(choices, "choices")?;
        if list.len() > 1 && !self.reported_choices {
            self.reported_choices = true;
            self.anomalies.push(
                Anomaly::new(
                    AnomalyKind::IgnoredChoices,
                    format!("{} choices in a chunk; only the first is read", list.len()),
                )
                .field("choices"),
            );
        }
        self.field(list.first()?, "choices[0]")
    }

    /// `whole`: the chunk says it is a whole response (`object:
    /// "chat.completion"`).
    fn apply_choice(&mut self, choice: &Choice, whole: bool) -> Result<(), Error> {
        let finish_reason = self
            .field(&choice.finish_reason, "choices[0].finish_reason")
            .map(|Text(r)| &**r)
            .filter(|r| !r.is_empty());
        let finishing = finish_reason.is_some();
        let delta = match (&choice.delta, &choice.message) {
            // A whole response after its own stream (MiniMax sends one
            // after the last delta): what it holds was streamed already.
            // Only its usage (read by the caller) and finish_reason count.
            (Field::Missing | Field::Null, Field::Value(m) | Field::Converted(m, _))
                if whole && (self.streamed_text || !self.calls.is_empty()) =>
            {
                self.report_echo(m);
                &Field::Missing
            }
            // A streamed chunk with the non-streamed `message` instead of a
            // `delta` (some proxies): read it as the delta, and say so.
            (Field::Missing | Field::Null, Field::Value(_) | Field::Converted(..)) => {
                self.anomalies.push(
                    Anomaly::new(
                        AnomalyKind::ConvertedField,
                        "a streamed choice carried \"message\" instead of \"delta\"; read as the delta",
                    )
                    .field("choices[0].message"),
                );
                &choice.message
            }
            (Field::Missing | Field::Null, Field::Wrong(kind)) => {
                self.ignored("choices[0].message", *kind);
                &choice.delta
            }
            _ => &choice.delta,
        };
        if let Some(delta) = self.field(delta, "choices[0].delta") {
            self.apply_content(&delta.content);
            self.apply_tool_calls(delta, finishing)?;
        }
        if finish_reason == Some("error") {
            if let Field::Wrong(kind) = choice.native_finish_reason {
                self.ignored("choices[0].native_finish_reason", kind);
            }
        }
        if let Some(e) = choice_error(choice) {
            return Err(e);
        }
        if finishing {
            self.saw_finish_reason = true;
            self.complete_open()?;
        }
        Ok(())
    }

    /// Reports a whole `message` that repeats what the stream delivered.
    #[cold]
    fn report_echo(&mut self, message: &Delta) {
        let calls = match &message.tool_calls {
            Field::Value(list) | Field::Converted(list, _) => list.len(),
            _ => 0,
        };
        let text = match &message.content {
            Field::Value(Content::Text(t)) => excerpt(t),
            _ => String::new(),
        };
        self.anomalies.push(
            Anomaly::new(
                AnomalyKind::EchoedMessage,
                format!(
                    "a streamed event with object \"chat.completion\" repeated the whole message \
                     ({calls} tool call(s)) after its deltas; nothing of it was emitted again"
                ),
            )
            .field("choices[0].message")
            .excerpt(&text),
        );
    }

    /// The value of a field (a converted one too), or None; one of a wrong
    /// type is reported as ignored, as `name`.
    #[inline(always)]
    fn field<'c, T>(&mut self, field: &'c Field<T>, name: &'static str) -> Option<&'c T> {
        match field {
            Field::Value(v) | Field::Converted(v, _) => Some(v),
            Field::Wrong(kind) => {
                self.ignored(name, *kind);
                None
            }
            Field::Missing | Field::Null => None,
        }
    }

    #[inline(always)]
    fn apply_text(&mut self, text: &str) {
        if !text.is_empty() {
            self.out.push_text(text);
            self.streamed_text = true;
        }
    }

    #[inline(always)]
    fn apply_content(&mut self, content: &Field<Content>) {
        match content {
            Field::Value(Content::Text(t)) => self.apply_text(t),
            Field::Value(Content::Parts(parts)) => {
                let mut texts: Vec<&str> = Vec::new();
                for part in parts {
                    match part {
                        Field::Value(Part { kind: Field::Wrong(k), .. }) => {
                            self.ignored("choices[0].delta.content[].type", *k);
                        }
                        Field::Value(p) => match p.kind.get().map(|t| &*t.0) {
                            Some("text") => match &p.text {
                                Field::Value(Text(t)) | Field::Converted(Text(t), _) => texts.push(t),
                                Field::Wrong(k) => self.ignored("choices[0].delta.content[].text", *k),
                                Field::Missing | Field::Null => {}
                            },
                            // Reasoning is not content.
                            Some("thinking" | "reasoning") => {}
                            other => {
                                let what = other.map_or("untyped".to_owned(), |t| format!("{t:?}"));
                                self.anomalies.push(
                                    Anomaly::new(
                                        AnomalyKind::IgnoredContentPart,
                                        format!("a content part of type {what} was ignored"),
                                    )
                                    .field("choices[0].delta.content[]"),
                                );
                            }
                        },
                        Field::Wrong(kind) => self.ignored("choices[0].delta.content[]", *kind),
                        _ => {}
                    }
                }
                if texts.iter().any(|t| !t.is_empty()) {
                    self.streamed_text = true;
                }
                self.out.push_text_parts(texts.into_iter());
            }
            Field::Wrong(kind) => self.ignored("choices[0].delta.content", *kind),
            _ => {}
        }
    }

    fn apply_tool_calls(&mut self, delta: &Delta, finishing: bool) -> Result<(), Error> {
        let Some(list) = self.field(&delta.tool_calls, "choices[0].delta.tool_calls") else { return Ok(()) };
        if list.is_empty() && !finishing {
            return self.complete_whole_calls();
        }
        let mut first_error = Ok(());
        self.calls.begin_list();
        for item in list {
            let Some(d) = self.field(item, "choices[0].delta.tool_calls[]") else { continue };
            self.apply_call(d, finishing, &mut first_error);
        }
        first_error
    }

    /// One element of a delta's `tool_calls`; the first error of the list
    /// is kept in `first_error`.
    #[inline(always)]
    fn apply_call(&mut self, d: &ToolCallDelta, finishing: bool, first_error: &mut Result<(), Error>) {
        let before = self.calls.len();
        let applied = self.calls.apply(d, &mut self.anomalies);
        if self.calls.len() > before {
            // A call started after the last finish_reason: only a new
            // one (or [DONE]) says that it arrived whole.
            self.saw_finish_reason = false;
        }
        if let Some(replaced) = applied.replaced {
            if let Err(e) = self.complete(replaced) {
                if first_error.is_ok() {
                    *first_error = Err(e);
                }
            }
        }
        if let (Some(target), true, false) = (applied.target, applied.progressed, finishing) {
            self.out.push_progress(target);
            self.shown_views.push(target);
        }
    }

    /// `tool_calls: []`: every open call whose arguments are already a
    /// complete JSON value is complete now (as in Discourse). The others
    /// stay open: vLLM, Groq gateways and relays send `[]` on text deltas
    /// between the fragments of a call.
    #[cold]
    fn complete_whole_calls(&mut self) -> Result<(), Error> {
        let whole: Vec<CallId> = self
            .calls
            .open()
            .filter(|&c| self.calls.get(c).is_some_and(|c| c.has_whole_arguments()))
            .collect();
        let mut first_error = Ok(());
        for call in whole {
            if let Err(e) = self.complete(call) {
                if first_error.is_ok() {
                    first_error = Err(e);
                }
            }
        }
        first_error
    }

    #[inline(always)]
    fn apply_usage(&mut self, chunk: &Chunk, choice: Option<&Choice>) {
        let groq = match self.field(&chunk.x_groq, "x_groq") {
            Some(x) => self.field(&x.usage, "x_groq.usage"),
            None => None,
        };
        let own = self.field(&chunk.usage, "usage");
        // Moonshot Kimi puts it inside the finish chunk's choice.
        let inner = match choice {
            Some(c) => self.field(&c.usage, "choices[0].usage"),
            None => None,
        };
        if groq.is_none() && own.is_none() && inner.is_none() {
            // Nothing merged (most chunks): the totals, and so the clamp
            // check below, are what they were after the last merge.
            return;
        }
        let mut bad = Vec::new();
        for (usage, source) in [(groq, "x_groq."), (inner, "choices[0]."), (own, "")] {
            let Some(usage) = usage else { continue };
            self.usage.merge(usage, &mut |b| bad.push((source, b)));
        }
        for (source, b) in bad {
            let kind = if b.converted { AnomalyKind::ConvertedField } else { AnomalyKind::IgnoredField };
            let verb = if b.converted { "converted to an integer" } else { "ignored" };
            let message = match &b.value {
                Some(v) => format!(
                    "{source}{} is not a non-negative integer: {v} ({}); {verb}",
                    b.field,
                    b.kind.described()
                ),
                None => format!("{source}{} was {}; {verb}", b.field, b.kind.described()),
            };
            let mut a = Anomaly::new(kind, message).field(b.field);
            a.excerpt = b.value;
            self.anomalies.push(a);
        }
        if !self.reported_usage_clamp && self.usage.report(self.options.usage_mode).clamped {
            self.reported_usage_clamp = true;
            self.anomalies.push(Anomaly::new(
                AnomalyKind::NegativePromptTokens,
                "cache tokens exceed prompt_tokens; net prompt tokens reported as 0",
            ));
        }
    }

    // ---- non-streamed responses -------------------------------------------

    fn apply_message(&mut self, chunk: &Chunk) -> Result<(), Error> {
        self.check_envelope(chunk);
        if let Some(e) = provider_error_of(chunk) {
            return Err(e);
        }
        let mut result = Ok(());
        let choice = self.first_choice(&chunk.choices);
        if let Some(choice) = choice {
            if let Some(message) = self.field(&choice.message, "choices[0].message") {
                self.apply_content(&message.content);
                result = self.apply_whole_calls(message);
            }
            // As in a stream: what the message held stays in the output,
            // the provider's error is raised (before any arguments error).
            if let Some(e) = choice_error(choice) {
                result = Err(e);
            }
        }
        self.apply_usage(chunk, choice);
        result
    }

    /// Every element of a non-streamed `tool_calls` is one call, by
    /// position (no slotting: two calls may even share an id).
    fn apply_whole_calls(&mut self, message: &Delta) -> Result<(), Error> {
        let Some(list) = self.field(&message.tool_calls, "choices[0].message.tool_calls") else {
            return Ok(());
        };
        let mut first_error = Ok(());
        for item in list {
            let Some(d) = self.field(item, "choices[0].message.tool_calls[]") else { continue };
            let Some(call) = self.calls.add_whole(d, &mut self.anomalies) else {
                continue;
            };
            if let Err(e) = self.complete(call) {
                if first_error.is_ok() {
                    first_error = Err(e);
                }
            }
        }
        first_error
    }

    // ---- completion -------------------------------------------------------

    fn complete(&mut self, call: CallId) -> Result<(), Error> {
        completion::complete(&mut self.calls, &mut self.out, &mut self.anomalies, call)
    }

    /// Completes every open call in order of first appearance. All are
    /// completed even when one fails; the first failure is returned.
    fn complete_open(&mut self) -> Result<(), Error> {
        completion::complete_open(&mut self.calls, &mut self.out, &mut self.anomalies)
    }

    fn ignored(&mut self, field: &'static str, kind: Kind) {
        self.anomalies.push(
            Anomaly::new(AnomalyKind::IgnoredField, format!("{field} was {}; ignored", kind.described()))
                .field(field),
        );
    }
}

/// The chunk calls itself a whole response (`object: "chat.completion"`).
fn is_whole_response(chunk: &Chunk) -> bool {
    matches!(&chunk.object, Field::Value(Text(o)) if o == "chat.completion")
}

#[cfg(test)]
#[path = "processor_tests.rs"]
mod tests;
