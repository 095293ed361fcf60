//! The chat slotting rules: which call each streamed `tool_calls` fragment
//! belongs to, as rules 1 to 14 of docs/stream-shapes.md say (the tests
//! below name them by number), and the calls of a whole message.

use crate::anomaly::{Anomalies, Anomaly, AnomalyKind};
use crate::calls::{arguments_text, closed_object, Arguments, Call, CallId, Calls};
use crate::chat::ToolCallDelta;
use crate::lenient::{Field, Id, Int, Kind, Text};

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

/// A field of the wrong type in one `tool_calls` element, reported once the
/// call it belongs to is known.
#[derive(Debug, Clone, Copy)]
struct FieldProblem {
    field: &'static str,
    kind: Kind,
    converted: bool,
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
            // repeats the name of a call whose arguments are not complete
            // yet, or repeats it bringing no arguments at an index another
            // call has (it adds nothing, and takes no index).
            let k = &mut self.calls[known as usize];
            let brings = match h.arguments {
                None => false,
                Some(Arguments::Text(t)) => !t.trim().is_empty(),
                Some(Arguments::Object(_)) => true,
            };
            let another = k.arguments_complete() && (brings || occupied.is_none());
            if let Some(first_index) = k.index.filter(|_| k.name != name || another) {
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
        // Every open call may have lost it (rule 23: never `{}` or repaired
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
    ///   not completed because its text parses (rule 21: a valid
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

    /// Whether a streamed call not `used` yet repeats a call of a whole
    /// message (rule 29), which it then uses: `by_id`, the one with its id;
    /// else one with its name (an id may have been generated, or changed on
    /// the way), an open one with the same arguments first. A call without
    /// a name repeats none by name.
    pub fn repeats(&self, delta: &ToolCallDelta, used: &mut Vec<bool>, by_id: bool) -> bool {
        let h = Header::read(delta);
        used.resize(self.calls.len(), false);
        let free = |i: usize| !used[i];
        let found = match (by_id, h.id, h.name) {
            (true, Some(id), _) => self.calls.iter().enumerate().position(|(i, c)| free(i) && c.id == id),
            (false, _, Some(name)) => {
                let text = h.arguments.map(arguments_text).unwrap_or_default();
                let named = |i: usize, c: &Call| free(i) && c.name == name;
                let same = |c: &Call| !c.completed && c.raw.trim() == text.trim();
                let mut calls = self.calls.iter().enumerate();
                calls
                    .clone()
                    .position(|(i, c)| named(i, c) && same(c))
                    .or_else(|| calls.position(|(i, c)| named(i, c)))
            }
            _ => None,
        };
        found.inspect(|&i| used[i] = true).is_some()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Chunk;

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
            for item in items.iter() {
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
        assert!(a.all().is_empty(), "{:?}", a.all());
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
