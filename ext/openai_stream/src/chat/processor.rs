//! The chat completions processor: chunks (parsed by the caller, or decoded
//! here from raw SSE bytes) in, items out. The driver it shares with the
//! Responses processor (`driver.rs`) owns the calls of one stream, the usage
//! totals and the anomalies; what is its own is reading chunks.

use super::in_band::{choice_error, provider_error_of};
use super::legacy::{LegacyOutcome, LegacySimulator};
use super::round_trip::{RoundTrip, REASONING_FIELDS};
use super::scan::{self, Plain, ScanMemo};
use super::{Choice, Chunk, Content, Delta, ToolCallDelta};
use crate::anomaly::{excerpt, Anomaly, AnomalyKind};
use crate::calls::CallId;
use crate::driver::{keep_first, Driver, OutputLimit, Protocol, State};
use crate::error::Error;
use crate::event_data::{glued_value_end, invalid_chunk, invalid_json, parsed_json};
use crate::json::JsonValue;
use crate::lenient::{Any, Field, Kind, List, Text};
use crate::output::Output;
use crate::sse::MaxLineBytes;
use crate::usage::UsageMode;

/// Events read from one line glued together (`{...}data: {...}...`); each
/// one costs a copy of the rest of the line.
const MAX_GLUED: usize = 16;

/// How a processor behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Report calls while their arguments stream (Discourse's
    /// `partial_tool_calls: true`).
    pub partial_tool_calls: bool,
    pub usage_mode: UsageMode,
    /// Longest SSE line (and event) accepted by [`ChatProcessor::decode`].
    pub max_line_bytes: MaxLineBytes,
    /// Also follow the stream the way the legacy Discourse processor did,
    /// to count the calls it would have run (for audits).
    pub simulate_legacy: bool,
    /// Raise a stream error for every event that cannot be read (JSON cut
    /// short or malformed, invalid UTF-8). By default such an event is
    /// skipped and reported (`unreadable_event`) and the stream goes on;
    /// limits that protect the process (`max_line_bytes`, nesting depth)
    /// raise either way.
    pub strict: bool,
    /// The calls still open after `finish_reason: "length"`.
    pub output_limit: OutputLimit,
    /// Return the reasoning (`reasoning_content`, `reasoning`) as whole
    /// thinking items, each before the item it led to (rule 77).
    pub output_thinking: bool,
    /// Keep what the next request must carry back: the reasoning's fields
    /// and details, each call's `extra_content`, the turn (rules 77 to 79).
    pub round_trip: bool,
}

/// See the module documentation.
pub type ChatProcessor = Driver<Chat>;

/// The chat protocol's own state of a [`ChatProcessor`].
#[derive(Debug, Default)]
pub struct Chat {
    options: Options,
    /// The event being applied is the head of a glued line.
    in_glued: bool,
    /// The envelope of this stream's last chunk, for the scanner.
    envelope: ScanMemo,
    saw_finish_reason: bool,
    /// Text came out in this stream (so a whole `message` echoes it).
    streamed_text: bool,
    /// A refusal came in this stream (so a whole `message` echoes it).
    streamed_refusal: bool,
    /// What the next request must carry back (rules 77 to 79).
    round_trip: RoundTrip,
    legacy: Option<LegacySimulator>,
    /// What the legacy processor would have run in the last finished stream.
    legacy_outcome: Option<LegacyOutcome>,
    /// See [`ChatProcessor::read_whole_chunks`].
    #[cfg(feature = "test-hooks")]
    whole_chunks: bool,
}

impl Chat {
    /// Every chunk is read whole (tests compare that with the plain road).
    fn whole_chunks(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        return self.whole_chunks;
        #[cfg(not(feature = "test-hooks"))]
        false
    }
}

impl Default for ChatProcessor {
    fn default() -> Self {
        ChatProcessor::new(Options::default())
    }
}

impl ChatProcessor {
    pub fn new(options: Options) -> Self {
        let own = Chat {
            options,
            legacy: options.simulate_legacy.then(LegacySimulator::default),
            ..Chat::default()
        };
        let Options { partial_tool_calls, max_line_bytes, strict, usage_mode, output_limit, .. } = options;
        Driver::build(partial_tool_calls, max_line_bytes.0, strict, usage_mode, output_limit, own)
    }

    /// A chunk as JSON text: the Hash path, whose reader writes what
    /// [`crate::lenient::Reads`] names of a parsed chunk back as JSON. Read as
    /// the raw path reads a payload (the scanner, then the crate's own
    /// parser for the rest); `whole`: a non-streamed response, every tool
    /// call of its message.
    pub fn process_json(&mut self, text: &str, whole: bool) -> Result<&Output, Error> {
        self.step(|s| s.json(text, whole))
    }

    /// A streamed chunk that is nothing but a text delta,
    /// `{"choices":[{"delta":{"content": text}}]}` (plus keys no rule
    /// reads): what [`ChatProcessor::process_json`] does with it, without
    /// reading it. The Hash path reads its commonest event this way.
    pub fn process_text(&mut self, text: &str) -> Result<&Output, Error> {
        // Of that chunk, a read applies only the content: no envelope,
        // error, usage or tool calls, one choice, no finish_reason (so the
        // legacy simulator, which follows tool calls, has nothing to see).
        self.step(|s| {
            s.saw_event = true;
            s.apply_text(text);
            Ok(())
        })
    }

    /// With [`Options::simulate_legacy`]: what the legacy processor would
    /// have run in the last finished stream.
    pub fn legacy_outcome(&self) -> Option<&LegacyOutcome> {
        self.state.own.legacy_outcome.as_ref()
    }

    pub fn options(&self) -> Options {
        self.state.own.options
    }

