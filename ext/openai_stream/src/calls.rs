//! The per-call store both protocols share: each tool call's arguments as
//! they arrive, its id, name and index, what was lost while it was open, and
//! its completion into final parameters.
//!
//! State is kept per call, never "the current tool", so several calls in one
//! delta, interleaved fragments and reused indexes all come out whole. Which
//! call a fragment goes to is the protocol's: chat's slotting rules
//! (`chat/calls.rs`), the Responses API's output items (`responses/calls.rs`).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::anomaly::{Anomalies, Anomaly, AnomalyKind};
use crate::arguments::{finish_arguments, parse_arguments, ArgumentsError, ParsedArguments, Strings};
use crate::json::{JsonValue, ViewEvents};
use crate::view::{feed_partial, replay_partial, PartialState};

/// A call's position in order of first appearance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub u32);

impl CallId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One tool call being accumulated.
#[derive(Debug, Default)]
pub struct Call {
    /// The server's id, or a generated one (`id_generated`).
    pub id: String,
    pub id_generated: bool,
    pub name: String,
    /// The first index the call was seen at.
    pub index: Option<i64>,
    pub(crate) raw: String,
    pub(crate) object: Option<JsonValue>,
    pub(crate) partial: Option<PartialState>,
    pub(crate) completed: bool,
    /// The `tool_calls` list (see [`Calls::begin_list`]) the call started in.
    pub(crate) list: u64,
    /// How deep `raw` nests, as far as it was scanned (rule 8).
    pub(crate) nesting: Nesting,
    /// A later call has the same id (rule 14): fragments with the id go there.
    pub(crate) id_reused: bool,
    /// Input that may have been the call's, lost while it was open: its
    /// arguments are then never repaired and never `{}` (see [`Calls::complete`]).
    pub(crate) lost: LostInput,
}

/// What was lost during one call's life (the first few, and how many).
#[derive(Debug, Default)]
pub(crate) struct LostInput {
    /// Events that could not be read.
    events: Vec<String>,
    /// Fragments that matched no call and were dropped (`orphan_fragment`).
    fragments: Vec<String>,
    count: usize,
}

const LOST_KEPT: usize = 3;

impl LostInput {
    fn push(&mut self, fragment: bool, what: &str) {
        self.count += 1;
        let list = if fragment { &mut self.fragments } else { &mut self.events };
        if list.len() < LOST_KEPT {
            list.push(what.to_owned());
        }
    }

    /// "an unreadable event (...); 2 dropped fragments matching no call: ..."
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.events.is_empty() {
            parts.push(self.events.join("; "));
        }
        if !self.fragments.is_empty() {
            parts.push(format!("fragment(s) that matched no call, dropped: {}", self.fragments.join(" | ")));
        }
        let kept = self.events.len() + self.fragments.len();
        if self.count > kept {
            parts.push(format!("{} more", self.count - kept));
        }
        parts.join("; ")
    }
}

impl Call {
    /// True once the call has been completed (its parameters handed out).
    pub fn is_completed(&self) -> bool {
        self.completed
    }

    /// The arguments text received so far (empty once completed).
    pub fn raw_arguments(&self) -> &str {
        &self.raw
    }

    /// True when the arguments received so far are one complete JSON value
    /// (an object given as such, or text that parses whole): nothing more
    /// can be appended to them without making them invalid.
    pub fn has_whole_arguments(&self) -> bool {
        self.object.is_some() || is_json(self.raw.trim())
    }

    /// View events not yet consumed (partial mode).
    pub fn view(&self) -> Option<&ViewEvents> {
        self.partial.as_ref().map(|p| &p.events)
    }

    /// True when the arguments are a complete JSON value: an object received
    /// as such, a completed call, or text that is a whole object. The text is
    /// scanned once, as far as it has grown since the last ask.
    pub(crate) fn arguments_complete(&mut self) -> bool {
        self.completed
            || self.object.is_some()
            || self.nesting.balanced(&self.raw) && closed_object(&self.raw)
    }

    /// An anomaly about this call: its id, name and index filled in.
    pub fn anomaly(&self, kind: AnomalyKind, message: String) -> Anomaly {
        let mut a = Anomaly::new(kind, message);
        a.call_id = Some(self.id.clone());
        a.call_name = Some(self.name.clone());
        a.index = self.index;
        a
    }
}

/// Bracket nesting of a call's arguments text, scanned on demand from where
/// the last scan stopped, so asking whether the text is a whole value never
/// re-reads it.
#[derive(Debug, Default)]
pub(crate) struct Nesting {
    scanned: usize,
    depth: u64,
    opened: bool,
    strings: Strings,
}

