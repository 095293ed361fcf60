//! What both protocol processors (chat completions, `chat`, and
//! Responses, `responses`) share: the driver over the SSE line reader, the
//! state of one stream, the framing of data lines into JSON payloads, the
//! error rules of a read, usage totals and the completion of tool calls.
//! A protocol adds its own state (`P`) and reads the payloads ([`Protocol`]).

use crate::anomaly::{excerpt_bytes, Anomalies, Anomaly, AnomalyKind};
use crate::calls::{CallId, Calls};
use crate::error::{Error, StreamErrorKind};
use crate::event_data::{
    completeness, invalid_json, line_too_long, starts_event, truncated_event, Completeness,
};
use crate::json::{beyond_f64, JsonValue, Reparsed};
use crate::output::Output;
use crate::scan::same;
use crate::sse::{Block, Event, Line, LineReader, Sink};
use crate::usage::Usage;
use crate::usage::{UsageMode, UsageReport, UsageTotals};
use memchr::memchr2;

/// What becomes of the tool calls still open when the output limit stops a
/// response (chat: `finish_reason: "length"`; Responses: `response.incomplete`,
/// or an item whose status is `"incomplete"`). A call not handed out is
/// reported (`dropped_call`): never repaired, never `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputLimit {
    /// None is handed out (newest Discourse).
    Drop,
    /// Those whose arguments are a complete JSON value are handed out.
    #[default]
    DropCut,
    /// Each is completed as at any other end: repaired, or an arguments error.
    Keep,
}

/// A processor: raw bytes, or events parsed by the caller, in; items out.
/// [`crate::chat::ChatProcessor`] and
/// [`crate::responses::ResponsesProcessor`] are its two protocols.
#[derive(Debug)]
pub struct Driver<P> {
    pub(crate) reader: LineReader,
    pub(crate) state: State<P>,
}

/// What a protocol reads and decides on its own.
pub trait Protocol {
    /// What one event of the protocol is, for the anomaly of a stream that
    /// had none (see `State::saw_event`).
    const EVENT: &'static str;
    /// Parses and applies one JSON payload. `Ok(false)`: the JSON is not
    /// complete yet (more data lines may follow); nothing was applied.
    fn payload(&mut self, data: &[u8]) -> Result<bool, Error>;
    /// The protocol's fast reading of a payload (the template of its last
    /// delta), which `payload` tries first: Some, with what applying it
    /// gave, when it read the payload; None, nothing applied, otherwise.
    fn plain(&mut self, data: &[u8]) -> Option<Result<(), Error>>;
    /// A call's output starts.
    fn begin_output(&mut self) {}
    /// A new stream starts: the protocol's own state of the last is dropped.
    fn reset(&mut self);
    /// The end of the stream, once the last event is read: the open calls
    /// are completed; the first failure is returned.
    fn close(&mut self) -> Result<(), Error>;
}

/// Most bytes of a refusal kept for its report (its excerpt quotes fewer).
const REFUSAL_KEPT: usize = 4096;