    /// What this response carries back to the next request (rules 77 to 79).
    pub fn round_trip(&self) -> &RoundTrip {
        &self.state.own.round_trip
    }

    /// Who the stream comes from, as the caller names it (see
    /// [`RoundTrip::model`]).
    pub fn set_model(&mut self, model: Option<String>) {
        self.state.own.round_trip.set_model(model);
    }

    /// For the crate's tests: every chunk is read whole, also a plain delta
    /// (which is otherwise applied without a chunk built), so that the two
    /// roads can be compared.
    #[cfg(feature = "test-hooks")]
    pub fn read_whole_chunks(&mut self) {
        self.state.own.whole_chunks = true;
    }
}

impl Protocol for State<Chat> {
    const EVENT: &'static str = "chat completion chunk (a JSON object with \"choices\")";

    fn payload(&mut self, data: &[u8]) -> Result<bool, Error> {
        if let Some(result) = self.plain(data) {
            return result.map(|()| true);
        }
        let text = self.utf8(data)?;
        // The scanner reads the usual shapes (in place: a chunk is large);
        // serde_json decides the rest.
        let mut scanned = Chunk::default();
        if scan::read(text, &mut scanned, &mut self.own.envelope) {
            return self.apply_payload(text, &scanned);
        }
        let reparsed: JsonValue;
        let field: Field<Chunk> = match serde_json::from_str(text) {
            Ok(f) => f,
            Err(e) if e.is_eof() => return Ok(false),
            Err(e) => {
                if let (false, Some(end)) = (self.own.in_glued, glued_value_end(text)) {
                    return self.glued_event(text, end);
                }
                let Some(value) = self.reread(text, &e)? else { return Ok(false) };
                reparsed = value;
                match serde::Deserialize::deserialize(&reparsed) {
                    Ok(f) => f,
                    Err(_) => return Err(self.lost(invalid_json(&e, text))),
                }
            }
        };
        let kind = match field {
            Field::Value(chunk) | Field::Converted(chunk, _) => return self.apply_payload(text, &chunk),
            Field::Wrong(kind) => kind,
            Field::Missing | Field::Null => Kind::Null,
        };
        if self.error_event {
            return Err(Error::Provider {
                message: excerpt(text),
                payload: crate::json::parse_complete(text).ok(),
            });
        }
        let what = format!("a data payload that is a JSON {} was skipped", kind.name());
        self.anomalies.push(Anomaly::new(AnomalyKind::UnexpectedPayload, what).excerpt(text));
        Ok(true)
    }

    /// Most events: the last delta with another string, and nothing else
    /// in the chunk. (An error event reads the whole chunk.)
    #[inline(always)]
    fn plain(&mut self, data: &[u8]) -> Option<Result<(), Error>> {
        if self.error_event || self.own.whole_chunks() {
            return None;
        }
        scan::plain(data, &self.own.envelope).map(|plain| self.apply_plain(&plain))
    }

    fn reset(&mut self) {
        let own = &mut self.own;
        own.saw_finish_reason = false;
        own.streamed_text = false;
        own.streamed_refusal = false;
        own.round_trip.reset();
    }

    /// Calls still open are completed from what arrived (reported when
    /// neither a finish_reason nor `[DONE]` said the stream was whole).
    fn close(&mut self) -> Result<(), Error> {
        if self.calls.open().next().is_some() && !self.own.saw_finish_reason && !self.saw_done {
            let open = self.open_ids();
            let (n, ids) = (open.len(), open.join(", "));
            let what = format!(
                "stream ended without finish_reason or [DONE]; completed {n} open call(s) from what \
                 arrived: {ids}"
            );
            self.anomalies.push(Anomaly::new(AnomalyKind::Truncated, what));
        }
        let completed = self.complete_open();
        self.out.release_held();
        if let Some(legacy) = self.own.legacy.as_mut() {
            self.own.legacy_outcome = Some(legacy.finish());
        }
        completed
    }
}

impl State<Chat> {
    /// An event's JSON value followed on its line by more than whitespace
    /// (Discourse's mocks glue `data: [DONE]` onto the last event): the value
    /// ends the event and the rest is read as the next line, once this
    /// line's errors are settled. The line reader hands on whole lines, so
    /// this does not depend on where reads split. Each rest is copied and
    /// read again, so a line holds at most `MAX_GLUED` glued values; what
    /// follows them is skipped as an unreadable event.
    fn glued_event(&mut self, text: &str, end: usize) -> Result<bool, Error> {
        let (head, rest) = text.split_at(end);
        let too_many = self.glued_in_line >= MAX_GLUED;
        if too_many {
            self.calls.note_lost(&format!("the rest of a line of glued events: {}", excerpt(rest)));
            let what =
                format!("more than {MAX_GLUED} events glued onto one line; the rest of the line was skipped");
            self.anomalies.push(Anomaly::new(AnomalyKind::UnreadableEvent, what).excerpt(rest));
        } else if self.first(AnomalyKind::GluedEvent) {
            let what =
                "an event's JSON was followed by more text on its line; the JSON ended the event and the \
                        rest was read as the next line";
            self.anomalies.push(Anomaly::new(AnomalyKind::GluedEvent, what).excerpt(rest));
        }
        self.own.in_glued = true;
        let applied = self.payload(head.as_bytes());
        self.own.in_glued = false;
        if !too_many {
            self.error_event = false;
            self.glued = Some(rest.as_bytes().to_vec());
        }
        applied.map(|_| true)
    }