impl Nesting {
    /// Scans what `raw` gained since the last call; true when a container
    /// opened and every container closed since.
    fn balanced(&mut self, raw: &str) -> bool {
        let new = raw.as_bytes().get(self.scanned..).unwrap_or_default();
        for b in new.iter().filter_map(|&b| self.strings.outside(b)) {
            match b {
                b'{' | b'[' => {
                    self.depth = self.depth.saturating_add(1);
                    self.opened = true;
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
        }
        self.scanned = raw.len();
        self.opened && self.depth == 0 && !self.strings.in_string
    }
}

/// All calls of one stream.
#[derive(Debug, Default)]
pub struct Calls {
    pub(crate) calls: Vec<Call>,
    pub(crate) by_index: HashMap<i64, u32>,
    pub(crate) by_id: HashMap<String, u32>,
    pub(crate) current: Option<u32>,
    partial: bool,
    /// Anomalies already reported: field anomalies once per field and call
    /// (`None`: fragments that matched no call), id changes once per call.
    pub(crate) reported: HashSet<(&'static str, Option<u32>)>,
    /// Counts `tool_calls` lists: elements of one list are separate calls.
    pub(crate) list: u64,
}

/// `function.arguments`: JSON text (the reference shape) or, from TGI and
/// some proxies, the parameters object itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments<'a> {
    Text(Cow<'a, str>),
    Object(JsonValue),
}

static GENERATED: AtomicU64 = AtomicU64::new(0);

/// `{what}_das_{pid}_{n}`: unique within the process and unlike any
/// server's ids (a call's generated id, a response's turn).
pub(crate) fn unique_id(what: &str) -> String {
    let n = GENERATED.fetch_add(1, Ordering::Relaxed);
    format!("{what}_das_{:x}_{n}", std::process::id())
}

impl Calls {
    pub fn new(partial: bool) -> Self {
        Calls { partial, ..Calls::default() }
    }

    pub fn get(&self, id: CallId) -> Option<&Call> {
        self.calls.get(id.index())
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Calls not yet completed, in order of first appearance.
    pub fn open(&self) -> impl Iterator<Item = CallId> + '_ {
        self.calls.iter().enumerate().filter(|(_, c)| !c.completed).map(|(i, _)| CallId(i as u32))
    }

    /// Forgets every call (a new stream starts).
    pub fn clear(&mut self) {
        *self = Calls { list: self.list, ..Calls::new(self.partial) };
    }

    /// Heap bytes of the calls' arguments text, roughly.
    pub fn heap_bytes(&self) -> usize {
        self.calls.iter().map(|c| c.raw.capacity() + std::mem::size_of::<Call>()).sum()
    }

    /// Drops view events the caller has consumed.
    pub fn clear_view(&mut self, id: CallId) {
        if let Some(p) = self.calls.get_mut(id.index()).and_then(|c| c.partial.as_mut()) {
            p.events.clear();
        }
    }

    /// Starts a new `tool_calls` list. Two elements of one list are never
    /// the same call, even with no id and no index and the same name
    /// (Mistral-style parallel calls from servers that send neither).
    pub fn begin_list(&mut self) {
        self.list += 1;
    }

    pub(crate) fn note_id_change(&mut self, call: u32, id: Option<&str>, anomalies: &mut Anomalies) {
        let Some(id) = id else { return };
        let c = &mut self.calls[call as usize];
        if c.id == id {
            return;
        }
        if c.id_generated {
            // The server named the call after all: use its id.
            c.id = id.to_owned();
            c.id_generated = false;
            self.by_id.insert(id.to_owned(), call);
            return;
        }
        if self.reported.insert(("id_changed", Some(call))) {
            let msg = format!("continuation of call {:?} carried id {id:?}; kept the first id", c.id);
            anomalies.push(c.anomaly(AnomalyKind::IdChanged, msg));
        }
    }

    /// Starts a call; one without a (non-empty) id gets a generated one,
    /// reported.
    pub(crate) fn start(
        &mut self,
        id: Option<&str>,
        name: &str,
        index: Option<i64>,
        anomalies: &mut Anomalies,
    ) -> u32 {
        let n = self.calls.len() as u32;
        let id = id.filter(|id| !id.is_empty());
        let id_generated = id.is_none();
        let id = id.map_or_else(|| unique_id("call"), str::to_owned);
        if let Some(earlier) = self.by_id.insert(id.clone(), n).and_then(|e| self.calls.get_mut(e as usize)) {
            earlier.id_reused = true;
        }
        if let Some(ix) = index {
            self.by_index.insert(ix, n);
        }
        let partial = self.partial.then(PartialState::default);
        let name = name.to_owned();
        self.calls.push(Call { id, id_generated, name, index, partial, list: self.list, ..Call::default() });
        if id_generated {
            let c = &self.calls[n as usize];
            let msg = format!("tool call {:?} arrived without an id; generated {:?}", c.name, c.id);
            anomalies.push(c.anomaly(AnomalyKind::GeneratedId, msg));
        }
        n
    }

    /// Adds a delta's arguments to a call. Returns true when the visible
    /// parameters changed.
    pub(crate) fn append(&mut self, target: u32, arguments: &Arguments, anomalies: &mut Anomalies) -> bool {
        let call = &mut self.calls[target as usize];
        if call.completed {
            let empty = matches!(arguments, Arguments::Text(t) if t.is_empty());
            if !empty {
                let text = arguments_text(arguments);
                let msg = format!("arguments arrived after call {:?} was complete; ignored", call.id);
                anomalies.push(call.anomaly(AnomalyKind::FragmentAfterCompletion, msg).excerpt(&text));
            }
            return false;
        }
        let mixed = match (arguments, &call.object) {
            (Arguments::Text(text), _) if text.is_empty() => return false,
            (Arguments::Text(text), None) => {
                call.raw.push_str(text);
                return feed_partial(call, text, anomalies);
            }
            (Arguments::Text(_), Some(_)) => "text arguments after an object; text ignored",
            (Arguments::Object(value), Some(existing)) if existing == value => return false,
            (Arguments::Object(_), Some(_)) => "a second, different arguments object; kept the first",
            (Arguments::Object(_), None) if !call.raw.is_empty() => {
                "an arguments object after text; object ignored"
            }
            (Arguments::Object(value), None) => {
                call.object = Some(value.clone());
                return replay_partial(call, value);
            }
        };
        let msg = format!("call {:?} got {mixed}", call.id);
        anomalies.push(call.anomaly(AnomalyKind::MixedArguments, msg).excerpt(&arguments_text(arguments)));
        false
    }

    /// Input that may have been some open call's was lost (an event that
    /// could not be read): every call open now remembers it. `what` is kept
    /// as given: quote the event with `anomaly::excerpt` before.
    pub fn note_lost(&mut self, what: &str) {
        self.lose(false, what);
    }

    /// Every open call remembers `what` as an event (or a fragment) it may
    /// have lost.
    pub(crate) fn lose(&mut self, fragment: bool, what: &str) {
        for call in self.calls.iter_mut().filter(|c| !c.completed) {
            call.lost.push(fragment, what);
        }
    }

    /// Completes a call: its final parameters, repaired if need be. A call
    /// that lost input while it was open (see [`Calls::note_lost`] and
    /// orphan fragments) is not repaired and not `{}`: when its arguments
    /// are empty or do not parse as they are, that is an error naming what
    /// was lost, since a repair could hand the tool wrong parameters.
    pub fn complete(&mut self, id: CallId, anomalies: &mut Anomalies) -> Result<JsonValue, ArgumentsError> {
        let Some(call) = self.calls.get_mut(id.index()) else {
            return Ok(JsonValue::Object(Vec::new()));
        };
        call.completed = true;
        let whole_object = call.object.is_some();
        let parsed = if let Some(object) = call.object.take() {
            Ok(ParsedArguments { value: object, repair: None })
        } else if let Some(p) = call.partial.take() {
            finish_arguments(p.parser, &call.raw)
        } else {
            parse_arguments(&call.raw)
        };
        let clean = matches!(parsed, Ok(ParsedArguments { repair: None, .. }));
        let empty = !whole_object && call.raw.trim().is_empty();
        if call.lost.count > 0 && !whole_object && (empty || !clean) {
            let state = match parsed {
                _ if empty => "are empty",
                Ok(_) => "would need repair",
                Err(_) => "do not parse",
            };
            let message = format!(
                "input was lost while the call was open and its arguments {state}, so they are not repaired: {}",
                call.lost.describe()
            );
            let msg = format!("arguments of call {:?} ({}) cannot be trusted: {message}", call.id, call.name);
            anomalies.push(call.anomaly(AnomalyKind::InvalidArguments, msg).excerpt(&call.raw));
            return Err(ArgumentsError { message, offset: None });
        }
        match parsed {
            Ok(ParsedArguments { value, repair }) => {
                if let Some(repair) = repair {
                    let msg = format!("arguments of call {:?} repaired: {repair}", call.id);
                    anomalies.push(call.anomaly(AnomalyKind::RepairedArguments, msg).excerpt(&call.raw));
                }
                call.raw = String::new();
                Ok(value)
            }
            Err(e) => {
                let msg = format!("arguments of call {:?} ({}) are invalid: {e}", call.id, call.name);
                anomalies.push(call.anomaly(AnomalyKind::InvalidArguments, msg).excerpt(&call.raw));
                Err(e)
            }
        }
    }

    /// Closes a call without handing it out (the output-limit rule).
    pub fn withhold(&mut self, id: CallId) {
        if let Some(c) = self.calls.get_mut(id.index()) {
            c.completed = true;
            c.partial = None;
        }
    }

    /// The raw arguments of a call, taken (for an error report).
    pub fn take_raw(&mut self, id: CallId) -> String {
        self.calls.get_mut(id.index()).map(|c| std::mem::take(&mut c.raw)).unwrap_or_default()
    }
}

/// True when `raw` is one complete JSON object (and so cannot be continued).
pub(crate) fn closed_object(raw: &str) -> bool {
    let t = raw.trim();
    t.starts_with('{') && t.ends_with('}') && is_json(t)
}

/// True when `text` is one JSON value.
fn is_json(text: &str) -> bool {
    serde_json::from_str::<crate::lenient::Skip>(text).is_ok()
}

pub(crate) fn arguments_text(arguments: &Arguments) -> String {
    match arguments {
        Arguments::Text(t) => t.to_string(),
        Arguments::Object(v) => v.to_json(),
    }
}