/// Everything but the line reader, so the reader can feed lines to it.
#[derive(Debug, Default)]
pub struct State<P> {
    pub(crate) calls: Calls,
    pub(crate) usage: UsageTotals,
    usage_mode: UsageMode,
    pub(crate) anomalies: Anomalies,
    pub(crate) out: Output,
    pub(crate) output_limit: OutputLimit,
    /// See [`Driver::stop_reason`].
    pub(crate) stop_reason: Option<String>,
    /// The output limit stopped the response: calls complete by `output_limit`.
    pub(crate) limit_hit: bool,
    strict: bool,
    max_line_bytes: usize,
    /// Data lines of an event whose JSON is not complete yet.
    pending: Vec<u8>,
    /// Where in `pending` a data line starts that is a whole event on its
    /// own and also continues the JSON before it: the next line or the
    /// event's end decides which (see `on_data_after_pending`).
    candidate: Option<usize>,
    /// Errors of the current line found before its own (see `on_event`).
    deferred: Vec<Error>,
    /// What followed an event's JSON on its line (`}data: [DONE]`): read as
    /// the next line (see `settle`).
    pub(crate) glued: Option<Vec<u8>>,
    /// Values glued onto the current line so far.
    pub(crate) glued_in_line: usize,
    /// The current SSE event is `event: error`.
    pub(crate) error_event: bool,
    /// The last `event:` line an event read at once had, with its LF (up to
    /// 64 bytes): the next one, nearly always the same, is compared instead
    /// of searched for its end.
    name_line: Vec<u8>,
    pub(crate) saw_done: bool,
    /// An event of the protocol was read in this stream: a stream that ends
    /// without one is another protocol's (or empty), which is reported.
    pub(crate) saw_event: bool,
    /// `finish` ran: the next call starts a new stream. (The calls stay
    /// until then, so the caller can read `finish`'s output.)
    ended: bool,
    /// Calls whose view events the caller has been shown.
    pub(crate) shown_views: Vec<CallId>,
    /// The kinds of anomaly reported once per stream that were (see
    /// [`State::first`]), and the unknown SSE field names reported.
    reported: Vec<AnomalyKind>,
    reported_fields: Vec<Vec<u8>>,
    /// The refusal the model sent in this response (rule 81): its start,
    /// and its length.
    refusal: String,
    refusal_bytes: usize,
    /// The protocol's own state.
    pub(crate) own: P,
}

impl<P> Driver<P>
where
    State<P>: Protocol,
{
    pub(crate) fn build(
        partial_tool_calls: bool,
        max_line_bytes: usize,
        strict: bool,
        usage_mode: UsageMode,
        output_limit: OutputLimit,
        own: P,
    ) -> Self
    where
        P: Default,
    {
        Driver {
            reader: LineReader::new(max_line_bytes),
            state: State {
                calls: Calls::new(partial_tool_calls),
                usage_mode,
                output_limit,
                strict,
                max_line_bytes,
                own,
                ..State::default()
            },
        }
    }

    /// One call's work on the state, after the output of the last call is
    /// dropped; its output (also after an error: see [`Driver::output`]).
    #[inline(always)]
    pub(crate) fn step(
        &mut self,
        f: impl FnOnce(&mut State<P>) -> Result<(), Error>,
    ) -> Result<&Output, Error> {
        self.state.begin(false);
        if let Err(e) = f(&mut self.state) {
            self.state.report_refusal();
            return Err(e);
        }
        Ok(&self.state.out)
    }

    /// Raw bytes from the HTTP body, split anywhere. The whole read is
    /// always decoded: when a line cannot be read, the first such error of
    /// the read is returned (after the rest of the read, whose items are in
    /// [`Driver::output`]), and later ones are recorded as anomalies. So
    /// nothing is held back for the next read and nothing is lost.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<&Output, Error> {
        self.state.begin(false);
        let mut first_error = None;
        self.reader.feed(
            bytes,
            &mut Reading { state: &mut self.state, first_error: &mut first_error, at_end: false },
        );
        if first_error.is_some() {
            // The caller may end the request on it, without `finish`.
            self.state.report_refusal();
        }
        first_error.map_or(Ok(&self.state.out), Err)
    }

    /// End of stream: the last buffered event is read, every open call is
    /// completed in order of first appearance, and the processor is ready for
    /// a new stream (usage and anomalies are kept). The stream is over, so
    /// bytes that cannot be read any more are recorded, not raised, and the
    /// calls are still returned; a provider error is raised after the calls
    /// are completed, so they are in [`Driver::output`]. Again after
    /// `finish` it returns nothing and reports nothing.
    pub fn finish(&mut self) -> Result<&Output, Error> {
        self.state.begin(true);
        if self.state.ended {
            return Ok(&self.state.out);
        }
        let mut first_error = None;
        self.reader.finish(&mut Reading {
            state: &mut self.state,
            first_error: &mut first_error,
            at_end: true,
        });
        let state = &mut self.state;
        let flushed = state.flush_pending(true);
        state.settle(flushed, &mut first_error, true);
        if let Err(e) = state.close() {
            first_error.get_or_insert(e);
        }
        state.report_refusal();
        if !state.saw_event {
            let what = <State<P> as Protocol>::EVENT;
            let message = format!("no {what} in the stream: another API's stream, or an empty one");
            state.anomalies.push(Anomaly::new(AnomalyKind::WrongProtocol, message));
        }
        state.ended = true;
        first_error.map_or(Ok(&self.state.out), Err)
    }

    /// The items of the last call (also after it returned an error).
    pub fn output(&self) -> &Output {
        &self.state.out
    }

    pub fn calls(&self) -> &Calls {
        &self.state.calls
    }

    /// Raw bytes held between calls to [`Driver::decode`]: the line
    /// reader's unterminated line (or the start of an event it holds whole,
    /// which may end with a whole `event:` line) plus the data lines of an
    /// event whose JSON is not complete; each is bounded by `max_line_bytes`.
    /// Read-only; for memory-bound checks (fuzzing).
    pub fn buffered_bytes(&self) -> usize {
        self.reader.buffered() + self.state.pending.len()
    }

    /// Heap bytes held, roughly: what grows with a stream (buffered bytes
    /// and the calls' arguments).
    pub fn heap_bytes(&self) -> usize {
        self.buffered_bytes() + self.state.calls.heap_bytes()
    }

    /// Why the last response stopped, as the server said: chat, the last
    /// non-empty `finish_reason`; Responses, `incomplete_details.reason`.
    pub fn stop_reason(&self) -> Option<&str> {
        self.state.stop_reason.as_deref()
    }

    /// Usage as the readers report it.
    pub fn usage(&self) -> UsageReport {
        self.state.usage.report(self.state.usage_mode)
    }

    pub fn anomalies(&self) -> &Anomalies {
        &self.state.anomalies
    }

    pub fn anomalies_mut(&mut self) -> &mut Anomalies {
        &mut self.state.anomalies
    }
}

