//! Tool-call accumulation: which call each streamed fragment belongs to.
//!
//! State is kept per call, never "the current tool", so several calls in one
//! delta, interleaved fragments and reused indexes all come out whole. The
//! rules are those of `stream-shapes.md` ("Slotting fragments into calls");
//! the tests below name them by number.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::anomaly::{Anomalies, Anomaly, AnomalyKind};
use crate::arguments::{finish_arguments, parse_arguments, ArgumentsError, ParsedArguments, Strings};
use crate::chunk::{Arguments, Field, Id, Int, Kind, Text, ToolCallDelta};
use crate::json::{ContainerKind, IncrementalParser, JsonValue, ViewEvents, ViewSink};

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
    raw: String,
    object: Option<JsonValue>,
    partial: Option<PartialState>,
    completed: bool,
    /// The `tool_calls` list (see [`Calls::begin_list`]) the call started in.
    list: u64,
    /// How deep `raw` nests, as far as it was scanned (rule 8).
    nesting: Nesting,
    /// A later call has the same id (rule 14): fragments with the id go there.
    id_reused: bool,
    /// Input that may have been the call's, lost while it was open: its
    /// arguments are then never repaired and never `{}` (see [`Calls::complete`]).
    lost: LostInput,
}

/// What was lost during one call's life (the first few, and how many).
#[derive(Debug, Default)]
struct LostInput {
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
    fn arguments_complete(&mut self) -> bool {
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

/// Incremental parse of one call's arguments, for partial tool calls.
#[derive(Debug, Default)]
struct PartialState {
    parser: IncrementalParser,
    events: ViewEvents,
    /// Open containers, the root object included.
    depth: u32,
}

/// Bracket nesting of a call's arguments text, scanned on demand from where
/// the last scan stopped, so asking whether the text is a whole value never
/// re-reads it.
#[derive(Debug, Default)]
struct Nesting {
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

/// What applying one delta did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The call the delta went to.
    pub target: Option<CallId>,
    /// A call whose index a new call took (rule 7): it is complete now.
    pub replaced: Option<CallId>,
    /// The target's visible parameters changed (partial mode).
    pub progressed: bool,
}

/// All calls of one stream.
#[derive(Debug, Default)]
pub struct Calls {
    calls: Vec<Call>,
    by_index: HashMap<i64, u32>,
    by_id: HashMap<String, u32>,
    current: Option<u32>,
    partial: bool,
    /// Anomalies already reported: field anomalies once per field and call
    /// (`None`: fragments that matched no call), id changes once per call.
    reported: HashSet<(&'static str, Option<u32>)>,
    /// Counts `tool_calls` lists: elements of one list are separate calls.
    list: u64,
}

/// A field of the wrong type in one `tool_calls` element, reported once the
/// call it belongs to is known.
#[derive(Debug, Clone, Copy)]
struct FieldProblem {
    field: &'static str,
    kind: Kind,
    converted: bool,
}

static GENERATED: AtomicU64 = AtomicU64::new(0);

fn generated_id() -> String {
    // Unique within the process and unlike any server's ids.
    let n = GENERATED.fetch_add(1, Ordering::Relaxed);
    format!("call_das_{:x}_{n}", std::process::id())
}

/// The parts of a delta the rules look at, normalised.
struct Header<'d> {
    index: Option<i64>,
    id: Option<&'d str>,
    name: Option<&'d str>,
    arguments: Option<&'d Arguments<'d>>,
    /// Its fields of a wrong type (or converted).
    problems: Vec<FieldProblem>,
}

impl<'d> Header<'d> {
    /// What one element of `tool_calls` says.
    fn read(delta: &'d ToolCallDelta<'d>) -> Self {
        let mut problems = Vec::new();
        let function = read(&delta.function, "tool_calls[].function", &mut problems);
        let index = read(&delta.index, "tool_calls[].index", &mut problems).map(|Int(n)| *n);
        let id = |field: &'d Field<Id<'d>>, name, problems: &mut _| {
            read(field, name, problems).map(|Id(id)| &**id).filter(|id| !id.is_empty())
        };
        let id = id(&delta.id, "tool_calls[].id", &mut problems)
            .or_else(|| function.and_then(|f| id(&f.id, "tool_calls[].function.id", &mut problems)));
        let name = function
            .and_then(|f| read(&f.name, "tool_calls[].function.name", &mut problems))
            .map(|Text(name)| &**name)
            .filter(|name| !name.is_empty());
        let arguments =
            function.and_then(|f| read(&f.arguments, "tool_calls[].function.arguments", &mut problems));
        Header { index, id, name, arguments, problems }
    }

    /// An anomaly about the element when it goes to no call: its own id
    /// and index.
    fn anomaly(&self, kind: AnomalyKind, message: String) -> Anomaly {
        let mut a = Anomaly::new(kind, message);
        a.call_id = self.id.map(str::to_owned);
        a.index = self.index;
        a
    }
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

    /// True when some call is still open.
    pub fn any_open(&self) -> bool {
        self.calls.iter().any(|c| !c.completed)
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

    /// Applies one element of `delta.tool_calls` (call [`Calls::begin_list`]
    /// before the first element of each list).
    pub fn apply(&mut self, delta: &ToolCallDelta, anomalies: &mut Anomalies) -> Applied {
        let header = Header::read(delta);
        let mut applied = Applied::default();
        let target = self.slot(&header, &mut applied, anomalies);
        self.report_fields(target, &header, anomalies);
        if let Some(target) = target {
            applied.target = Some(CallId(target));
            self.current = Some(target);
            applied.progressed = header.arguments.is_some_and(|a| self.append(target, a, anomalies));
        }
        applied
    }

    /// Field anomalies of one element, with the call they belong to (or,
    /// when none, the element's own index and id).
    fn report_fields(&mut self, target: Option<u32>, h: &Header, anomalies: &mut Anomalies) {
        for p in &h.problems {
            if !self.reported.insert((p.field, target)) {
                continue;
            }
            let anomaly_kind =
                if p.converted { AnomalyKind::ConvertedField } else { AnomalyKind::IgnoredField };
            let verb = if p.converted { "converted" } else { "ignored" };
            let message = format!("{} was {}; {verb}", p.field, p.kind.described());
            let a = match target.and_then(|t| self.calls.get(t as usize)) {
                Some(call) => call.anomaly(anomaly_kind, format!("{message} (call {:?})", call.id)),
                None => h.anomaly(anomaly_kind, message),
            };
            anomalies.push(a.field(p.field));
        }
    }

    /// Finds (or starts) the call a delta belongs to.
    fn slot(&mut self, h: &Header, applied: &mut Applied, anomalies: &mut Anomalies) -> Option<u32> {
        // Fast path: the delta continues the call of the previous delta.
        if let Some(cur) = self.current {
            let c = self.calls.get(cur as usize)?;
            if h.index.is_some()
                && h.index == c.index
                && h.id.is_none_or(|id| id == c.id && !c.id_reused)
                && h.name.is_none_or(|n| n == c.name)
                && !self.starts_anew(cur, h)
            {
                return Some(cur);
            }
        }
        // Rules 8, 9, 14: an explicit id that matches a call wins.
        if let Some(id) = h.id {
            if let Some(&known) = self.by_id.get(id) {
                return Some(self.slot_known_id(known, id, h, applied, anomalies));
            }
        }
        let at_index = h.index.and_then(|ix| self.by_index.get(&ix).copied());
        match (h.id, h.name, at_index) {
            // Rules 6, 10: no index and no id continues the most recent call,
            // also when the name is repeated in full.
            (None, name, None)
                if h.index.is_none()
                    && self.current.is_some_and(|cur| {
                        name.is_none_or(|n| n == self.calls[cur as usize].name) && !self.starts_anew(cur, h)
                    }) =>
            {
                self.current
            }
            // A new call: a header with a new id, or a name and no id at an
            // index no call has (rule 11), or where the call there has another
            // name or cannot be continued. At an occupied index (rule 7:
            // Ollama, old vLLM, SGLang) the previous call is done.
            (id, Some(name), occupied)
                if id.is_some()
                    || occupied.is_none_or(|occ| {
                        name != self.calls[occ as usize].name || self.starts_anew(occ, h)
                    }) =>
            {
                self.displace(occupied, applied);
                Some(self.start(id, name, h.index, anomalies))
            }
            // Rules 5, 8: the call at this index (a changed id on an
            // arguments-only delta is a continuation while it can be one).
            (_, _, Some(occ)) => self.continue_call(occ, h, anomalies),
            // Rules 6, 8: an arguments-only delta with no index, or an index
            // no call has (Nebius, Cerebras: the header's index + 1), and no
            // id that names a call continues the most recent call while it
            // is open; that index now names it.
            (_, _, None) => match self.current.filter(|&cur| !self.calls[cur as usize].completed) {
                Some(cur) => self.continue_call(cur, h, anomalies),
                None => {
                    let why = "a tool call fragment matched no call and carried no name to start one";
                    self.orphan(h, why.into(), anomalies);
                    None
                }
            },
        }
    }

    /// The call a delta goes to when its id names `known` (the most recent
    /// call with that id).
    fn slot_known_id(
        &mut self,
        known: u32,
        id: &str,
        h: &Header,
        applied: &mut Applied,
        anomalies: &mut Anomalies,
    ) -> u32 {
        if let (Some(name), Some(ix)) = (h.name, h.index) {
            let occupied = self.by_index.get(&ix).copied();
            // A header repeated at an index the call with this id has.
            if let Some(occ) = occupied.filter(|&o| self.calls[o as usize].id == id) {
                return self.check_name(occ, Some(name), anomalies);
            }
            // Rule 14: a header at another index than the indexed call with
            // this id is a distinct call that shares the id, unless it
            // repeats the name of a call whose arguments are not complete yet.
            let k = &mut self.calls[known as usize];
            if let Some(first_index) = k.index.filter(|_| k.name != name || k.arguments_complete()) {
                self.displace(occupied, applied);
                let n = self.start(Some(id), name, Some(ix), anomalies);
                let (first, c) = (&self.calls[known as usize], &self.calls[n as usize]);
                let msg = format!(
                    "tool call {name:?} at index {ix} has the id {id:?} of call {:?} at index {first_index}; \
                     kept as a separate call",
                    first.name
                );
                anomalies.push(c.anomaly(AnomalyKind::DuplicateId, msg));
                return n;
            }
        }
        // The call's id wins over the delta's index (rule 8).
        self.take_index(known, h.index);
        self.check_name(known, h.name, anomalies)
    }

    /// Reports a name that differs from the call's (the first is kept).
    fn check_name(&self, call: u32, name: Option<&str>, anomalies: &mut Anomalies) -> u32 {
        let c = &self.calls[call as usize];
        if let Some(name) = name.filter(|&n| n != c.name) {
            let msg = format!("call {:?} renamed to {name:?} on a later delta; kept {:?}", c.id, c.name);
            anomalies.push(c.anomaly(AnomalyKind::NameChanged, msg));
        }
        call
    }

    /// A delta that continues `call` (found by index or as the most recent
    /// call) and whose id, if any, names no call. Rule 8: that id is a
    /// changed id only while the call's arguments are incomplete; once they
    /// are a complete JSON value the delta belongs to no call and is
    /// dropped, reported, so that it cannot corrupt the finished call.
    fn continue_call(&mut self, call: u32, h: &Header, anomalies: &mut Anomalies) -> Option<u32> {
        let c = &mut self.calls[call as usize];
        if h.id.is_some() && h.name.is_none() && c.arguments_complete() {
            let message = format!(
                "a tool call fragment with an id no call has came after call {:?} ({}) had complete arguments; \
                 dropped, not appended",
                c.id, c.name
            );
            self.orphan(h, message, anomalies);
            return None;
        }
        self.note_id_change(call, h.id, anomalies);
        self.take_index(call, h.index);
        Some(call)
    }

    /// A delta's index names the call it went to too, if no other call has
    /// it (rule 6).
    fn take_index(&mut self, call: u32, index: Option<i64>) {
        if let Some(ix) = index {
            self.by_index.entry(ix).or_insert(call);
            self.calls[call as usize].index.get_or_insert(ix);
        }
    }

    /// Rule 7: a new call takes the index of `prev`, which is complete now
    /// (unless it was already).
    fn displace(&self, prev: Option<u32>, applied: &mut Applied) {
        if let Some(prev) = prev.filter(|&p| !self.calls[p as usize].completed) {
            applied.replaced = Some(CallId(prev));
        }
    }

    /// Reports a fragment that goes to no call (`message` says why); its id
    /// and index are the fragment's, the excerpt its arguments.
    fn orphan(&mut self, h: &Header, message: String, anomalies: &mut Anomalies) {
        let text = h.arguments.map(arguments_text).unwrap_or_default();
        // A delta that brings no arguments (`{"id":"tool_0","function":{}}`
        // before the header, in Discourse's compliance mocks) loses nothing.
        if text.is_empty() {
            return;
        }
        // Every open call may have lost it (rule: never `{}` or repaired
        // after dropped fragments, see [`Calls::complete`]).
        self.lose(true, &crate::anomaly::excerpt(&text));
        anomalies.push(h.anomaly(AnomalyKind::OrphanFragment, message).excerpt(&text));
    }

    /// A header with a name and no id that matches `call` by index or as the
    /// latest call is still a new call when it cannot be a continuation:
    /// - `call` started in an earlier element of the same `tool_calls` list
    ///   (separate elements are separate calls);
    /// - `call`'s arguments are already a complete JSON object and the header
    ///   brings more arguments (Ollama-style index reuse without ids): text
    ///   after a closed object could only make the call invalid. The call is
    ///   not completed because its text parses (stream-shapes.md: a valid
    ///   prefix is not the end); only the new call's arrival ends it.
    fn starts_anew(&self, call: u32, h: &Header) -> bool {
        if h.name.is_none() || h.id.is_some() {
            return false;
        }
        let c = &self.calls[call as usize];
        if c.list == self.list {
            return true;
        }
        match h.arguments {
            None => false,
            Some(Arguments::Text(t)) if t.trim_start().is_empty() => false,
            Some(_) if c.completed => true,
            Some(Arguments::Text(t)) => {
                c.object.is_some() || t.trim_start().starts_with('{') && closed_object(&c.raw)
            }
            // The same object again is a repeated header (rule 10).
            Some(Arguments::Object(v)) => c.object.as_ref().map_or_else(|| closed_object(&c.raw), |o| o != v),
        }
    }

    fn note_id_change(&mut self, call: u32, id: Option<&str>, anomalies: &mut Anomalies) {
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
    fn start(&mut self, id: Option<&str>, name: &str, index: Option<i64>, anomalies: &mut Anomalies) -> u32 {
        let n = self.calls.len() as u32;
        let id = id.filter(|id| !id.is_empty());
        let id_generated = id.is_none();
        let id = id.map_or_else(generated_id, str::to_owned);
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

    /// Adds one call of a non-streamed message, whole: no slotting, every
    /// element is its own call. Returns `None` (with an anomaly) for an
    /// element without a name.
    pub fn add_whole(&mut self, delta: &ToolCallDelta, anomalies: &mut Anomalies) -> Option<CallId> {
        // Every element is its own call: a list of its own.
        self.begin_list();
        let header = Header::read(delta);
        let Some(name) = header.name else {
            self.report_fields(None, &header, anomalies);
            let text = header.arguments.map(arguments_text).unwrap_or_default();
            let message = "a tool call without a name was skipped".to_owned();
            anomalies.push(header.anomaly(AnomalyKind::OrphanFragment, message).excerpt(&text));
            return None;
        };
        let n = self.start(header.id, name, header.index, anomalies);
        self.report_fields(Some(n), &header, anomalies);
        if let Some(arguments) = header.arguments {
            self.append(n, arguments, anomalies);
        }
        Some(CallId(n))
    }

    /// Adds a delta's arguments to a call. Returns true when the visible
    /// parameters changed.
    fn append(&mut self, target: u32, arguments: &Arguments, anomalies: &mut Anomalies) -> bool {
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
    fn lose(&mut self, fragment: bool, what: &str) {
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

    /// Opens a call whose id and name arrive together, before any argument
    /// (the Responses API's `output_item.added`): no slotting, the caller
    /// knows which call each later fragment belongs to. An empty id gets a
    /// generated one, reported as for a chat call.
    pub fn open_call(&mut self, id: &str, name: &str, anomalies: &mut Anomalies) -> CallId {
        self.begin_list();
        CallId(self.start(Some(id), name, None, anomalies))
    }

    /// The server's id for a call, learnt late (a Responses item whose
    /// `call_id` came only with its done item): a generated id gives way to
    /// it; a different server id is reported and the first kept.
    pub fn learn_id(&mut self, id: CallId, server_id: &str, anomalies: &mut Anomalies) {
        if id.index() < self.calls.len() && !server_id.is_empty() {
            self.note_id_change(id.0, Some(server_id), anomalies);
        }
    }

    /// Appends an arguments fragment to a known call, with the checks and
    /// the incremental parse of a chat fragment. Returns true when the
    /// visible parameters changed.
    pub fn append_text(&mut self, id: CallId, text: &str, anomalies: &mut Anomalies) -> bool {
        if id.index() >= self.calls.len() {
            return false;
        }
        self.append(id.0, &Arguments::Text(text.into()), anomalies)
    }

    /// Replaces the arguments text received so far with `text` (the whole
    /// arguments a server sent again at the end). Partial updates of the call
    /// stop: its streamed view no longer matches; completion gives `text`.
    pub fn replace_text(&mut self, id: CallId, text: &str) {
        if let Some(c) = self.calls.get_mut(id.index()).filter(|c| !c.completed) {
            c.raw = text.to_owned();
            c.object = None;
            c.partial = None;
            c.nesting = Nesting::default();
        }
    }
}

/// True when `raw` is one complete JSON object (and so cannot be continued).
fn closed_object(raw: &str) -> bool {
    let t = raw.trim();
    t.starts_with('{') && t.ends_with('}') && is_json(t)
}

/// True when `text` is one JSON value.
fn is_json(text: &str) -> bool {
    serde_json::from_str::<crate::chunk::lenient::Skip>(text).is_ok()
}

/// The value of a field (a converted one too), with a field of a wrong
/// type, or converted, added to `problems` as `name`.
fn read<'f, T>(field: &'f Field<T>, name: &'static str, problems: &mut Vec<FieldProblem>) -> Option<&'f T> {
    if let Field::Converted(_, kind) | Field::Wrong(kind) = field {
        let converted = matches!(field, Field::Converted(..));
        problems.push(FieldProblem { field: name, kind: *kind, converted });
    }
    field.get()
}

fn arguments_text(arguments: &Arguments) -> String {
    match arguments {
        Arguments::Text(t) => t.to_string(),
        Arguments::Object(v) => v.to_json(),
    }
}

/// Feeds text to the call's incremental parser; returns whether the visible
/// parameters changed. A parse error ends partial updates for the call.
fn feed_partial(call: &mut Call, text: &str, anomalies: &mut Anomalies) -> bool {
    let Some(state) = call.partial.as_mut() else {
        return false;
    };
    let mut view =
        RootView { events: &mut state.events, depth: &mut state.depth, changed: false, not_an_object: false };
    let problem = match state.parser.feed(text, &mut view) {
        Err(e) => format!("arguments stopped parsing ({e})"),
        Ok(()) if view.not_an_object => "arguments are not a JSON object".to_owned(),
        Ok(()) => return view.changed,
    };
    call.partial = None;
    let msg = format!("call {:?}: {problem}; partial updates stopped", call.id);
    anomalies.push(call.anomaly(AnomalyKind::PartialArgumentsBroken, msg).excerpt(&call.raw));
    false
}

/// Arguments that arrived as an object: shown whole.
fn replay_partial(call: &mut Call, value: &JsonValue) -> bool {
    let Some(state) = call.partial.as_mut() else {
        return false;
    };
    let JsonValue::Object(pairs) = value else {
        return false;
    };
    for (k, v) in pairs {
        replay(&mut state.events, Some(k), v);
    }
    !pairs.is_empty()
}

/// Emits the view events that build `value` at `key`. Recursion depth is
/// bounded by the depth limit of whatever deserialized `value`.
fn replay(sink: &mut impl ViewSink, key: Option<&str>, value: &JsonValue) {
    match value {
        JsonValue::String(s) => {
            sink.open(key, ContainerKind::String);
            if !s.is_empty() {
                sink.append(s);
            }
            sink.close();
        }
        JsonValue::Array(items) => {
            sink.open(key, ContainerKind::Array);
            for item in items {
                replay(sink, None, item);
            }
            sink.close();
        }
        JsonValue::Object(pairs) => {
            sink.open(key, ContainerKind::Object);
            for (k, v) in pairs {
                replay(sink, Some(k), v);
            }
            sink.close();
        }
        scalar => sink.scalar(key, scalar),
    }
}

/// Passes events inside the root object to the call's view and notes
/// whether anything visible happened. The root object itself is the
/// ToolCall's parameters Hash, which always exists.
struct RootView<'a> {
    events: &'a mut ViewEvents,
    depth: &'a mut u32,
    changed: bool,
    not_an_object: bool,
}

impl ViewSink for RootView<'_> {
    fn open(&mut self, key: Option<&str>, kind: ContainerKind) {
        self.not_an_object |= *self.depth == 0 && kind != ContainerKind::Object;
        *self.depth += 1;
        if *self.depth > 1 && !self.not_an_object {
            self.events.open(key, kind);
            self.changed = true;
        }
    }

    fn append(&mut self, text: &str) {
        if *self.depth > 1 && !self.not_an_object {
            self.events.append(text);
            self.changed = true;
        }
    }

    fn scalar(&mut self, key: Option<&str>, value: &JsonValue) {
        self.not_an_object |= *self.depth == 0;
        if !self.not_an_object {
            self.events.scalar(key, value);
            self.changed = true;
        }
    }

    fn close(&mut self) {
        *self.depth = self.depth.saturating_sub(1);
        if *self.depth >= 1 && !self.not_an_object {
            // Recorded so the caller's stack of open containers stays in
            // step, but a value that ends shows nothing new: not a change.
            self.events.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::Chunk;

    /// Applies each `tool_calls` list (JSON text) as one delta, in order.
    fn run(lists: &[&str], anomalies: &mut Anomalies) -> (Calls, Vec<Applied>) {
        let mut calls = Calls::new(false);
        let mut applied = Vec::new();
        for list in lists {
            let text = format!(r#"{{"choices":[{{"delta":{{"tool_calls":{list}}}}}]}}"#);
            let chunk = Chunk::from_json(&text).expect("test JSON");
            let choice = chunk.choices.get().and_then(|l| l.first()).and_then(Field::get).unwrap();
            let Some(items) = choice.delta.get().and_then(|d| d.tool_calls.get()) else {
                panic!("no tool_calls in {list}");
            };
            calls.begin_list();
            for item in items {
                applied.push(calls.apply(item.get().expect("an object"), anomalies));
            }
        }
        (calls, applied)
    }

    /// Completes every call; (name, parameters as JSON) in order.
    fn completed(calls: &mut Calls, anomalies: &mut Anomalies) -> Vec<(String, String)> {
        let ids: Vec<CallId> = (0..calls.len() as u32).map(CallId).collect();
        ids.into_iter()
            .map(|id| {
                let params = match calls.get(id).map(Call::is_completed) {
                    Some(false) => calls.complete(id, anomalies).expect("valid arguments").to_json(),
                    _ => "done".to_owned(),
                };
                (calls.get(id).map(|c| c.name.clone()).unwrap_or_default(), params)
            })
            .collect()
    }

    fn kinds(anomalies: &Anomalies) -> Vec<AnomalyKind> {
        anomalies.all().iter().map(|a| a.kind).collect()
    }

    #[test]
    fn rule_1_same_name_calls_without_id_or_index_in_one_list_are_separate() {
        let mut a = Anomalies::default();
        let (mut calls, _) = run(
            &[r#"[{"function":{"name":"search","arguments":"{\"q\":\"a\"}"}},
                  {"function":{"name":"search","arguments":"{\"q\":\"b\"}"}}]"#],
            &mut a,
        );
        assert_eq!(
            completed(&mut calls, &mut a),
            [("search".into(), r#"{"q":"a"}"#.into()), ("search".into(), r#"{"q":"b"}"#.into())]
        );
        assert_eq!(kinds(&a), [AnomalyKind::GeneratedId, AnomalyKind::GeneratedId]);
    }

    #[test]
    fn same_name_calls_at_one_index_in_one_list_are_separate() {
        let mut a = Anomalies::default();
        let (mut calls, applied) = run(
            &[r#"[{"index":0,"function":{"name":"search","arguments":"{\"q\":\"a\"}"}},
                  {"index":0,"function":{"name":"search","arguments":""}}]"#],
            &mut a,
        );
        assert_eq!(applied[1].replaced, Some(CallId(0)));
        assert_eq!(calls.len(), 2);
        assert_eq!(completed(&mut calls, &mut a)[1], ("search".into(), "{}".into()));
    }

    #[test]
    fn rule_7_same_name_without_id_after_complete_arguments_starts_a_new_call() {
        let mut a = Anomalies::default();
        let (mut calls, applied) = run(
            &[
                r#"[{"index":0,"function":{"name":"search","arguments":"{\"q\":\"a\"}"}}]"#,
                r#"[{"index":0,"function":{"name":"search","arguments":"{\"q\":\"b\"}"}}]"#,
            ],
            &mut a,
        );
        assert_eq!(applied[1].replaced, Some(CallId(0)), "the first call is done");
        assert_eq!(
            completed(&mut calls, &mut a),
            [("search".into(), r#"{"q":"a"}"#.into()), ("search".into(), r#"{"q":"b"}"#.into())]
        );
        // The same without an index: the latest call is not continued either.
        let mut a = Anomalies::default();
        let (mut calls, _) = run(
            &[
                r#"[{"function":{"name":"search","arguments":"{\"q\":\"a\"}"}}]"#,
                r#"[{"function":{"name":"search","arguments":" {\"q\":\"b\"}"}}]"#,
            ],
            &mut a,
        );
        assert_eq!(completed(&mut calls, &mut a).len(), 2);
    }

    #[test]
    fn a_valid_prefix_is_not_the_end_rule_10_names_repeated_continue() {
        let mut a = Anomalies::default();
        let (mut calls, applied) = run(
            &[
                r#"[{"index":0,"function":{"name":"f","arguments":"{\"a\":{\"b\":1}"}}]"#,
                r#"[{"index":0,"function":{"name":"f","arguments":"}"}}]"#,
                r#"[{"index":0,"function":{"name":"f","arguments":"  "}}]"#,
            ],
            &mut a,
        );
        assert!(applied.iter().all(|x| x.replaced.is_none() && x.target == Some(CallId(0))));
        assert_eq!(completed(&mut calls, &mut a), [("f".into(), r#"{"a":{"b":1}}"#.into())]);
        // A closed object inside a string is not a closed call.
        let mut a = Anomalies::default();
        let (mut calls, _) = run(
            &[
                r#"[{"index":0,"function":{"name":"f","arguments":"{\"s\":\"}"}}]"#,
                r#"[{"index":0,"function":{"name":"f","arguments":"{\"}"}}]"#,
            ],
            &mut a,
        );
        assert_eq!(completed(&mut calls, &mut a), [("f".into(), r#"{"s":"}{"}"#.into())]);
    }

    #[test]
    fn the_same_object_repeated_is_one_call_a_different_one_a_new_call() {
        let mut a = Anomalies::default();
        let (mut calls, _) = run(
            &[
                r#"[{"index":0,"function":{"name":"f","arguments":{"q":1}}}]"#,
                r#"[{"index":0,"function":{"name":"f","arguments":{"q":1}}}]"#,
                r#"[{"index":0,"function":{"name":"f","arguments":{"q":2}}}]"#,
            ],
            &mut a,
        );
        assert_eq!(
            completed(&mut calls, &mut a),
            [("f".into(), r#"{"q":1}"#.into()), ("f".into(), r#"{"q":2}"#.into())]
        );
    }

    #[test]
    fn rules_5_8_14_interleaving_ids_and_reused_indexes() {
        let mut a = Anomalies::default();
        let (mut calls, applied) = run(
            &[
                r#"[{"index":0,"id":"a","function":{"name":"f","arguments":""}},
                    {"index":1,"id":"b","function":{"name":"g","arguments":""}}]"#,
                r#"[{"index":1,"function":{"arguments":"{\"y\":"}}]"#,
                r#"[{"index":0,"function":{"arguments":"{\"x\":1}"}}]"#,
                // Rule 8: an explicit id wins over a conflicting index.
                r#"[{"index":0,"id":"b","function":{"arguments":"2}"}}]"#,
                // Rules 8, 14: a nameless fragment with a known id at
                // another index goes to the call with that id.
                r#"[{"index":5,"id":"a","function":{"arguments":" "}}]"#,
                // Rule 7: a new id and name at an occupied index.
                r#"[{"index":0,"id":"c","function":{"name":"h","arguments":"{}"}}]"#,
            ],
            &mut a,
        );
        assert_eq!(applied.last().and_then(|x| x.replaced), Some(CallId(0)));
        assert_eq!(
            completed(&mut calls, &mut a),
            [("f".into(), r#"{"x":1}"#.into()), ("g".into(), r#"{"y":2}"#.into()), ("h".into(), "{}".into())]
        );
        assert!(a.is_empty(), "{:?}", a.all());
    }

    #[test]
    fn wrong_type_fields_are_reported_once_per_call_with_the_call() {
        let mut a = Anomalies::default();
        let (_, _) = run(
            &[
                r#"[{"index":"0","id":"a","function":{"name":"f","arguments":5}},
                    {"index":"1","id":"b","function":{"name":"g","arguments":""}}]"#,
                r#"[{"index":"0","function":{"arguments":"{}"}}]"#,
            ],
            &mut a,
        );
        type Seen<'x> = (AnomalyKind, Option<&'x str>, Option<&'x str>, Option<i64>);
        let seen: Vec<Seen> =
            a.all().iter().map(|x| (x.kind, x.field, x.call_id.as_deref(), x.index)).collect();
        assert_eq!(
            seen,
            [
                (AnomalyKind::ConvertedField, Some("tool_calls[].index"), Some("a"), Some(0)),
                (AnomalyKind::IgnoredField, Some("tool_calls[].function.arguments"), Some("a"), Some(0)),
                (AnomalyKind::ConvertedField, Some("tool_calls[].index"), Some("b"), Some(1)),
            ]
        );
    }

    #[test]
    fn whole_calls_report_wrong_type_arguments_with_the_call() {
        let text = r#"{"choices":[{"message":{"tool_calls":[{"id":"w","function":{"name":"f","arguments":5}},
            {"id":"x","function":"nope"}]}}]}"#;
        let chunk = Chunk::from_json(text).unwrap();
        let choice = chunk.choices.get().and_then(|l| l.first()).and_then(Field::get).unwrap();
        let items = choice.message.get().and_then(|m| m.tool_calls.get()).unwrap();
        let mut calls = Calls::new(false);
        let mut a = Anomalies::default();
        let first = calls.add_whole(items[0].get().unwrap(), &mut a);
        assert_eq!(first, Some(CallId(0)));
        assert_eq!(calls.add_whole(items[1].get().unwrap(), &mut a), None);
        let seen: Vec<(AnomalyKind, Option<&str>, Option<&str>)> =
            a.all().iter().map(|x| (x.kind, x.field, x.call_id.as_deref())).collect();
        assert_eq!(
            seen,
            [
                (AnomalyKind::IgnoredField, Some("tool_calls[].function.arguments"), Some("w")),
                (AnomalyKind::IgnoredField, Some("tool_calls[].function"), Some("x")),
                (AnomalyKind::OrphanFragment, None, Some("x")),
            ]
        );
    }
}