    /// A chunk that is nothing but one delta (not an error event): what
    /// `apply_chunk` does with it (see `Template::plain`).
    fn apply_plain(&mut self, plain: &Plain<'_>) -> Result<(), Error> {
        self.saw_event = true;
        match plain {
            Plain::Text(text) => {
                self.apply_text(text);
                Ok(())
            }
            Plain::Call(call) => call.with_delta(|call| {
                if let (Some(legacy), false) = (self.own.legacy.as_mut(), self.own.in_glued) {
                    legacy.observe_first_call(Some(call));
                }
                self.calls.begin_list();
                let mut first_error = Ok(());
                self.apply_call(call, false, &mut first_error);
                first_error
            }),
        }
    }

    /// See [`ChatProcessor::process_json`].
    fn json(&mut self, text: &str, whole: bool) -> Result<(), Error> {
        if !whole && !self.own.whole_chunks() {
            if let Some(plain) = scan::plain(text.as_bytes(), &self.own.envelope) {
                return self.apply_plain(&plain);
            }
        }
        let mut scanned = Chunk::default();
        if scan::read(text, &mut scanned, &mut self.own.envelope) {
            return self.apply_chunk(&scanned, whole, text);
        }
        let value = parsed_json(text)?;
        let field = serde::Deserialize::deserialize(&value)
            .map_err(|e: serde::de::value::Error| invalid_chunk(e.to_string(), text))?;
        self.apply_chunk(&Chunk::from_field(field), whole, text)
    }

    /// Applies the chunk read from the JSON payload `text`.
    fn apply_payload(&mut self, text: &str, chunk: &Chunk) -> Result<bool, Error> {
        let result = if self.error_event {
            Err(provider_error_of(chunk).unwrap_or_else(|| Error::Provider {
                message: format!("error event: {}", excerpt(text)),
                payload: None,
            }))
        } else {
            self.apply_chunk(chunk, false, text)
        };
        match result {
            // The whole event is the payload when the error is the event.
            Err(Error::Provider { message, payload: None }) => {
                Err(Error::Provider { message, payload: crate::json::parse_complete(text).ok() })
            }
            Err(e) => Err(e),
            Ok(()) => Ok(true),
        }
    }

    // ---- chunks -----------------------------------------------------------

    /// A streamed chunk, or (`non_streamed`) a whole response, read from
    /// `text`.
    fn apply_chunk(&mut self, chunk: &Chunk, non_streamed: bool, text: &str) -> Result<(), Error> {
        // The legacy decoder matched `data: {...}` up to the end of the
        // line: it never saw the event of a glued line.
        if let (Some(legacy), false, false) = (self.own.legacy.as_mut(), self.own.in_glued, non_streamed) {
            legacy.observe(chunk);
        }
        // `object` and `message` are read for vLLM's in-band errors.
        self.field(&chunk.object, "object");
        self.field(&chunk.message, "message");
        if let Some(e) = provider_error_of(chunk) {
            self.saw_event = true;
            return Err(e);
        }
        if chunk.is_foreign() {
            self.foreign_payload(text);
            return Ok(());
        }
        let choice = self.first_choice(&chunk.choices);
        let result = match choice {
            Some(choice) if non_streamed => self.apply_whole_choice(choice),
            Some(choice) => {
                let whole = matches!(&chunk.object, Field::Value(Text(o)) if o == "chat.completion");
                self.apply_choice(choice, whole)
            }
            None => Ok(()),
        };
        self.apply_usage(chunk, choice);
        result
    }

    #[inline(always)]
    fn first_choice<'c, 'a>(&mut self, choices: &'c Field<List<Choice<'a>>>) -> Option<&'c Choice<'a>> {
        let list = self.field(choices, "choices")?;
        self.saw_event = true;
        if list.len() > 1 && self.first(AnomalyKind::IgnoredChoices) {
            let what = format!("{} choices in a chunk; only the first is read", list.len());
            self.anomalies.push(Anomaly::new(AnomalyKind::IgnoredChoices, what).field("choices"));
        }
        self.field(list.first()?, "choices[0]")
    }

    /// `whole`: the chunk says it is a whole response (`object:
    /// "chat.completion"`).
    fn apply_choice(&mut self, choice: &Choice, whole: bool) -> Result<(), Error> {
        let finish_reason = self.finish_reason(choice, true);
        let finishing = finish_reason.is_some();
        let delta = match (&choice.delta, &choice.message) {
            // A whole response after its own stream (MiniMax sends one
            // after the last delta): what it holds was streamed already.
            // Only its usage (read by the caller) and finish_reason count.
            (Field::Missing | Field::Null, Field::Value(m) | Field::Converted(m, _))
                if whole
                    && (self.own.streamed_text || self.own.streamed_refusal || !self.calls.is_empty()) =>
            {
                self.report_echo(m);
                self.calls_never_streamed(m)?;
                &Field::Missing
            }
            // A streamed chunk with the non-streamed `message` instead of a
            // `delta` (some proxies): read it as the delta, and say so.
            (Field::Missing | Field::Null, Field::Value(_) | Field::Converted(..)) => {
                let what = "a streamed choice carried \"message\" instead of \"delta\"; read as the delta";
                self.anomalies
                    .push(Anomaly::new(AnomalyKind::ConvertedField, what).field("choices[0].message"));
                &choice.message
            }
            (Field::Missing | Field::Null, Field::Wrong(kind)) => {
                self.ignored("choices[0].message", *kind);
                &choice.delta
            }
            _ => &choice.delta,
        };
        if let Some(delta) = self.field(delta, "choices[0].delta") {
            self.apply_reasoning(delta);
            self.apply_refusal(delta, "choices[0].delta.refusal");
            self.apply_content(&delta.content);
            self.apply_tool_calls(delta, finishing)?;
        }
        if finish_reason == Some("error") {
            self.field(&choice.native_finish_reason, "choices[0].native_finish_reason");
        }
        if let Some(e) = choice_error(choice) {
            return Err(e);
        }
        if finishing {
            self.own.saw_finish_reason = true;
            self.report_refusal();
            self.complete_open()?;
        }
        Ok(())
    }