/// A read of raw bytes: the reader's lines, and its whole events, go to
/// the state (see [`State::block`]).
struct Reading<'r, P> {
    state: &'r mut State<P>,
    first_error: &'r mut Option<Error>,
    /// At `finish`.
    at_end: bool,
}

impl<P> Sink for Reading<'_, P>
where
    State<P>: Protocol,
{
    #[inline(always)]
    fn event(&mut self, event: Event<'_>) {
        self.state.on_event(event, self.first_error, self.at_end);
    }

    #[inline(always)]
    fn block(&mut self, input: &[u8]) -> Block {
        self.state.block(input, self.first_error)
    }
}

/// The end of the line that starts at `from` (the position of its LF),
/// when it ends with a lone LF, as every line of the usual event does;
/// else what [`State::block`] answers: [`Block::More`] when the input ends
/// first, [`Block::Lines`] at another line end.
#[inline(always)]
fn lf_at(input: &[u8], from: usize) -> Result<usize, Block> {
    match memchr2(b'\n', b'\r', input.get(from..).unwrap_or_default()) {
        None => Err(Block::More),
        Some(at) if input[from + at] == b'\n' => Ok(from + at),
        Some(_) => Err(Block::Lines),
    }
}

impl<P> State<P>
where
    State<P>: Protocol,
{
    /// A whole event in the usual shape at the start of `input`: an
    /// optional `event: NAME` line (not `error`), a `data: JSON` line and a
    /// blank line, each ended by a lone LF and within the line limit, with
    /// nothing pending and no error event open, whose JSON the protocol's
    /// template reads. Read at once, its lines are neither split nor
    /// dispatched one by one (a sixth of a Responses event, three lines);
    /// what it does is what they would do: the name sets no error event,
    /// the data line reads its payload (already trimmed: a template starts
    /// and ends with JSON), the blank line flushes nothing. Any other shape,
    /// and any payload the template does not read, goes line by line. The
    /// start of the usual shape cut by the end of the input before the data
    /// line ends is [`Block::More`]: held, it is read at once with the next
    /// read (a third of the events straddle a 512-byte read).
    #[inline(always)]
    fn block(&mut self, input: &[u8], first_error: &mut Option<Error>) -> Block {
        if !self.pending.is_empty() || self.error_event {
            return Block::Lines;
        }
        let mut data = 0;
        let named = self.name_line.len();
        if named > 0 && input.get(..named).is_some_and(|line| same(line, &self.name_line)) {
            data = named;
        } else if input.starts_with(b"event: ") {
            let end = match lf_at(input, 7) {
                Ok(end) => end,
                Err(block) => return block,
            };
            if end > self.max_line_bytes || input[7..end].trim_ascii() == b"error" {
                return Block::Lines;
            }
            data = end + 1;
            if data <= 64 {
                self.name_line.clear();
                self.name_line.extend_from_slice(&input[..data]);
            }
        } else if b"event: ".starts_with(input) {
            return Block::More;
        }
        let rest = &input[data..];
        if !rest.starts_with(b"data: ") {
            return if b"data: ".starts_with(rest) { Block::More } else { Block::Lines };
        }
        let end = match lf_at(input, data + 6) {
            Ok(end) => end,
            Err(block) => return block,
        };
        // (A data line read and the blank line yet to come: its payload is
        // read now, line by line, as it always was.)
        if end - data > self.max_line_bytes || input.get(end + 1) != Some(&b'\n') {
            return Block::Lines;
        }
        self.glued_in_line = 0;
        match self.plain(&input[data + 6..end]) {
            None => Block::Lines,
            Some(result) => {
                if result.is_err() || !self.deferred.is_empty() || self.glued.is_some() {
                    self.settle(result, first_error, false);
                }
                Block::Read(end + 2)
            }
        }
    }

    /// Refusal text the model sent (rule 81). Discourse's processors hand
    /// out none, so it is kept for [`State::report_refusal`]: its first
    /// [`REFUSAL_KEPT`] bytes, and how many came.
    pub(crate) fn refused(&mut self, text: &str) {
        self.refusal_bytes += text.len();
        let mut room = REFUSAL_KEPT.saturating_sub(self.refusal.len()).min(text.len());
        while !text.is_char_boundary(room) {
            room -= 1;
        }
        self.refusal.push_str(&text[..room]);
    }

    /// The refusal kept, reported: at the end of the response (its
    /// `finish_reason`, its end event, `finish`, the end of a whole
    /// response), or of a read that fails.
    pub(crate) fn report_refusal(&mut self) {
        if self.refusal_bytes == 0 {
            return;
        }
        let bytes = std::mem::take(&mut self.refusal_bytes);
        let text = std::mem::take(&mut self.refusal);
        let what = format!(
            "the model refused ({bytes} bytes); the refusal is not handed out, as Discourse's processors hand out none"
        );
        self.anomalies.push(Anomaly::new(AnomalyKind::Refusal, what).excerpt(&text));
    }

    /// Starts an output: view events shown last time are dropped. Input
    /// after `finish` starts a new stream, and is reported.
    #[inline(always)]
    fn begin(&mut self, finishing: bool) {
        self.out.clear();
        self.begin_output();
        if self.ended && !finishing {
            self.end_stream();
            let message = "input after finish: read as a new stream (use one processor per stream)";
            self.anomalies.push(Anomaly::new(AnomalyKind::InputAfterFinish, message));
        }
        // Empty on most events: the check skips setting up the drain.
        if !self.shown_views.is_empty() {
            for call in self.shown_views.drain(..) {
                self.calls.clear_view(call);
            }
        }
    }

    fn end_stream(&mut self) {
        self.ended = false;
        self.shown_views.clear();
        self.calls.clear();
        self.pending.clear();
        self.candidate = None;
        self.deferred.clear();
        self.glued = None;
        self.error_event = false;
        self.saw_done = false;
        self.saw_event = false;
        self.stop_reason = None;
        self.usage = UsageTotals::default();
        self.limit_hit = false;
        self.reported.clear();
        self.reported_fields.clear();
        self.reset();
    }

    fn on_event(&mut self, event: Event<'_>, first_error: &mut Option<Error>, at_end: bool) {
        self.glued_in_line = 0;
        let result = match event {
            Event::Line(line) => self.on_line(line),
            Event::TooLong(e) => {
                self.pending.clear();
                self.candidate = None;
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
        // The provider's error (an `event: error` too) is an event of the
        // protocol: the stream is not another protocol's (rule 75).
        self.saw_event |= matches!(e, Error::Provider { .. });
        let skipped = match &e {
            Error::Stream { kind, .. } => !self.strict && !kind.is_limit(),
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
                // The error's excerpt is already cut: cutting it again would
                // replace the event's length with the quote's.
                let mut anomaly = Anomaly::new(AnomalyKind::UnreadableEvent, format!("{what}: {message}"));
                anomaly.excerpt = Some(excerpt);
                anomaly
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
                self.error_event = value.trim_ascii() == b"error";
                Ok(())
            }
            Line::Field { name: b"id" | b"retry", .. } => Ok(()),
            Line::Field { .. } if line.first() == Some(&b'{') => {
                if self.first(AnomalyKind::UnprefixedData) {
                    let what = "a JSON line without \"data:\" was read as data";
                    self.anomalies.push(Anomaly::new(AnomalyKind::UnprefixedData, what).excerpt_bytes(line));
                }
                self.on_data(line)
            }
            Line::Field { name, .. } => {
                if !self.reported_fields.iter().any(|f| f == name) && self.reported_fields.len() < 16 {
                    self.reported_fields.push(name.to_vec());
                    let what = format!("SSE field {:?} is not known; skipped", excerpt_bytes(name));
                    self.anomalies.push(Anomaly::new(AnomalyKind::UnknownSseField, what).excerpt_bytes(line));
                }
                Ok(())
            }
        }
    }

    fn on_data(&mut self, value: &[u8]) -> Result<(), Error> {
        if !self.pending.is_empty() {
            let len = self.pending.len() + 1 + value.len();
            if len > self.max_line_bytes {
                let head = excerpt_bytes(&self.pending);
                self.pending.clear();
                self.candidate = None;
                return Err(self.lost(Error::stream(
                    StreamErrorKind::LineTooLong,
                    format!(
                        "SSE event longer than {} bytes ({len} bytes of data lines)",
                        self.max_line_bytes
                    ),
                    head,
                )));
            }
            if let Some(at) = self.candidate.take() {
                let mut joined = self.pending.clone();
                joined.push(b'\n');
                joined.extend_from_slice(value);
                if completeness(&joined) == Completeness::Invalid {
                    self.split_candidate(at)?;
                    return self.on_data(value);
                }
            }
            if starts_event(value) {
                return self.on_data_after_pending(value);
            }
            self.pending.push(b'\n');
            self.pending.extend_from_slice(value);
            let data = std::mem::take(&mut self.pending);
            if !self.payload(&data)? {
                self.pending = data;
            }
            return Ok(());
        }
        let trimmed = value.trim_ascii();
        match trimmed.first() {
            None => Ok(()),
            Some(_) if trimmed == b"[DONE]" => {
                self.saw_done = true;
                Ok(())
            }
            Some(b'{' | b'[') => {
                if !self.payload(trimmed)? {
                    self.pending.extend_from_slice(trimmed);
                }
                Ok(())
            }
            Some(_) if self.error_event => {
                let message = String::from_utf8_lossy(trimmed).into_owned();
                Err(Error::Provider { payload: Some(JsonValue::String(message.clone())), message })
            }
            Some(_) => {
                let what = "a data payload that is not JSON was skipped";
                self.anomalies.push(Anomaly::new(AnomalyKind::NonJsonData, what).excerpt_bytes(trimmed));
                Ok(())
            }
        }
    }

    /// A data line that starts like a new event (`{`, `[DONE]`) while the
    /// data of an earlier line is still incomplete. Joined, they are one
    /// event when that parses, or may still parse (JSON split over data
    /// lines, rule 47); when the line is also a whole event alone, the next
    /// data line (the joined JSON goes on, or not) or the event's end (it
    /// is complete, or not) decides. Otherwise the earlier data was
    /// truncated (a server or proxy cut the line and lost the blank line
    /// after it, rule 53): it is reported as an unreadable event, and the
    /// new line is read on its own, so the event it carries is not lost
    /// with it.
    fn on_data_after_pending(&mut self, value: &[u8]) -> Result<(), Error> {
        let mut joined = std::mem::take(&mut self.pending);
        let truncated_len = joined.len();
        joined.push(b'\n');
        joined.extend_from_slice(value);
        match completeness(&joined) {
            Completeness::Complete => return self.payload(&joined).map(|_| ()),
            Completeness::Incomplete => {
                if completeness(value.trim_ascii()) == Completeness::Complete {
                    self.candidate = Some(truncated_len + 1);
                }
                self.pending = joined;
                return Ok(());
            }
            Completeness::Invalid => {}
        }
        let truncated = self.lost(truncated_event(&joined[..truncated_len]));
        self.deferred.push(truncated);
        self.on_data(value)
    }

    /// The line at `at` of the pending data was an event of its own after
    /// all: what came before it is reported as truncated, the line read.
    fn split_candidate(&mut self, at: usize) -> Result<(), Error> {
        let data = std::mem::take(&mut self.pending);
        let truncated = self.lost(truncated_event(&data[..at - 1]));
        self.deferred.push(truncated);
        self.on_data(&data[at..])
    }

    /// The end of an event: data still pending must be complete now. At the
    /// end of the stream an incomplete event is recorded (the stream was
    /// cut); before it, it is an error (rule 53: data that starts like JSON
    /// and does not parse), raised after the rest of the read is decoded.
    fn flush_pending(&mut self, at_end: bool) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Some(at) = self.candidate.take() {
            if completeness(&self.pending) != Completeness::Complete {
                self.split_candidate(at)?;
                return self.flush_pending(at_end);
            }
        }
        let data = std::mem::take(&mut self.pending);
        match self.payload(&data) {
            Ok(true) => Ok(()),
            Ok(false) if at_end => {
                self.calls
                    .note_lost(&format!("an event cut by the end of the stream: {}", excerpt_bytes(&data)));
                let what = "the stream ended inside an event whose JSON was not complete; skipped";
                self.anomalies.push(Anomaly::new(AnomalyKind::TruncatedEvent, what).excerpt_bytes(&data));
                Ok(())
            }
            Ok(false) => Err(self.lost(truncated_event(&data))),
            Err(e) => Err(e),
        }
    }
}