    /// The choice's non-empty `finish_reason`, which becomes the stop reason
    /// (a streamed chunk without one keeps the last); `"length"` is the
    /// output limit (see `OutputLimit`).
    fn finish_reason<'c>(&mut self, choice: &'c Choice, streamed: bool) -> Option<&'c str> {
        let reason = self.field(&choice.finish_reason, "choices[0].finish_reason");
        let reason = reason.map(|Text(r)| &**r).filter(|r| !r.is_empty());
        if reason.is_some() || !streamed {
            self.limit_hit = reason == Some("length");
            self.stop_reason = reason.map(str::to_owned);
        }
        reason
    }

    /// The calls of a whole `message` after the deltas that the stream
    /// never had (no streamed call repeats them: `Calls::repeats`):
    /// completed from there, after the streamed ones, and reported, so an
    /// echo that holds more than was streamed loses none of it.
    #[cold]
    fn calls_never_streamed(&mut self, message: &Delta) -> Result<(), Error> {
        let list: Vec<&ToolCallDelta> = message
            .tool_calls
            .get()
            .map_or(&[][..], |l| l.as_slice())
            .iter()
            .filter_map(Field::get)
            .collect();
        // By id first, then by name among the calls left on both sides.
        let (mut used, mut repeated) = (Vec::new(), vec![false; list.len()]);
        for by_id in [true, false] {
            for (d, done) in list.iter().zip(repeated.iter_mut()).filter(|(_, done)| !**done) {
                *done = self.calls.repeats(d, &mut used, by_id);
            }
        }
        let new: Vec<&ToolCallDelta> =
            list.iter().zip(&repeated).filter(|(_, r)| !**r).map(|(d, _)| *d).collect();
        if new.is_empty() {
            return Ok(());
        }
        // The message is whole: the streamed calls are, too.
        let mut result = self.complete_open();
        for d in new {
            let Some(call) = self.calls.add_whole(d, &mut self.anomalies) else { continue };
            self.apply_extra_content(Some(call), d);
            if let Some(c) = self.calls.get(call) {
                let msg = format!(
                    "call {:?} ({}) came only in the whole message after the deltas, never streamed; \
                     completed from there",
                    c.id, c.name
                );
                self.anomalies.push(c.anomaly(AnomalyKind::Truncated, msg));
            }
            keep_first(&mut result, self.complete(call));
        }
        result
    }

    /// An event with none of a chunk's fields (FastAPI's `{"detail": ...}`,
    /// an object of another API): skipped, and reported (rule 48), so that
    /// what it said is not lost without a word.
    #[cold]
    fn foreign_payload(&mut self, text: &str) {
        let what = "an event with none of a chunk's fields (choices, usage, error, object) was skipped";
        self.anomalies.push(Anomaly::new(AnomalyKind::UnexpectedPayload, what.to_owned()).excerpt(text));
    }

    /// Reports a whole `message` that repeats what the stream delivered.
    #[cold]
    fn report_echo(&mut self, message: &Delta) {
        let calls = message.tool_calls.get().map_or(0, |list| list.len());
        let text = match &message.content {
            Field::Value(Content::Text(t)) => excerpt(t),
            _ => String::new(),
        };
        let what = format!(
            "a streamed event with object \"chat.completion\" repeated the whole message ({calls} tool \
             call(s)) after its deltas; what was streamed of it was not emitted again"
        );
        self.anomalies
            .push(Anomaly::new(AnomalyKind::EchoedMessage, what).field("choices[0].message").excerpt(&text));
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
            self.own.streamed_text = true;
        }
    }

    #[inline(always)]
    fn apply_content(&mut self, content: &Field<Content>) {
        match content {
            Field::Value(Content::Text(t)) => self.apply_text(t),
            Field::Value(Content::Parts(parts)) => {
                let mut texts: Vec<&str> = Vec::new();
                for part in parts {
                    let Some(p) = self.field(part, "choices[0].delta.content[]") else { continue };
                    if let Field::Wrong(k) = p.kind {
                        self.ignored("choices[0].delta.content[].type", k);
                        continue;
                    }
                    match p.kind.get().map(|t| &*t.0) {
                        Some("text") => {
                            if let Some(Text(t)) = self.field(&p.text, "choices[0].delta.content[].text") {
                                texts.push(t);
                            }
                        }
                        // Reasoning is not content; Mistral's comes out as
                        // thinking when asked for (rule 25).
                        Some("thinking") if self.own.options.output_thinking => {
                            self.out.push_text_parts(texts.drain(..));
                            self.thinking_part(&p.thinking);
                        }
                        Some("thinking" | "reasoning") => {}
                        other => {
                            let what = other.map_or("untyped".to_owned(), |t| format!("{t:?}"));
                            let what = format!("a content part of type {what} was ignored");
                            let a = Anomaly::new(AnomalyKind::IgnoredContentPart, what);
                            self.anomalies.push(a.field("choices[0].delta.content[]"));
                        }
                    }
                }
                if texts.iter().any(|t| !t.is_empty()) {
                    self.own.streamed_text = true;
                }
                self.out.push_text_parts(texts.into_iter());
            }
            Field::Wrong(kind) => self.ignored("choices[0].delta.content", *kind),
            _ => {}
        }
    }

    /// A `thinking` content part's text, held for the thinking item (rule
    /// 25): Mistral's list of text parts, or a string. Not carried back: the
    /// next request does not need it.
    #[cold]
    fn thinking_part(&mut self, thinking: &Field<Any>) {
        const PATH: &str = "choices[0].delta.content[].thinking";
        match self.field(thinking, PATH) {
            Some(Any(JsonValue::String(text))) => self.out.hold_thinking(text),
            Some(Any(JsonValue::Array(parts))) => {
                for part in parts {
                    match (part.get("type").and_then(JsonValue::as_str), part.get("text")) {
                        (Some("text"), Some(JsonValue::String(text))) => self.out.hold_thinking(text),
                        _ => {
                            let what = "a part of a thinking part that is not text was ignored".to_owned();
                            let a = Anomaly::new(AnomalyKind::IgnoredContentPart, what).field(PATH);
                            self.anomalies.push(a.excerpt(&part.to_json()));
                        }
                    }
                }
            }
            Some(Any(other)) => {
                let what = format!("{PATH} was {} instead of a list of text parts; ignored", other.kind());
                self.anomalies.push(Anomaly::new(AnomalyKind::IgnoredContentPart, what).field(PATH));
            }
            None => {}
        }
    }

    /// The reasoning of a delta (rules 77 and 78), when it has any and
    /// the processor keeps it.
    #[inline(always)]
    fn apply_reasoning(&mut self, delta: &Delta) {
        let Options { output_thinking, round_trip, .. } = self.own.options;
        if (output_thinking || round_trip)
            && !(delta.reasoning_content.is_absent()
                && delta.reasoning.is_absent()
                && delta.reasoning_details.is_absent())
        {
            self.apply_reasoning_fields(delta);
        }
    }

    /// Rule 77: the text comes from the first field that has some (the
    /// other, when it holds other text, is reported), and each field
    /// present counts as used; rule 78: the details are merged.
    #[cold]
    fn apply_reasoning_fields(&mut self, delta: &Delta) {
        let Options { output_thinking, .. } = self.own.options;
        let fields = [
            (&delta.reasoning_content, "choices[0].delta.reasoning_content"),
            (&delta.reasoning, "choices[0].delta.reasoning"),
        ];
        let mut kept: Option<&str> = None;
        for (&name, (field, path)) in REASONING_FIELDS.iter().zip(fields) {
            let Some(Text(text)) = self.field(field, path) else { continue };
            let new = self.own.round_trip.field(name);
            match kept {
                None | Some("") => {
                    kept = Some(text);
                    // An empty field makes a thinking (which carries the
                    // field back) the first time only, not before each
                    // delta that repeats it.
                    if output_thinking && (new || !text.is_empty()) {
                        self.out.hold_thinking(text);
                    }
                }
                Some(first) if text.is_empty() || first == text => {}
                Some(_) => {
                    let what =
                        format!("{name} held other text than the reasoning before it in the delta; ignored");
                    let a = Anomaly::new(AnomalyKind::ConflictingValue, what).field(path);
                    self.anomalies.push(a.excerpt(text));
                }
            }
        }
        if let Some(Any(details)) = self.field(&delta.reasoning_details, "choices[0].delta.reasoning_details")
        {
            // Details after the last thinking item came out: the next one
            // carries them (with all before them).
            if self.own.round_trip.details_fragment(details, &mut self.anomalies) && output_thinking {
                self.out.hold_thinking("");
            }
        }
    }

    /// Rule 81: a delta's or message's refusal is kept for its report.
    #[inline(always)]
    fn apply_refusal(&mut self, delta: &Delta, path: &'static str) {
        if !delta.refusal.is_absent() {
            if let Some(Text(text)) = self.field(&delta.refusal, path) {
                self.own.streamed_refusal |= !text.is_empty();
                self.refused(text);
            }
        }
    }

    /// Rule 79: a call's `extra_content`, when the processor keeps it.
    #[inline(always)]
    fn apply_extra_content(&mut self, target: Option<CallId>, d: &ToolCallDelta) {
        if let (Field::Value(Any(value)), true) = (&d.extra_content, self.own.options.round_trip) {
            match target {
                Some(call) => {
                    self.own.round_trip.extra_content(call, value, &self.calls, &mut self.anomalies)
                }
                None => self.unplaced_extra_content(value),
            }
        }
    }

    /// An `extra_content` on a delta that matched no call and started none
    /// (no name yet): not carried back, and said.
    #[cold]
    fn unplaced_extra_content(&mut self, value: &JsonValue) {
        let what =
            "extra_content came on a tool call delta that matched no call and named none to start one; \
                    not carried back";
        let a = Anomaly::new(AnomalyKind::IgnoredField, what.to_owned()).field("tool_calls[].extra_content");
        self.anomalies.push(a.excerpt(&value.to_json()));
    }

    fn apply_tool_calls(&mut self, delta: &Delta, finishing: bool) -> Result<(), Error> {
        let Some(list) = self.field(&delta.tool_calls, "choices[0].delta.tool_calls") else { return Ok(()) };
        if list.is_empty() && !finishing {
            return self.complete_whole_calls();
        }
        let mut first_error = Ok(());
        self.calls.begin_list();
        for item in list.iter() {
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
        self.apply_extra_content(applied.target, d);
        if self.calls.len() > before {
            // A call started after the last finish_reason: only a new
            // one (or [DONE]) says that it arrived whole.
            self.own.saw_finish_reason = false;
        }
        if let Some(replaced) = applied.replaced {
            keep_first(first_error, self.complete(replaced));
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
        self.complete_all(whole)
    }

    #[inline(always)]
    fn apply_usage(&mut self, chunk: &Chunk, choice: Option<&Choice>) {
        let groq = self.field(&chunk.x_groq, "x_groq").and_then(|x| self.field(&x.usage, "x_groq.usage"));
        let own = self.field(&chunk.usage, "usage");
        // Moonshot Kimi puts it inside the finish chunk's choice.
        let inner = choice.and_then(|c| self.field(&c.usage, "choices[0].usage"));
        if groq.is_none() && own.is_none() && inner.is_none() {
            // Nothing merged (most chunks): the totals, and so the clamp
            // check below, are what they were after the last merge.
            return;
        }
        let usages = [(groq, "x_groq."), (inner, "choices[0]."), (own, "")];
        self.merge_usage(
            usages.into_iter().filter_map(|(usage, prefix)| Some((usage?, prefix))),
            |field| field,
            "cache tokens exceed prompt_tokens; net prompt tokens reported as 0",
        );
    }

    // ---- non-streamed responses -------------------------------------------

    /// The choice of a non-streamed response: its text, and every element
    /// of its `tool_calls` is one call, by position (no slotting: two calls
    /// may even share an id).
    fn apply_whole_choice(&mut self, choice: &Choice) -> Result<(), Error> {
        self.finish_reason(choice, false);
        let mut result = Ok(());
        if let Some(message) = self.field(&choice.message, "choices[0].message") {
            self.apply_reasoning(message);
            self.apply_refusal(message, "choices[0].message.refusal");
            self.report_refusal();
            self.apply_content(&message.content);
            let list = self.field(&message.tool_calls, "choices[0].message.tool_calls");
            for item in list.iter().flat_map(|l| l.iter()) {
                let Some(d) = self.field(item, "choices[0].message.tool_calls[]") else { continue };
                let Some(call) = self.calls.add_whole(d, &mut self.anomalies) else { continue };
                self.apply_extra_content(Some(call), d);
                keep_first(&mut result, self.complete(call));
            }
        }
        // As in a stream: what the message held stays in the output, the
        // provider's error is raised (before any arguments error).
        if let Some(e) = choice_error(choice) {
            result = Err(e);
        }
        result
    }

    fn ignored(&mut self, field: &'static str, kind: Kind) {
        let what = format!("{field} was {}; ignored", kind.described());
        self.anomalies.push(Anomaly::new(AnomalyKind::IgnoredField, what).field(field));
    }
}

#[cfg(test)]
mod tests {
    // Unit tests of the processor: framing decisions and the non-streamed path.

    use super::*;
    use crate::error::StreamErrorKind;
    use crate::output::Item;

    const A: &str = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    const B: &str = r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"}]}"#;

    /// Ids of the completed calls in the processor's last output.
    fn completed(p: &ChatProcessor) -> Vec<String> {
        p.output()
            .items()
            .filter_map(|i| match i {
                Item::Completed(c, _) => p.calls().get(c).map(|c| c.id.clone()),
                _ => None,
            })
            .collect()
    }

    fn texts(p: &ChatProcessor) -> Vec<String> {
        p.output()
            .items()
            .filter_map(|i| match i {
                Item::Text(t) => Some(t.to_owned()),
                _ => None,
            })
            .collect()
    }

    fn kinds(p: &ChatProcessor) -> Vec<AnomalyKind> {
        p.anomalies().all().iter().map(|a| a.kind).collect()
    }

    fn message(p: &mut ChatProcessor, json: &str) -> Result<(), Error> {
        p.process_json(json, true).map(|_| ())
    }

    fn strict() -> ChatProcessor {
        ChatProcessor::new(Options { strict: true, ..Options::default() })
    }

    /// Decodes `stream` by default (the unreadable event is skipped and
    /// reported) and strictly (it is raised); the processor after each.
    fn both(stream: &str) -> [(ChatProcessor, Result<(), Error>); 2] {
        [ChatProcessor::default(), strict()].map(|mut p| {
            let r = p.decode(stream.as_bytes()).map(|_| ());
            (p, r)
        })
    }

    #[test]
    fn a_truncated_line_without_a_blank_line_does_not_swallow_the_next_event() {
        let stream =
            format!("data: {A}\n\ndata: {{\"choices\":[{{\"delta\":{{\"content\":\"cut\ndata: {B}\n\n");
        let [(p, skipped), (mut p_strict, raised)] = both(&stream);
        skipped.expect("skipped by default");
        assert_eq!(kinds(&p), [AnomalyKind::UnreadableEvent]);
        assert_eq!(completed(&p), ["a", "b"], "b is read after the truncated line");
        let err = raised.expect_err("the truncated event is raised when strict");
        assert!(
            matches!(err, Error::Stream { kind: StreamErrorKind::InvalidJson, ref message, .. }
        if message.contains("truncated")),
            "{err:?}"
        );
        assert_eq!(completed(&p_strict), ["a", "b"], "b is read after the truncated line");
        p_strict.finish().map(|_| ()).expect("nothing left");
    }

    #[test]
    fn a_truncated_line_cut_where_the_next_event_could_continue_it() {
        // Joined, `{"choices":[` + `{...}` is valid so far: the new line alone
        // being a whole event decides.
        let stream = format!("data: {A}\n\ndata: {{\"choices\":[\ndata: {B}\n\ndata: [DONE]\n\n");
        let [(p, skipped), (p_strict, raised)] = both(&stream);
        assert!(skipped.is_ok() && raised.is_err());
        assert_eq!(completed(&p), ["a", "b"]);
        assert_eq!(completed(&p_strict), ["a", "b"]);
        // [DONE] after a cut line ends the stream too.
        let stream = format!("data: {A}\n\ndata: {{\"choices\":[{{\"del\ndata: [DONE]\n\n");
        let [(p, skipped), (p_strict, raised)] = both(&stream);
        assert!(skipped.is_ok() && raised.is_err());
        assert!(p.state.saw_done && p_strict.state.saw_done);
    }

    #[test]
    fn json_split_over_data_lines_is_still_one_event() {
        let mut p = ChatProcessor::default();
        let stream = "data: {\"choices\":\ndata: [{\"delta\":{\"content\":\"a\"}}]}\n\n";
        p.decode(stream.as_bytes()).map(|_| ()).expect("one event over two lines");
        assert_eq!(texts(&p), ["a"]);
        // A continuation line that starts with `{` joins when the joined text
        // completes the event.
        let mut p = ChatProcessor::default();
        let stream = "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"b\"}}]}\n\n";
        p.decode(stream.as_bytes()).map(|_| ()).expect("one event over two lines");
        assert_eq!(texts(&p), ["b"]);
    }

    #[test]
    fn an_event_closed_by_a_blank_line_with_incomplete_json_is_skipped_and_loses_nothing() {
        let stream = format!("data: {A}\n\ndata: {{\"choices\":[{{\"delta\"\n\ndata: {B}\n\n");
        let [(p, skipped), (p_strict, raised)] = both(&stream);
        skipped.expect("skipped by default");
        assert_eq!(kinds(&p), [AnomalyKind::UnreadableEvent]);
        assert_eq!(completed(&p), ["a", "b"]);
        let err = raised.expect_err("raised when strict");
        assert!(matches!(err, Error::Stream { kind: StreamErrorKind::InvalidJson, .. }), "{err:?}");
        assert_eq!(completed(&p_strict), ["a", "b"]);
        // At the end of the stream it is recorded, not raised.
        let mut p = ChatProcessor::default();
        p.decode(format!("data: {A}\n\ndata: {{\"choices\":[").as_bytes()).map(|_| ()).unwrap();
        p.finish().map(|_| ()).expect("recorded");
        assert_eq!(kinds(&p), [AnomalyKind::TruncatedEvent]);
    }

    #[test]
    fn process_message_raises_a_choice_error_after_keeping_the_calls() {
        let mut p = ChatProcessor::default();
        let json = r#"{"choices":[{"message":{"content":"partial","tool_calls":[{"id":"m","function":{"name":"f","arguments":"{}"}}]},
        "finish_reason":"error","error":{"message":"upstream died"}}]}"#;
        match message(&mut p, json) {
            Err(Error::Provider { message, payload }) => {
                assert_eq!(message, "upstream died");
                assert!(payload.is_some());
            }
            other => panic!("expected a provider error, got {other:?}"),
        }
        assert_eq!(completed(&p), ["m"]);
        assert_eq!(texts(&p), ["partial"]);
        // finish_reason "error" alone raises too.
        let mut p = ChatProcessor::default();
        let json = r#"{"choices":[{"message":{"content":"x"},"finish_reason":"error"}]}"#;
        assert!(matches!(message(&mut p, json), Err(Error::Provider { .. })));
        // A null or empty error is no error.
        let mut p = ChatProcessor::default();
        let json = r#"{"choices":[{"message":{"content":"x"},"finish_reason":"stop","error":null}]}"#;
        message(&mut p, json).expect("no error");
    }

    fn chunk(p: &mut ChatProcessor, json: &str) -> Result<(), Error> {
        p.process_json(json, false).map(|_| ())
    }

    #[test]
    fn a_streamed_message_instead_of_a_delta_is_read_and_reported() {
        let mut p = ChatProcessor::default();
        chunk(&mut p, r#"{"choices":[{"message":{"content":"hi"}}]}"#).unwrap();
        assert_eq!(texts(&p), ["hi"]);
        assert_eq!(kinds(&p), [AnomalyKind::ConvertedField]);
        chunk(&mut p, r#"{"choices":[{"message":{"content":"again"}}]}"#).unwrap();
        assert_eq!(p.anomalies().all()[0].count, 2, "one entry, counted");
    }

    #[test]
    fn content_parts_of_the_wrong_shape_are_reported() {
        let mut p = ChatProcessor::default();
        let json = r#"{"choices":[{"delta":{"content":[{"type":"text","text":{"a":1}},{"type":5,"text":"x"},
        {"type":{"t":"text"}},{"type":"text","text":"ok"}]}}]}"#;
        chunk(&mut p, json).unwrap();
        assert_eq!(texts(&p), ["ok"]);
        let fields: Vec<_> = p.anomalies().all().iter().map(|a| (a.kind, a.field)).collect();
        assert_eq!(
            fields,
            [
                (AnomalyKind::IgnoredField, Some("choices[0].delta.content[].text")),
                (AnomalyKind::IgnoredField, Some("choices[0].delta.content[].type")),
                (AnomalyKind::IgnoredField, Some("choices[0].delta.content[].type")),
            ]
        );
        assert_eq!(p.anomalies().all()[1].count, 1, "an integer and an object type are two anomalies");
    }

    #[test]
    fn object_and_message_of_the_wrong_type_are_reported() {
        let mut p = ChatProcessor::default();
        chunk(&mut p, r#"{"object":5,"message":{"a":1},"choices":[{"message":7}]}"#).unwrap();
        let fields: Vec<_> = p.anomalies().all().iter().map(|a| a.field).collect();
        assert_eq!(fields, [Some("object"), Some("message"), Some("choices[0].message")]);
    }

    /// What a processor holds after a step, as text to compare.
    fn snapshot(p: &ChatProcessor) -> String {
        // Each call (the tables of Calls are HashMaps, whose order varies).
        let calls: Vec<_> =
            (0..p.calls().len()).map(|i| format!("{:?}", p.calls().get(CallId(i as u32)))).collect();
        format!(
            "{:?}\n{calls:?}\n{:?}\n{:?}\n{:?}",
            p.output(),
            p.anomalies().all(),
            p.usage(),
            p.legacy_outcome()
        )
    }

    #[test]
    fn process_text_does_what_process_json_does_with_a_text_chunk() {
        // Text around calls, between argument fragments, empty, after a
        // finish_reason and after the end of a stream, with usage after it.
        let call = |i: u32, id: &str, args: &str| {
            format!(
                r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{i},"id":"{id}","function":{{"name":"f","arguments":"{args}"}}}}]}}}}]}}"#
            )
        };
        let fragment = |i: u32, args: &str| {
            format!(
                r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{i},"function":{{"arguments":"{args}"}}}}]}}}}]}}"#
            )
        };
        let steps: Vec<Result<String, &str>> = vec![
            Err("Hel"),
            Err(""),
            Err("lo \u{e9}"),
            Ok(call(0, "a", "{\\\"q\\\":")),
            Err("between"),
            Ok(fragment(0, "\\\"x\\\"}")),
            Ok(call(1, "b", "{}")),
            Err("after calls"),
            Ok(r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#.to_owned()),
            Err("after finish"),
            Ok(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#.to_owned()),
            Err("late"),
        ];
        for partial_tool_calls in [false, true] {
            for simulate_legacy in [false, true] {
                let options = Options { partial_tool_calls, simulate_legacy, ..Options::default() };
                let (mut chunks, mut texts) = (ChatProcessor::new(options), ChatProcessor::new(options));
                for round in 0..2 {
                    for step in &steps {
                        let (a, b) = match step {
                            Ok(json) => (
                                chunks.process_json(json, false).map(|_| ()),
                                texts.process_json(json, false).map(|_| ()),
                            ),
                            Err(text) => {
                                let json = serde_json::json!({"choices": [{"delta": {"content": text}}]});
                                let json = json.to_string();
                                (
                                    chunks.process_json(&json, false).map(|_| ()),
                                    texts.process_text(text).map(|_| ()),
                                )
                            }
                        };
                        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{step:?}");
                        assert_eq!(
                            snapshot(&chunks),
                            snapshot(&texts),
                            "{step:?} (round {round}, {options:?})"
                        );
                    }
                    let (a, b) = (chunks.finish().map(|_| ()), texts.finish().map(|_| ()));
                    assert_eq!(format!("{a:?}"), format!("{b:?}"));
                    assert_eq!(snapshot(&chunks), snapshot(&texts));
                }
            }
        }
    }

    #[test]
    fn an_error_event_name_may_have_trailing_whitespace() {
        let mut p = ChatProcessor::default();
        let err = p.decode(b"event: error \ndata: overloaded\n\n").map(|_| ()).expect_err("an error event");
        assert!(matches!(err, Error::Provider { ref message, .. } if message == "overloaded"), "{err:?}");
    }

    #[test]
    fn a_stream_without_one_chat_chunk_is_reported_at_finish_and_only_then() {
        let responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n\
                     event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n";
        let anthropic = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n";
        for stream in [responses, anthropic, ""] {
            let mut p = ChatProcessor::default();
            p.decode(stream.as_bytes()).expect("decoded");
            assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol), "{stream:?}: not before finish");
            p.finish().expect("finished");
            assert_eq!(kinds(&p).last(), Some(&AnomalyKind::WrongProtocol), "{stream:?}");
            assert!(p.anomalies().all().last().is_some_and(|a| a.message.contains("chat completion chunk")));
        }
        // One chunk is enough: a text delta (fast paths too), a usage chunk with
        // no choice, a provider's error.
        for stream in
            [&format!("data: {A}\n\n"), "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"]
        {
            let mut p = ChatProcessor::default();
            p.decode(stream.as_bytes()).expect("decoded");
            p.finish().expect("finished");
            assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol), "{stream}");
        }
        let mut p = ChatProcessor::default();
        p.process_json(r#"{"choices":[],"usage":{"prompt_tokens":3}}"#, false).expect("read");
        let _ = p.decode(b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
        p.finish().expect("finished");
        assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol));
        let mut p = ChatProcessor::default();
        p.process_text("Hi").expect("read");
        p.finish().expect("finished");
        assert_eq!(kinds(&p), []);
    }

    #[test]
    fn an_error_event_is_an_event_of_the_protocol() {
        // Raised as a provider error, and not also reported at finish as
        // another protocol's stream, whatever its data.
        for stream in
            ["event: error\ndata: {\"message\":\"overloaded\"}\n\n", "event: error\ndata: overloaded\n\n"]
        {
            let mut p = ChatProcessor::default();
            let err = p.decode(stream.as_bytes()).map(|_| ()).expect_err("an error event");
            assert!(
                matches!(err, Error::Provider { ref message, .. } if message.contains("overloaded")),
                "{err:?}"
            );
            p.finish().expect("finished");
            assert_eq!(kinds(&p), [], "{stream:?}");
        }
    }

    #[test]
    fn input_after_finish_is_a_new_stream_and_reported_while_finish_again_does_nothing() {
        let mut p = ChatProcessor::default();
        p.decode(format!("data: {A}\n\n").as_bytes()).expect("decoded");
        p.finish().expect("finished");
        p.finish().expect("finished again");
        assert!(p.output().is_empty());
        assert_eq!(kinds(&p), [], "finish twice reports nothing");
        p.decode(format!("data: {B}\n\n").as_bytes()).expect("read as a new stream");
        assert_eq!(completed(&p), ["b"]);
        assert_eq!(kinds(&p), [AnomalyKind::InputAfterFinish]);
        p.finish().expect("finished");
        p.process_json(A, false).expect("the Hash path too");
        assert_eq!(kinds(&p), [AnomalyKind::InputAfterFinish], "the same anomaly again is counted");
        assert_eq!(p.anomalies().all()[0].count, 2);
        assert_eq!(completed(&p), ["a"]);
    }
}