impl<P> State<P> {
    /// An event that cannot be read (skipped, or raised): every call open
    /// now may have lost input with it, so none of them will be repaired
    /// (see `Calls::note_lost`).
    pub(crate) fn lost(&mut self, e: Error) -> Error {
        if let Error::Stream { kind, excerpt, .. } = &e {
            self.calls.note_lost(&format!("an unreadable event ({}): {excerpt}", kind.name()));
        }
        e
    }

    /// A payload serde_json refused for another reason than its end:
    /// read again when a number beyond f64's range was all that stood in
    /// the way, that number as Infinity as in Ruby (rule 56); None while
    /// the payload is not whole yet; else an event that cannot be read.
    pub(crate) fn reread(&mut self, text: &str, e: &serde_json::Error) -> Result<Option<JsonValue>, Error> {
        match beyond_f64(text, e) {
            Some(Reparsed::Value(value)) => Ok(Some(value)),
            Some(Reparsed::Incomplete) => Ok(None),
            None => Err(self.lost(invalid_json(e, text))),
        }
    }

    /// A payload as text; invalid UTF-8 is an event that cannot be read.
    pub(crate) fn utf8<'d>(&mut self, data: &'d [u8]) -> Result<&'d str, Error> {
        std::str::from_utf8(data).map_err(|e| {
            self.lost(Error::stream(
                StreamErrorKind::InvalidUtf8,
                format!("invalid UTF-8 at byte {} of a data line: {}", e.valid_up_to(), excerpt_bytes(data)),
                excerpt_bytes(data),
            ))
        })
    }

    /// Merges usage objects into the totals, each `(usage, prefix)`: a field
    /// that is not a non-negative integer is reported as `prefix` and its
    /// name in the protocol's words (`name`); once per stream, totals whose
    /// net prompt tokens went below zero (`clamp`).
    pub(crate) fn merge_usage<'u>(
        &mut self,
        usages: impl IntoIterator<Item = (&'u Usage, &'static str)>,
        name: fn(&'static str) -> &'static str,
        clamp: &'static str,
    ) {
        let mut bad = Vec::new();
        for (usage, prefix) in usages {
            self.usage.merge(usage, &mut |b| bad.push((prefix, b)));
        }
        for (prefix, b) in bad {
            let kind = if b.converted { AnomalyKind::ConvertedField } else { AnomalyKind::IgnoredField };
            let verb = if b.converted { "converted to an integer" } else { "ignored" };
            let field = name(b.field);
            let message = match &b.value {
                Some(v) => {
                    format!(
                        "{prefix}{field} is not a non-negative integer: {v} ({}); {verb}",
                        b.kind.described()
                    )
                }
                None => format!("{prefix}{field} was {}; {verb}", b.kind.described()),
            };
            let mut a = Anomaly::new(kind, message).field(field);
            a.excerpt = b.value;
            self.anomalies.push(a);
        }
        if self.usage.report(self.usage_mode).clamped && self.first(AnomalyKind::NegativePromptTokens) {
            self.anomalies.push(Anomaly::new(AnomalyKind::NegativePromptTokens, clamp));
        }
    }

    /// True the first time in a stream an anomaly of `kind`, one reported
    /// once per stream, is to be reported.
    pub(crate) fn first(&mut self, kind: AnomalyKind) -> bool {
        let first = !self.reported.contains(&kind);
        if first {
            self.reported.push(kind);
        }
        first
    }

    /// The ids of the open calls (for an anomaly about them).
    pub(crate) fn open_ids(&self) -> Vec<String> {
        self.calls.open().filter_map(|c| self.calls.get(c)).map(|c| c.id.clone()).collect()
    }

    // ---- completion -------------------------------------------------------

    /// Completes one call: its parameters go to the output, or, when its
    /// arguments cannot be read, an `Error::Arguments` with what arrived.
    pub(crate) fn complete(&mut self, call: CallId) -> Result<(), Error> {
        if self.limit_hit && self.withheld(call) {
            return Ok(());
        }
        match self.calls.complete(call, &mut self.anomalies) {
            Ok(params) => {
                self.out.push_completed(call, params);
                Ok(())
            }
            Err(e) => {
                let raw = self.calls.take_raw(call);
                let (id, name) =
                    self.calls.get(call).map(|c| (c.id.clone(), c.name.clone())).unwrap_or_default();
                Err(Error::Arguments { id, name, raw, message: e.to_string() })
            }
        }
    }

    /// The output-limit rule for a call the limit cut: true when, by
    /// `output_limit`, it is not handed out (closed, and reported).
    pub(crate) fn withheld(&mut self, call: CallId) -> bool {
        let Some(c) = self.calls.get(call) else { return false };
        let whole = c.has_whole_arguments();
        if self.output_limit == OutputLimit::Keep || whole && self.output_limit == OutputLimit::DropCut {
            return false;
        }
        let state = if whole { "are" } else { "are not" };
        let msg = format!(
            "call {:?} ({}) was open when the output limit stopped the response (its arguments {state} a \
             complete JSON value); not handed out",
            c.id, c.name
        );
        self.anomalies.push(c.anomaly(AnomalyKind::DroppedCall, msg).excerpt(c.raw_arguments()));
        self.calls.withhold(call);
        true
    }

    /// Completes `calls` in order; all are completed even when one fails,
    /// and the first failure is returned.
    pub(crate) fn complete_all(&mut self, calls: impl IntoIterator<Item = CallId>) -> Result<(), Error> {
        let mut first_error = Ok(());
        for call in calls {
            keep_first(&mut first_error, self.complete(call));
        }
        first_error
    }

    /// Completes every open call in order of first appearance (see
    /// [`State::complete_all`]).
    pub(crate) fn complete_open(&mut self) -> Result<(), Error> {
        let open: Vec<CallId> = self.calls.open().collect();
        self.complete_all(open)
    }
}

/// Keeps the first error of several steps in `first`.
pub(crate) fn keep_first(first: &mut Result<(), Error>, result: Result<(), Error>) {
    if first.is_ok() {
        *first = result;
    }
}
