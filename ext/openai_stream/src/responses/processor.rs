//! The Responses API processor: streamed events (parsed by the caller, or
//! decoded here from raw SSE bytes with `event:` and `data:` lines) in,
//! items out. The driver it shares with the chat processor (`driver.rs`)
//! owns the SSE framing, the error rules of a read, the calls of one stream,
//! the usage totals and the anomalies; what is its own is reading events
//! (`model.rs`) into the state per output item (`items.rs`).

use super::items::{self, Reasoning};
use super::model::{responses_field_name, usage_of, ItemKind, OutputItem, Place, Status};
use super::scan::{self, DeltaMemo};
use crate::anomaly::{excerpt, Anomaly, AnomalyKind};
use crate::calls::CallId;
use crate::driver::{Driver, OutputLimit, Protocol, State};
use crate::error::Error;
use crate::event_data::parsed_json;
use crate::json::JsonValue;
use crate::output::{Output, Thinking};
use crate::sse::MaxLineBytes;
use crate::usage::UsageMode;

/// How a Responses processor behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Report calls while their arguments stream.
    pub partial_tool_calls: bool,
    /// Return reasoning summaries as thinking items.
    pub output_thinking: bool,
    /// Longest SSE line (and event) accepted by [`ResponsesProcessor::decode`].
    pub max_line_bytes: MaxLineBytes,
    /// Raise a stream error for every event that cannot be read, as the
    /// chat processor's `strict`; by default such an event is skipped and
    /// reported (`unreadable_event`), and limits raise either way.
    pub strict: bool,
    /// The calls still open at `response.incomplete`, and items whose
    /// status is `"incomplete"`.
    pub output_limit: OutputLimit,
}

/// See the module documentation.
pub type ResponsesProcessor = Driver<Responses>;

/// The Responses protocol's own state of a [`ResponsesProcessor`].
#[derive(Debug, Default)]
pub struct Responses {
    pub(super) options: Options,
    pub(super) items: items::Items,
    /// The templates of this stream's last delta events, one per output
    /// item, for their fast reading.
    deltas: DeltaMemo,
    /// See [`ResponsesProcessor::read_whole_events`].
    whole_events: bool,
}

impl Default for ResponsesProcessor {
    fn default() -> Self {
        ResponsesProcessor::new(Options::default())
    }
}

impl ResponsesProcessor {
    pub fn new(options: Options) -> Self {
        let own = Responses { options, ..Responses::default() };
        let Options { partial_tool_calls, max_line_bytes, strict, output_limit, .. } = options;
        // Usage is reported net of cached input.
        Driver::build(partial_tool_calls, max_line_bytes.0, strict, UsageMode::Current, output_limit, own)
    }

    /// An event, or (`whole`) a whole response, as JSON text: the Hash
    /// path, whose reader writes a parsed Hash back as JSON. An event is
    /// read as the raw path reads a payload: a plain delta by the fast
    /// reading, anything else whole.
    pub fn process_json(&mut self, text: &str, whole: bool) -> Result<&Output, Error> {
        let bytes = text.as_bytes();
        self.step(|s| match whole {
            false if s.delta_event(bytes, None) || s.delta_event(bytes, Some(text)) => Ok(()),
            false => s.apply_value(&parsed_json(text)?, false),
            true => s.apply_message(&parsed_json(text)?),
        })
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

    /// For the crate's tests: every event is read whole, also a delta event
    /// (which is otherwise read fast), so that the two readings can be
    /// compared.
    #[cfg(feature = "test-hooks")]
    pub fn read_whole_events(&mut self) {
        self.state.own.whole_events = true;
    }
}

impl Protocol for State<Responses> {
    const EVENT: &'static str = "Responses API event (a JSON object whose \"type\" is \"response.*\")";

    fn payload(&mut self, data: &[u8]) -> Result<bool, Error> {
        if let Some(result) = self.plain(data) {
            return result.map(|()| true);
        }
        let text = self.utf8(data)?;
        if !self.error_event && self.delta_event(data, Some(text)) {
            return Ok(true);
        }
        let value: JsonValue = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) if e.is_eof() => return Ok(false),
            Err(e) => match self.reread(text, &e)? {
                Some(value) => value,
                None => return Ok(false),
            },
        };
        self.apply_value(&value, true).map(|()| true)
    }

    /// Most events: one of the last delta events with other values. (An
    /// error event is read whole.)
    #[inline(always)]
    fn plain(&mut self, data: &[u8]) -> Option<Result<(), Error>> {
        (!self.error_event && self.delta_event(data, None)).then_some(Ok(()))
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
    /// The fast reading of a plain text or arguments delta event, on both
    /// paths (`scan.rs`): the bytes through the template of its item,
    /// or, given them as `text`, by the scanner; false, nothing applied, for
    /// any other event.
    fn delta_event(&mut self, bytes: &[u8], text: Option<&str>) -> bool {
        let read = match text {
            None => scan::plain(bytes, &mut self.own.deltas),
            Some(text) => scan::read(text, &mut self.own.deltas),
        };
        let Some(e) = read.filter(|_| !self.own.whole_events) else { return false };
        self.saw_event = true;
        let item_id = e.item_id.as_deref().filter(|s| !s.is_empty());
        self.apply_delta(e.arguments, Place { output_index: e.output_index, item_id }, &e.delta);
        true
    }

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
        let (n, ids) = (ids.len(), ids.join(", "));
        let what = format!(
            "{why} with {n} call(s) whose output_item.done never came: {ids}; each is completed from the \
             argument deltas that arrived, unless the output limit drops it"
        );
        self.anomalies.push(Anomaly::new(AnomalyKind::Truncated, what));
        self.complete_open()
    }

    /// One event object. `raw`: it came from the SSE stream (where an
    /// `event: error` line makes it an error).
    fn apply_value(&mut self, value: &JsonValue, raw: bool) -> Result<(), Error> {
        if raw && self.error_event {
            return Err(match value.is_object() {
                true => super::in_band::provider_error(value),
                false => Error::Provider { message: excerpt(&value.to_json()), payload: Some(value.clone()) },
            });
        }
        if !value.is_object() {
            let what = format!("an event that is a JSON {} was skipped", value.kind());
            self.anomalies.push(Anomaly::new(AnomalyKind::UnexpectedPayload, what).excerpt(&value.to_json()));
            return Ok(());
        }
        self.apply_event(value)
    }

    // ---- usage -------------------------------------------------------------

    /// Merges a Responses usage object (`input_tokens`, `output_tokens`,
    /// `input_tokens_details.cached_tokens`): every field takes the latest
    /// value sent; a missing or bad field keeps the earlier one.
    pub(super) fn apply_usage(&mut self, usage: &JsonValue) {
        let Some(u) = usage_of(usage) else {
            if !matches!(usage, JsonValue::Null) {
                let what = format!("usage is not an object (a JSON {}); ignored", usage.kind());
                let a = Anomaly::new(AnomalyKind::IgnoredField, what).field("response.usage");
                self.anomalies.push(a.excerpt(&usage.to_json()));
            }
            return;
        };
        self.merge_usage(
            [(&u, "")],
            responses_field_name,
            "cached tokens exceed input_tokens; net prompt tokens reported as 0",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Item, Thinking};

    fn sse(events: &[&str]) -> String {
        let mut s = String::new();
        for e in events {
            let v: serde_json::Value = serde_json::from_str(e).expect("test JSON");
            s.push_str(&format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap_or(""), e));
        }
        s
    }

    /// An arguments delta event of the function call item `item_id`.
    fn args_delta(output_index: u32, item_id: &str, delta: &str) -> String {
        let delta = serde_json::to_string(delta).expect("a string");
        format!(
            r#"{{"type":"response.function_call_arguments.delta","output_index":{output_index},"item_id":"{item_id}","delta":{delta}}}"#
        )
    }

    /// (texts, completed calls as (id, name, params JSON), thinking texts) of one output.
    #[derive(Debug, Default, PartialEq)]
    struct Seen {
        text: String,
        calls: Vec<(String, String, String)>,
        thinking: Vec<(String, bool)>,
        progress: usize,
    }

    fn collect(p: &ResponsesProcessor, seen: &mut Seen) {
        for item in p.output().items() {
            match item {
                Item::Text(t) => seen.text.push_str(t),
                Item::Progress(_) => seen.progress += 1,
                Item::Completed(c, params) => {
                    let call = p.calls().get(c).expect("a call");
                    seen.calls.push((call.id.clone(), call.name.clone(), params.to_json()));
                }
                Item::Thinking { text, kind } => {
                    seen.thinking.push((text.to_owned(), kind != Thinking::Delta))
                }
            }
        }
    }

    /// Decodes `stream` split into reads of `step` bytes, then finishes.
    fn decode(options: Options, stream: &str, step: usize) -> (ResponsesProcessor, Seen, Option<Error>) {
        let mut p = ResponsesProcessor::new(options);
        let mut seen = Seen::default();
        let mut error = None;
        for piece in stream.as_bytes().chunks(step.max(1)) {
            let r = p.decode(piece).err();
            collect(&p, &mut seen);
            error = error.or(r);
        }
        let r = p.finish().err();
        collect(&p, &mut seen);
        (p, seen, error.or(r))
    }

    fn kinds(p: &ResponsesProcessor) -> Vec<AnomalyKind> {
        p.anomalies().all().iter().map(|a| a.kind).collect()
    }

    /// The calls fc_a and fc_b added, `deltas` sent to each in turn (fc_a
    /// first), then `after`.
    fn two_calls(deltas: &[&str], after: &[&str]) -> String {
        let mut events: Vec<String> = vec![ADD_A.into(), ADD_B.into()];
        for (i, delta) in deltas.iter().enumerate() {
            events.push(args_delta(i as u32 % 2, ["fc_a", "fc_b"][i % 2], delta));
        }
        events.extend(after.iter().map(|e| e.to_string()));
        sse(&events.iter().map(String::as_str).collect::<Vec<_>>())
    }

    const ADD_A: &str = r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":""}}"#;
    const ADD_B: &str = r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_b","type":"function_call","call_id":"call_b","name":"lookup","arguments":""}}"#;

    #[test]
    fn two_calls_added_before_either_is_done_with_interleaved_deltas_both_come_out_whole() {
        let stream = two_calls(
            &[r#"{"q":"#, r#"{"id":"#, r#""rust"}"#, "7}"],
            &[
                r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"fc_b","type":"function_call","call_id":"call_b","name":"lookup","arguments":"{\"id\":7}"}}"#,
                r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":"{\"q\":\"rust\"}"}}"#,
                r#"{"type":"response.completed","response":{"usage":{"input_tokens":10,"output_tokens":4,"input_tokens_details":{"cached_tokens":3}}}}"#,
            ],
        );
        for step in [1, 7, stream.len()] {
            for partial in [false, true] {
                let options = Options { partial_tool_calls: partial, ..Options::default() };
                let (p, mut seen, error) = decode(options, &stream, step);
                assert_eq!(error, None);
                // (In one read, a call that streamed comes out at its first position.)
                seen.calls.sort();
                assert_eq!(
                    seen.calls,
                    [
                        ("call_a".into(), "search".into(), r#"{"q":"rust"}"#.into()),
                        ("call_b".into(), "lookup".into(), r#"{"id":7}"#.into())
                    ]
                );
                assert_eq!(p.call_item(CallId(0)), Some((Some("fc_a"), Some("call_a"))));
                assert!(kinds(&p).is_empty(), "{:?}", p.anomalies().all());
                let usage = p.usage();
                assert_eq!(
                    (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens),
                    (Some(7), Some(4), Some(3))
                );
                if partial && step == 1 {
                    assert!(seen.progress > 0);
                }
            }
        }
    }

    #[test]
    fn a_stream_cut_before_done_is_reported_and_unparseable_arguments_raise() {
        let stream = sse(&[ADD_A, &args_delta(0, "fc_a", r#"{"q":"ru"#)]);
        let (p, seen, error) = decode(Options::default(), &stream, 5);
        assert!(seen.calls.is_empty());
        assert!(matches!(error, Some(Error::Arguments { ref id, .. }) if id == "call_a"), "{error:?}");
        assert!(kinds(&p).contains(&AnomalyKind::Truncated));
        assert!(kinds(&p).contains(&AnomalyKind::InvalidArguments));
    }

    #[test]
    fn a_cut_call_whose_arguments_are_whole_is_completed_with_an_anomaly() {
        let stream = sse(&[
            ADD_A,
            &args_delta(0, "fc_a", r#"{"q":1}"#),
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#,
        ]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":1}"#.into())]);
        assert_eq!(kinds(&p), [AnomalyKind::IncompleteResponse, AnomalyKind::Truncated]);
        assert!(p.anomalies().all()[1].message.contains("max_output_tokens"));
    }

    const INCOMPLETE: &str = r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#;

    #[test]
    fn output_limit_decides_the_calls_open_at_response_incomplete() {
        // call_a's arguments are whole, call_b's cut.
        let stream = two_calls(&[r#"{"q":1}"#, r#"{"q":"#], &[INCOMPLETE]);
        let a = ("call_a".into(), "search".into(), r#"{"q":1}"#.into());
        for (output_limit, calls, dropped) in [
            (OutputLimit::Drop, vec![], vec!["call_a", "call_b"]),
            (OutputLimit::DropCut, vec![a], vec!["call_b"]),
        ] {
            let (p, seen, error) = decode(Options { output_limit, ..Options::default() }, &stream, 1000);
            assert_eq!((error, seen.calls), (None, calls), "{output_limit:?}");
            assert_eq!(p.stop_reason(), Some("max_output_tokens"));
            let reported = p.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::DroppedCall);
            assert_eq!(reported.map(|a| a.call_id.as_deref().unwrap_or("")).collect::<Vec<_>>(), dropped);
        }
        // :keep: completed at the end from what arrived, as before; call_b's
        // arguments do not parse.
        let (p, seen, error) =
            decode(Options { output_limit: OutputLimit::Keep, ..Options::default() }, &stream, 1000);
        assert!(matches!(error, Some(Error::Arguments { ref id, .. }) if id == "call_b"), "{error:?}");
        assert_eq!(seen.calls.len(), 1);
        assert!(kinds(&p).contains(&AnomalyKind::Truncated));
        assert!(p.anomalies().all()[1].message.contains("max_output_tokens"));
    }

    #[test]
    fn function_call_items_whose_status_is_incomplete_follow_the_output_limit() {
        let done = |status: &str| {
            format!(
                r#"{{"type":"response.output_item.done","output_index":0,"item":{{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":"{{\"q\":","status":"{status}"}}}}"#
            )
        };
        let (p, seen, error) = decode(Options::default(), &sse(&[ADD_A, &done("incomplete")]), 1000);
        assert_eq!((error, seen.calls), (None, vec![]));
        assert_eq!(kinds(&p), [AnomalyKind::DroppedCall]);
        assert_eq!(p.stop_reason(), None);
        let body = r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[
        {"id":"fc_1","type":"function_call","call_id":"call_1","name":"echo","arguments":"{}","status":"completed"},
        {"id":"fc_2","type":"function_call","call_id":"call_2","name":"echo","arguments":"{}","status":"incomplete"}]}"#;
        let body: JsonValue = serde_json::from_str(body).unwrap();
        for (output_limit, calls) in
            [(OutputLimit::Drop, 1), (OutputLimit::DropCut, 2), (OutputLimit::Keep, 2)]
        {
            let mut p = ResponsesProcessor::new(Options { output_limit, ..Options::default() });
            p.process_json(&body.to_json(), true).unwrap();
            let mut seen = Seen::default();
            collect(&p, &mut seen);
            assert_eq!(seen.calls.len(), calls, "{output_limit:?}");
            assert_eq!(p.stop_reason(), Some("max_output_tokens"));
        }
        // A call without `id` or `call_id` in an incomplete whole response
        // comes out once, like any other.
        let body =
            r#"{"status":"incomplete","output":[{"type":"function_call","name":"echo","arguments":"{}"}]}"#;
        let mut p = ResponsesProcessor::default();
        p.process_json(body, true).unwrap();
        let mut seen = Seen::default();
        collect(&p, &mut seen);
        assert_eq!(seen.calls.len(), 1);
        assert_eq!(kinds(&p), [AnomalyKind::GeneratedId, AnomalyKind::IncompleteResponse]);
    }

    #[test]
    fn web_searches_are_thinking_items_and_finish_hands_out_the_output_items() {
        let search = |action: &str| {
            format!(
                r#"{{"type":"response.output_item.done","output_index":0,"item":{{"id":"ws","type":"web_search_call","action":{action}}}}}"#
            )
        };
        let actions = [
            (r#"{"type":"search","queries":["a","b"],"query":"c"}"#, "Web search: a, b"),
            (r#"{"type":"search","query":"c"}"#, "Web search: c"),
            (r#"{"type":"search"}"#, "Web search"),
            (r#"{"type":"open_page","page_url":"u","title":"t"}"#, "Web fetch: u"),
            (r#"{"type":"open_page"}"#, "Web fetch"),
            (r#"{"type":"find_in_page","query":"q"}"#, "Web page search: q"),
            (r#"{"type":"find_in_page"}"#, "Web page search"),
            (r#"{"type":"screenshot"}"#, "Used native web tool"),
            ("null", "Used native web tool"),
        ];
        for (action, summary) in actions {
            let done = search(action);
            // The search's progress events are bookkeeping of the item: skipped
            // silently (rule 69).
            let stream = sse(&[
                r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"ws","type":"web_search_call"}}"#,
                r#"{"type":"response.web_search_call.in_progress","output_index":0,"item_id":"ws"}"#,
                r#"{"type":"response.web_search_call.searching","output_index":0,"item_id":"ws"}"#,
                r#"{"type":"response.web_search_call.completed","output_index":0,"item_id":"ws"}"#,
                &done,
                r#"{"type":"response.completed","response":{"output":[{"type":"web_search_call"}]}}"#,
            ]);
            let (p, seen, error) =
                decode(Options { output_thinking: true, ..Options::default() }, &stream, 1000);
            assert_eq!(error, None);
            assert_eq!(seen.thinking, [(summary.into(), true), (String::new(), true)], "{action}");
            // The completed response's output wins over the items seen done.
            assert_eq!(p.output_items().len(), 1);
            assert_eq!(p.output_items()[0].get("action"), None);
            assert!(kinds(&p).is_empty());
            let (_, off, _) = decode(Options::default(), &stream, 1000);
            assert_eq!(off, Seen::default());
        }
    }

    #[test]
    fn whole_arguments_of_the_done_item_win_over_different_deltas() {
        let stream = sse(&[
            ADD_A,
            &args_delta(0, "fc_a", r#"{"q":"rus"}"#),
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":"{\"q\":\"rust\"}"}}"#,
        ]);
        for partial in [false, true] {
            let options = Options { partial_tool_calls: partial, ..Options::default() };
            let (p, seen, error) = decode(options, &stream, 3);
            assert_eq!(error, None);
            assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":"rust"}"#.into())]);
            assert_eq!(kinds(&p), [AnomalyKind::ArgumentsMismatch]);
        }
    }

    /// An `output_item.done` of a function call item.
    fn call_done(output_index: u32, id: &str, call_id: &str, name: &str, arguments: &str) -> String {
        format!(
            r#"{{"type":"response.output_item.done","output_index":{output_index},"item":{{"id":"{id}","type":"function_call","call_id":"{call_id}","name":"{name}","arguments":{arguments}}}}}"#
        )
    }

    #[test]
    fn empty_whole_arguments_after_deltas_keep_the_deltas_and_are_reported() {
        let stream = sse(&[
            ADD_A,
            &args_delta(0, "fc_a", r#"{"q":"#),
            &args_delta(0, "fc_a", r#""rust"}"#),
            &call_done(0, "fc_a", "call_a", "search", r#""""#),
        ]);
        for partial in [false, true] {
            let options = Options { partial_tool_calls: partial, ..Options::default() };
            let (p, seen, error) = decode(options, &stream, 9);
            assert_eq!(error, None);
            assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":"rust"}"#.into())]);
            assert_eq!(kinds(&p), [AnomalyKind::ArgumentsMismatch]);
            assert!(p.anomalies().all()[0].message.contains("the deltas were used"));
        }
    }

    #[test]
    fn arguments_sent_as_an_object_are_the_calls_parameters() {
        let object = r#"{"location":"Sydney","days":[1,2]}"#;
        let added = r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search"}}"#;
        let args_done = format!(
            r#"{{"type":"response.function_call_arguments.done","output_index":0,"item_id":"fc_a","arguments":{object}}}"#
        );
        let streams = [
            // On the done item, on the arguments' done event, on a call
            // announced only by its done item.
            sse(&[added, &call_done(0, "fc_a", "call_a", "search", object)]),
            sse(&[added, &args_done, &call_done(0, "fc_a", "call_a", "search", "null")]),
            sse(&[&call_done(0, "fc_a", "call_a", "search", object)]),
        ];
        for stream in streams {
            let (p, seen, error) = decode(Options::default(), &stream, 1000);
            assert_eq!(error, None);
            assert_eq!(seen.calls, [("call_a".into(), "search".into(), object.into())], "{stream}");
            assert!(kinds(&p).is_empty(), "{:?}", p.anomalies().all());
        }
        // Whole, and only in the final response's output.
        let body = format!(
            r#"{{"output":[{{"type":"function_call","id":"fc_a","call_id":"call_a","name":"search","arguments":{object}}}]}}"#
        );
        let mut p = ResponsesProcessor::default();
        p.process_json(&body, true).unwrap();
        let mut seen = Seen::default();
        collect(&p, &mut seen);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), object.into())]);
        // An empty object says no more than "": before the deltas it feeds
        // nothing, after them the deltas stay.
        let empty_added = r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":{}}}"#;
        let stream = sse(&[
            empty_added,
            &args_delta(0, "fc_a", r#"{"q":1}"#),
            &call_done(0, "fc_a", "call_a", "search", "{}"),
        ]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":1}"#.into())]);
        assert_eq!(kinds(&p), [AnomalyKind::ArgumentsMismatch]);
        // Any other value is reported, not taken for no arguments.
        let stream = sse(&[
            added,
            &args_delta(0, "fc_a", r#"{"q":1}"#),
            &call_done(0, "fc_a", "call_a", "search", "[1]"),
        ]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":1}"#.into())]);
        assert_eq!(kinds(&p), [AnomalyKind::IgnoredField]);
    }

    #[test]
    fn another_call_that_reuses_an_item_id_comes_out_too() {
        // Call A completes; call B, another call_id, comes with A's item id.
        let added_b = r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_a","type":"function_call","call_id":"call_b","name":"lookup","arguments":""}}"#;
        let stream = sse(&[
            ADD_A,
            &args_delta(0, "fc_a", r#"{"q":"rust"}"#),
            &call_done(0, "fc_a", "call_a", "search", r#""{\"q\":\"rust\"}""#),
            added_b,
            &args_delta(1, "fc_a", r#"{"id":7}"#),
            &call_done(1, "fc_a", "call_b", "lookup", r#""{\"id\":7}""#),
            concat!(
                r#"{"type":"response.completed","response":{"output":["#,
                r#"{"type":"function_call","id":"fc_a","call_id":"call_a","name":"search","arguments":"{\"q\":\"rust\"}"},"#,
                r#"{"type":"function_call","id":"fc_a","call_id":"call_b","name":"lookup","arguments":"{\"id\":7}"}]}}"#
            ),
        ]);
        // Both calls, each with its arguments, and one duplicate_id.
        let both = |stream: &str, step: usize, partial: bool, a: &str| {
            let options = Options { partial_tool_calls: partial, ..Options::default() };
            let (p, mut seen, error) = decode(options, stream, step);
            assert_eq!(error, None);
            seen.calls.sort();
            let want = [("call_a", "search", a), ("call_b", "lookup", r#"{"id":7}"#)];
            assert_eq!(seen.calls, want.map(|(i, n, a)| (i.to_owned(), n.to_owned(), a.to_owned())));
            assert_eq!(kinds(&p), [AnomalyKind::DuplicateId]);
            assert!(p.anomalies().all()[0].message.contains("both are kept"));
        };
        for step in [1, 11, stream.len()] {
            for partial in [false, true] {
                both(&stream, step, partial, r#"{"q":"rust"}"#);
            }
        }
        // B added under A's item id while A is still open: each event goes
        // to the item at its output_index.
        let stream = sse(&[
            ADD_A,
            &args_delta(0, "fc_a", r#"{"q":"x"}"#),
            added_b,
            &args_delta(1, "fc_a", r#"{"id":7}"#),
            &call_done(0, "fc_a", "call_a", "search", r#""{\"q\":\"x\"}""#),
            &call_done(1, "fc_a", "call_b", "lookup", r#""{\"id\":7}""#),
        ]);
        for partial in [false, true] {
            both(&stream, 1000, partial, r#"{"q":"x"}"#);
        }
        // B added under A's id without an output_index, its events without
        // one either: A's events (at index 0) still go to A.
        let added_b_unplaced = r#"{"type":"response.output_item.added","item":{"id":"fc_a","type":"function_call","call_id":"call_b","name":"lookup","arguments":""}}"#;
        let delta_b =
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_a","delta":"{\"id\":7}"}"#;
        let done_b = r#"{"type":"response.output_item.done","item":{"id":"fc_a","type":"function_call","call_id":"call_b","name":"lookup","arguments":"{\"id\":7}"}}"#;
        let stream = sse(&[
            ADD_A,
            added_b_unplaced,
            &args_delta(0, "fc_a", r#"{"q":"x"}"#),
            delta_b,
            &call_done(0, "fc_a", "call_a", "search", r#""{\"q\":\"x\"}""#),
            done_b,
        ]);
        both(&stream, 1000, false, r#"{"q":"x"}"#);
        // The same item announced again is still a repeat.
        let stream = sse(&[
            ADD_A,
            ADD_A,
            &args_delta(0, "fc_a", "{}"),
            &call_done(0, "fc_a", "call_a", "search", r#""{}""#),
        ]);
        let (p, seen, _) = decode(Options::default(), &stream, 1000);
        assert_eq!(seen.calls.len(), 1);
        assert!(p.anomalies().all()[0].message.contains("the first is kept"));
    }

    #[test]
    fn a_done_item_without_index_or_id_finds_its_call_by_call_id() {
        let done = r#"{"type":"response.output_item.done","item":{"type":"function_call","call_id":"call_a","name":"search","arguments":"{\"q\":1}"}}"#;
        let stream = sse(&[ADD_A, &args_delta(0, "fc_a", r#"{"q":1}"#), done]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":1}"#.into())]);
        assert!(kinds(&p).is_empty(), "{:?}", p.anomalies().all());
    }

    #[test]
    fn usage_without_input_tokens_is_read_and_the_last_usage_wins() {
        let mut p = ResponsesProcessor::default();
        p.process_json(r#"{"type":"response.in_progress","response":{"usage":{"output_tokens":2}}}"#, false)
            .unwrap();
        assert_eq!((p.usage().prompt_tokens, p.usage().completion_tokens), (None, Some(2)));
        p.process_json(
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":9,"output_tokens":5,"input_tokens_details":{"cached_tokens":4}}}}"#,
            false,
        )
        .unwrap();
        let u = p.usage();
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cache_read_tokens), (Some(5), Some(5), Some(4)));
    }

    #[test]
    fn usage_counts_are_read_as_the_chat_ones() {
        // Rule 39 for both protocols: a count sent as a string or an
        // integral float converts, anything else is ignored; each reported
        // in the Responses API's words.
        let mut p = ResponsesProcessor::default();
        let usage =
            r#"{"input_tokens":" 9","output_tokens":5.0,"input_tokens_details":{"cached_tokens":[1]}}"#;
        p.process_json(&format!(r#"{{"output":[],"usage":{usage}}}"#), true).unwrap();
        let u = p.usage();
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cache_read_tokens), (Some(9), Some(5), Some(0)));
        let seen: Vec<(AnomalyKind, Option<&str>)> =
            p.anomalies().all().iter().map(|a| (a.kind, a.field)).collect();
        assert_eq!(
            seen,
            [
                (AnomalyKind::ConvertedField, Some("usage.input_tokens")),
                (AnomalyKind::ConvertedField, Some("usage.output_tokens")),
                (AnomalyKind::IgnoredField, Some("usage.input_tokens_details.cached_tokens")),
            ]
        );
        let mut p = ResponsesProcessor::default();
        p.process_json(r#"{"usage":{"input_tokens_details":7}}"#, true).unwrap();
        assert_eq!(p.anomalies().all()[0].field, Some("usage.input_tokens_details"));
        // Rule 37's other names of cache writes; the chat names of the
        // counts themselves are not this protocol's.
        let usage = r#"{"usage":{"prompt_tokens":100,"input_tokens":9,
            "input_tokens_details":{"cache_creation_input_tokens":"x","cache_creation_tokens":2}}}"#;
        let mut p = ResponsesProcessor::default();
        p.process_json(usage, true).unwrap();
        let u = p.usage();
        assert_eq!((u.prompt_tokens, u.cache_write_tokens), (Some(7), Some(2)));
        let field = p.anomalies().all().first().and_then(|a| a.field);
        assert_eq!(field, Some("usage.input_tokens_details.cache_creation_input_tokens"));
    }

    #[test]
    fn error_events_and_failed_responses_raise_the_providers_message() {
        let (_, _, error) = decode(
            Options::default(),
            "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit\",\"message\":\"slow down\"}\n\n",
            4,
        );
        assert!(
            matches!(error, Some(Error::Provider { ref message, .. }) if message == "slow down"),
            "{error:?}"
        );
        let failed = sse(&[
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}"#,
        ]);
        let (_, _, error) = decode(Options::default(), &failed, 1000);
        assert!(matches!(error, Some(Error::Provider { ref message, .. }) if message == "boom"), "{error:?}");
        // An error with no type (LiteLLM's proxy) after a call was cut: the
        // provider's message, as from an error event.
        let cut = sse(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"delete_posts","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\"topic_id\":12"}"#,
            r#"{"error":{"message":"upstream connection reset","type":"None","code":"500"}}"#,
        ]);
        for step in [1, 7, cut.len()] {
            let (p, seen, error) = decode(Options::default(), &cut, step);
            assert!(
                matches!(error, Some(Error::Provider { ref message, .. }) if message == "upstream connection reset"),
                "{error:?}"
            );
            let typed = cut.replace(r#"{"error":"#, r#"{"type":"error","error":"#);
            let (q, as_event, _) = decode(Options::default(), &typed, step);
            assert_eq!((seen.calls, kinds(&p)), (as_event.calls, kinds(&q)));
            assert!(!kinds(&p).contains(&AnomalyKind::IgnoredEvent));
        }
    }

    #[test]
    fn reasoning_summaries_are_thinking_items_when_asked_for() {
        let stream = sse(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"ENC","summary":[]}}"#,
            r#"{"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":0,"summary_index":0}"#,
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"delta":"Think"}"#,
            r#"{"type":"response.reasoning_summary_part.done","item_id":"rs_1","output_index":0}"#,
            r#"{"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":0,"summary_index":1}"#,
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"delta":"ing"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"ENC","summary":[]}}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_1","type":"message","content":[]}}"#,
            r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"delta":"hi"}"#,
            r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"hi"}]}}"#,
        ]);
        let (p, seen, error) = decode(Options { output_thinking: true, ..Options::default() }, &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.text, "hi");
        assert_eq!(
            seen.thinking,
            [
                ("Think".into(), false),
                ("\n\n".into(), false),
                ("ing".into(), false),
                ("Think\n\ning".into(), true)
            ]
        );
        let r = p.reasoning(0).expect("reasoning");
        assert_eq!((r.id.as_deref(), r.encrypted_content.as_deref()), (Some("rs_1"), Some("ENC")));
        assert_eq!(r.next_message_id.as_deref(), Some("msg_1"));
        let (_, off, _) = decode(Options::default(), &stream, 1000);
        assert!(off.thinking.is_empty());
        // The first part of the next reasoning item starts no blank line.
        let next = stream.clone()
            + &sse(&[
                r#"{"type":"response.output_item.added","output_index":2,"item":{"id":"rs_2","type":"reasoning","summary":[]}}"#,
                r#"{"type":"response.reasoning_summary_part.added","item_id":"rs_2","output_index":2,"summary_index":0}"#,
                r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs_2","output_index":2,"delta":"Plan B"}"#,
                r#"{"type":"response.reasoning_summary_part.done","item_id":"rs_2","output_index":2}"#,
                r#"{"type":"response.output_item.done","output_index":2,"item":{"id":"rs_2","type":"reasoning","summary":[]}}"#,
            ]);
        let (_, seen, _) = decode(Options { output_thinking: true, ..Options::default() }, &next, 1000);
        assert_eq!(seen.thinking[4..], [("Plan B".into(), false), ("Plan B".into(), true)]);
    }

    /// A message item `msg_1` at output index 0: added, the events
    /// `between`, then its done item and the final output, each with the
    /// whole text `whole` (rule 80).
    fn message(between: &[&str], whole: &str) -> String {
        let whole = serde_json::to_string(whole).expect("a string");
        let item = format!(
            r#"{{"id":"msg_1","type":"message","content":[{{"type":"output_text","text":{whole}}}]}}"#
        );
        let done = format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{item}}}"#);
        let completed = format!(
            r#"{{"type":"response.completed","response":{{"status":"completed","output":[{item}]}}}}"#
        );
        let added = r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}"#;
        let events: Vec<&str> = [added]
            .into_iter()
            .chain(between.iter().copied())
            .chain([done.as_str(), completed.as_str()])
            .collect();
        sse(&events)
    }

    fn text_delta(delta: &str) -> String {
        let delta = serde_json::to_string(delta).expect("a string");
        format!(
            r#"{{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":{delta}}}"#
        )
    }

    /// The text and anomaly kinds of `stream` read in reads of every size
    /// from 1 to 64 bytes and whole, each way the same.
    fn text_and_kinds(stream: &str) -> (String, Vec<AnomalyKind>) {
        let (p, seen, error) = decode(Options::default(), stream, stream.len());
        assert_eq!(error, None);
        for step in 1..=64 {
            let (q, split, _) = decode(Options::default(), stream, step);
            assert_eq!((&split.text, kinds(&q)), (&seen.text, kinds(&p)), "reads of {step} bytes");
        }
        (seen.text, kinds(&p))
    }

    #[test]
    fn rule_80_text_sent_only_whole_is_handed_out_once() {
        // Only in output_text.done, then repeated by the done item and the
        // final output.
        let done = r#"{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":"Hello there"}"#;
        assert_eq!(text_and_kinds(&message(&[done], "Hello there")), ("Hello there".into(), vec![]));
        // Only in the done item and the final output.
        assert_eq!(text_and_kinds(&message(&[], "Hi")), ("Hi".into(), vec![]));
        // Only in the final output.
        let completed = r#"{"type":"response.completed","response":{"output":[{"id":"m","type":"message","content":[{"type":"output_text","text":"late"}]}]}}"#;
        assert_eq!(text_and_kinds(&sse(&[completed])), ("late".into(), vec![]));
    }

    #[test]
    fn rule_80_deltas_and_whole_texts_that_agree_give_the_text_once() {
        let (a, b) = (text_delta("Hello"), text_delta(" there"));
        let done = r#"{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":"Hello there"}"#;
        assert_eq!(text_and_kinds(&message(&[&a, &b, done], "Hello there")), ("Hello there".into(), vec![]));
        // Two content parts, each with its output_text.done.
        let part2 = text_delta("second");
        let done2 = r#"{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":1,"text":"second"}"#;
        let item = r#"{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello there"},{"type":"output_text","text":"second"}]}"#;
        let stream = sse(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}"#,
            &a,
            &b,
            done,
            &part2,
            done2,
            &format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{item}}}"#),
        ]);
        assert_eq!(text_and_kinds(&stream), ("Hello theresecond".into(), vec![]));
    }

    #[test]
    fn rule_80_two_messages_whose_deltas_interleave_are_each_matched_to_their_whole_text() {
        let delta = |i: u32, id: &str, d: &str| {
            format!(
                r#"{{"type":"response.output_text.delta","item_id":"{id}","output_index":{i},"delta":"{d}"}}"#
            )
        };
        let done = |i: u32, id: &str, text: &str| {
            format!(
                r#"{{"type":"response.output_item.done","output_index":{i},"item":{{"id":"{id}","type":"message","content":[{{"type":"output_text","text":"{text}"}}]}}}}"#
            )
        };
        let events = [
            delta(0, "msg_a", "one "),
            delta(1, "msg_b", "two "),
            delta(0, "msg_a", "three"),
            delta(1, "msg_b", "four"),
            done(1, "msg_b", "two four and more"),
            done(0, "msg_a", "one three"),
        ];
        let (text, kinds) = text_and_kinds(&sse(&events.iter().map(String::as_str).collect::<Vec<_>>()));
        assert_eq!((text.as_str(), kinds), ("one two threefour and more", vec![AnomalyKind::TextCompleted]));
    }

    /// A message item's added event, and its whole text's done events.
    fn msg_added(i: u32, id: &str) -> String {
        format!(
            r#"{{"type":"response.output_item.added","output_index":{i},"item":{{"id":"{id}","type":"message","content":[]}}}}"#
        )
    }

    fn text_done(i: u32, id: &str, part: u32, text: &str) -> String {
        format!(
            r#"{{"type":"response.output_text.done","item_id":"{id}","output_index":{i},"content_index":{part},"text":"{text}"}}"#
        )
    }

    fn msg_done(i: u32, id: &str, parts: &[&str]) -> String {
        let parts: Vec<String> =
            parts.iter().map(|t| format!(r#"{{"type":"output_text","text":"{t}"}}"#)).collect();
        let parts = parts.join(",");
        format!(
            r#"{{"type":"response.output_item.done","output_index":{i},"item":{{"id":"{id}","type":"message","content":[{parts}]}}}}"#
        )
    }

    fn events(list: &[String]) -> String {
        sse(&list.iter().map(String::as_str).collect::<Vec<_>>())
    }

    #[test]
    fn rule_80_a_part_settled_again_gives_nothing_more() {
        let delta = |part: u32, d: &str| {
            format!(
                r#"{{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":{part},"delta":"{d}"}}"#
            )
        };
        let repeated = events(&[
            msg_added(0, "msg_1"),
            delta(0, "Hello there"),
            text_done(0, "msg_1", 0, "Hello there"),
            text_done(0, "msg_1", 0, "Hello there"),
            msg_done(0, "msg_1", &["Hello there"]),
        ]);
        assert_eq!(text_and_kinds(&repeated), ("Hello there".into(), vec![]));
        let two_parts = events(&[
            msg_added(0, "msg_1"),
            delta(0, "A"),
            delta(1, "B"),
            text_done(0, "msg_1", 0, "A"),
            text_done(0, "msg_1", 1, "B"),
            msg_done(0, "msg_1", &["A", "B"]),
        ]);
        // Part 0's text.done after part 1's deltas: its text is where they start.
        assert_eq!(text_and_kinds(&two_parts), ("AB".into(), vec![]));
    }

    #[test]
    fn rule_80_every_message_sent_only_whole_is_handed_out() {
        let (a, b) = (msg_done(0, "msg_a", &["First."]), msg_done(1, "msg_b", &["Second."]));
        let announced = events(&[
            msg_added(0, "msg_a"),
            text_done(0, "msg_a", 0, "First."),
            a.clone(),
            msg_added(1, "msg_b"),
            text_done(1, "msg_b", 0, "Second."),
            b.clone(),
        ]);
        assert_eq!(text_and_kinds(&announced), ("First.Second.".into(), vec![]));
        let completed = r#"{"type":"response.completed","response":{"output":[
            {"id":"msg_a","type":"message","content":[{"type":"output_text","text":"First."}]},
            {"id":"msg_b","type":"message","content":[{"type":"output_text","text":"Second."}]}]}}"#
            .replace('\n', "");
        assert_eq!(text_and_kinds(&sse(&[&completed])), ("First.Second.".into(), vec![]));
        // The second announced with its id, its deltas lost: its done item gives it.
        let streamed_first = events(&[
            msg_added(0, "msg_a"),
            text_delta_of(0, "msg_a", "First."),
            a,
            msg_added(1, "msg_b"),
            b,
        ]);
        assert_eq!(text_and_kinds(&streamed_first), ("First.Second.".into(), vec![]));
    }

    fn text_delta_of(i: u32, id: &str, d: &str) -> String {
        format!(
            r#"{{"type":"response.output_text.delta","item_id":"{id}","output_index":{i},"delta":"{d}"}}"#
        )
    }

    #[test]
    fn rule_80_deltas_that_name_no_item_go_to_the_last_message_announced() {
        let placeless = |d: &str| format!(r#"{{"type":"response.output_text.delta","delta":"{d}"}}"#);
        let stream = events(&[
            msg_added(0, "msg_a"),
            placeless("Hi. "),
            msg_done(0, "msg_a", &["Hi. "]),
            msg_added(1, "msg_b"),
            placeless("Bye."),
            msg_done(1, "msg_b", &["Bye."]),
        ]);
        assert_eq!(text_and_kinds(&stream), ("Hi. Bye.".into(), vec![]));
    }

    #[test]
    fn rule_80_relays_without_ids_have_each_whole_text_go_to_its_message() {
        let added = |i: u32| {
            format!(
                r#"{{"type":"response.output_item.added","output_index":{i},"item":{{"type":"message","content":[]}}}}"#
            )
        };
        let delta = |i: Option<u32>, d: &str| match i {
            Some(i) => format!(r#"{{"type":"response.output_text.delta","output_index":{i},"delta":"{d}"}}"#),
            None => format!(r#"{{"type":"response.output_text.delta","delta":"{d}"}}"#),
        };
        let done = |i: Option<u32>, t: &str| match i {
            Some(i) => format!(r#"{{"type":"response.output_text.done","output_index":{i},"text":"{t}"}}"#),
            None => format!(r#"{{"type":"response.output_text.done","text":"{t}"}}"#),
        };
        let end = r#"{"type":"response.completed","response":{"output":[]}}"#.to_owned();
        // Announced at its index only, its text only whole.
        let by_index =
            events(&[added(0), delta(Some(0), "One."), added(1), done(Some(1), "Two."), end.clone()]);
        assert_eq!(text_and_kinds(&by_index), ("One.Two.".into(), vec![]));
        // Events that name no item: the last message announced.
        let cut = events(&[
            msg_added(0, "m0"),
            delta(None, "Hel"),
            delta(None, "lo "),
            done(None, "Hello world"),
            end.clone(),
        ]);
        assert_eq!(text_and_kinds(&cut), ("Hello world".into(), vec![AnomalyKind::TextCompleted]));
        let two = events(&[
            added(0),
            delta(None, "One."),
            done(None, "One."),
            added(1),
            delta(None, "Two."),
            done(None, "Two."),
            end,
        ]);
        assert_eq!(text_and_kinds(&two), ("One.Two.".into(), vec![]));
    }

    #[test]
    fn rule_80_deltas_that_stop_short_are_completed_from_the_whole_text() {
        let a = text_delta("Hello");
        let (text, kinds) = text_and_kinds(&message(&[&a], "Hello there"));
        assert_eq!((text.as_str(), kinds), ("Hello there", vec![AnomalyKind::TextCompleted]));
    }

    #[test]
    fn rule_80_a_whole_text_that_differs_is_reported_once_and_the_streamed_text_stands() {
        let a = text_delta("Hello there");
        let (text, kinds) = text_and_kinds(&message(&[&a], "Goodbye"));
        assert_eq!((text.as_str(), kinds), ("Hello there", vec![AnomalyKind::TextMismatch]));
        // An empty whole text says nothing.
        let empty = r#"{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":""}"#;
        let stream = sse(&[&a, empty, r#"{"type":"response.completed","response":{"output":[]}}"#]);
        assert_eq!(text_and_kinds(&stream), ("Hello there".into(), vec![]));
    }

    #[test]
    fn rule_80_a_whole_text_of_no_streamed_message_is_not_handed_out_when_others_streamed() {
        // The final output names the message otherwise (another id and
        // index): its text may be the streamed one, so it is not given twice.
        let a = text_delta("Hello");
        let completed = r#"{"type":"response.completed","response":{"output":[{"id":"rs","type":"reasoning","summary":[]},{"id":"msg_9","type":"message","content":[{"type":"output_text","text":"Hello"}]}]}}"#;
        let (text, kinds) = text_and_kinds(&sse(&[&a, completed]));
        assert_eq!((text.as_str(), kinds), ("Hello", vec![AnomalyKind::TextMismatch]));
        // The same message under another id at the same index: matched.
        let completed = r#"{"type":"response.completed","response":{"output":[{"id":"msg_9","type":"message","content":[{"type":"output_text","text":"Hello"}]}]}}"#;
        assert_eq!(text_and_kinds(&sse(&[&a, completed])), ("Hello".into(), vec![]));
    }

    #[test]
    fn rule_81_a_refusal_is_reported_whole_once_and_not_handed_out() {
        let item =
            r#"{"id":"msg_1","type":"message","content":[{"type":"refusal","refusal":"I can't help."}]}"#;
        let streamed = events(&[
            msg_added(0, "msg_1"),
            r#"{"type":"response.refusal.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"I can't "}"#.into(),
            r#"{"type":"response.refusal.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"help."}"#.into(),
            r#"{"type":"response.refusal.done","item_id":"msg_1","output_index":0,"content_index":0,"refusal":"I can't help."}"#.into(),
            format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{item}}}"#),
            format!(r#"{{"type":"response.completed","response":{{"output":[{item}]}}}}"#),
        ]);
        // Sent only whole: the same report.
        let whole_only =
            events(&[format!(r#"{{"type":"response.completed","response":{{"output":[{item}]}}}}"#)]);
        for stream in [streamed, whole_only] {
            let (text, kinds) = text_and_kinds(&stream);
            assert_eq!((text.as_str(), kinds), ("", vec![AnomalyKind::Refusal]));
            let (p, _, _) = decode(Options::default(), &stream, 5);
            let a = p.anomalies().all().iter().find(|a| a.kind == AnomalyKind::Refusal).expect("reported");
            assert_eq!(a.excerpt.as_deref(), Some("I can't help."));
        }
        // A whole response.
        let mut p = ResponsesProcessor::new(Options::default());
        p.process_json(&format!(r#"{{"output":[{item}]}}"#), true).unwrap();
        assert_eq!(kinds(&p), [AnomalyKind::Refusal]);
    }

    #[test]
    fn rule_81_each_message_refusal_sent_whole_is_kept_once() {
        let item = |id: &str, t: &str| {
            format!(r#"{{"id":"{id}","type":"message","content":[{{"type":"refusal","refusal":"{t}"}}]}}"#)
        };
        let (a, b) = (item("m1", "A."), item("m2", "B."));
        let stream = events(&[
            format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{a}}}"#),
            format!(r#"{{"type":"response.output_item.done","output_index":1,"item":{b}}}"#),
            format!(r#"{{"type":"response.completed","response":{{"output":[{a},{b}]}}}}"#),
        ]);
        let (p, _, _) = decode(Options::default(), &stream, stream.len());
        let reports: Vec<_> = p.anomalies().all().iter().map(|a| (a.kind, a.excerpt.clone())).collect();
        assert_eq!(reports, [(AnomalyKind::Refusal, Some("A.B.".into()))]);
    }

    #[test]
    fn a_whole_response_gives_texts_calls_and_thinking_in_order() {
        let body: JsonValue = serde_json::from_str(
        r#"{"output":[
            {"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}]},
            {"id":"fc_1","type":"function_call","call_id":"call_1","name":"echo","arguments":"{\"s\":\"x\"}"},
            {"id":"msg_1","type":"message","content":[{"type":"output_text","text":"done"}]}
        ],"usage":{"input_tokens":5,"output_tokens":1}}"#,
    )
    .unwrap();
        let mut p = ResponsesProcessor::new(Options { output_thinking: true, ..Options::default() });
        p.process_json(&body.to_json(), true).unwrap();
        let mut seen = Seen::default();
        collect(&p, &mut seen);
        assert_eq!(seen.thinking, [("a\n\nb".into(), true)]);
        assert_eq!(seen.calls, [("call_1".into(), "echo".into(), r#"{"s":"x"}"#.into())]);
        assert_eq!(seen.text, "done");
        assert_eq!(p.linked_reasonings(), [0]);
        assert_eq!(p.usage().prompt_tokens, Some(5));
    }

    #[test]
    fn a_whole_call_with_bad_arguments_raises() {
        let body: JsonValue = serde_json::from_str(
        r#"{"output":[{"id":"fc_1","type":"function_call","call_id":"call_1","name":"echo","arguments":"{\"s\":"}]}"#,
    )
    .unwrap();
        let mut p = ResponsesProcessor::default();
        assert!(matches!(p.process_json(&body.to_json(), true), Err(Error::Arguments { .. })));
    }

    #[test]
    fn a_delta_for_no_known_item_is_an_orphan() {
        let stream = sse(&[&args_delta(3, "fc_x", "{}")]);
        let (p, _, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(kinds(&p), [AnomalyKind::OrphanFragment]);
    }

    #[test]
    fn a_call_only_in_the_final_output_is_not_lost() {
        let stream = sse(&[
            r#"{"type":"response.completed","response":{"status":"completed","output":[{"id":"fc_z","type":"function_call","call_id":"call_z","name":"late","arguments":"{\"a\":1}"}]}}"#,
        ]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.calls, [("call_z".into(), "late".into(), r#"{"a":1}"#.into())]);
        assert_eq!(kinds(&p), [AnomalyKind::Truncated]);
        // Streamed calls listed again in the final output are not repeated.
        let stream = sse(&[
            ADD_A,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":"{}"}}"#,
            r#"{"type":"response.completed","response":{"output":[{"id":"fc_a","type":"function_call","call_id":"call_a","name":"search","arguments":"{}"}]}}"#,
        ]);
        let (p, seen, _) = decode(Options::default(), &stream, 1000);
        assert_eq!(seen.calls.len(), 1);
        assert!(kinds(&p).is_empty());
        // vLLM lists the streamed call under new ids: the same call, once.
        let renamed = stream.replace(
            r#"{"output":[{"id":"fc_a","type":"function_call","call_id":"call_a""#,
            r#"{"output":[{"id":"fc_9","type":"function_call","call_id":"call_9""#,
        );
        assert_ne!(renamed, stream);
        let (p, seen, _) = decode(Options::default(), &renamed, 1000);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), "{}".into())]);
        assert_eq!(kinds(&p), [AnomalyKind::ConflictingValue]);
        // Another name at that index is another call.
        let (p, seen, _) = decode(
            Options::default(),
            &renamed.replace(r#""call_9","name":"search""#, r#""call_9","name":"fetch""#),
            1000,
        );
        assert_eq!(seen.calls.len(), 2);
        assert_eq!(kinds(&p), [AnomalyKind::Truncated]);
    }

    #[test]
    fn a_call_whose_done_event_was_lost_takes_its_whole_arguments_from_the_final_output() {
        // The second delta and the done event are lost (cut into one line
        // that cannot be read); response.completed lists the call whole.
        let stream = [
            sse(&[ADD_A, &args_delta(0, "fc_a", r#"{"q":"ru"#)]),
            "data: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\n\n".to_owned(),
            sse(&[concat!(
                r#"{"type":"response.completed","response":{"status":"completed","output":["#,
                r#"{"id":"fc_a","type":"function_call","status":"completed","call_id":"call_a","name":"search","arguments":"{\"q\":\"rust\"}"}]}}"#
            )]),
        ]
        .concat();
        for partial in [false, true] {
            let options = Options { partial_tool_calls: partial, ..Options::default() };
            let (p, seen, error) = decode(options, &stream, 1000);
            assert_eq!(error, None, "partial={partial}");
            assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":"rust"}"#.into())]);
            let kinds = kinds(&p);
            assert!(
                kinds.contains(&AnomalyKind::ArgumentsMismatch) && kinds.contains(&AnomalyKind::Truncated),
                "{kinds:?}"
            );
        }
    }

    #[test]
    fn a_call_id_that_comes_only_with_the_done_item_replaces_the_generated_one() {
        let stream = sse(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_q","type":"function_call","name":"search"}}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"{}"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_q","type":"function_call","call_id":"call_q","name":"search","arguments":"{}"}}"#,
        ]);
        let (p, seen, _) = decode(Options::default(), &stream, 1000);
        assert_eq!(seen.calls, [("call_q".into(), "search".into(), "{}".into())]);
        assert_eq!(p.call_item(CallId(0)), Some((Some("fc_q"), Some("call_q"))));
        assert_eq!(kinds(&p), [AnomalyKind::GeneratedId]);
    }

    #[test]
    fn the_fast_reading_of_delta_events_agrees_with_the_full_one() {
        fn fast(s: &str) -> Option<crate::responses::DeltaEvent<'_>> {
            scan::read(s, &mut DeltaMemo::default())
        }
        let d = fast(r#"{"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_a","output_index":0,"delta":"{\"q\\n\":","obfuscation":"x"}"#)
        .expect("a delta event");
        assert_eq!(
            (d.arguments, &*d.delta, d.item_id.as_deref(), d.output_index),
            (true, "{\"q\\n\":", Some("fc_a"), Some(0))
        );
        let t = fast(r#"{"type":"response.output_text.delta","delta":"hi","logprobs":[]}"#)
            .expect("a text delta");
        assert_eq!((t.arguments, &*t.delta), (false, "hi"));
        // Anything else is left to the full reading.
        let others = [
            r#"{"type":"response.output_text.delta","delta":{"a":1}}"#,
            r#"{"type":"response.output_text.delta","delta":null}"#,
            r#"{"type":"response.output_text.delta","output_index":"1","delta":"x"}"#,
            r#"{"type":"response.output_text.delta","delta":"x","response":{"usage":{"output_tokens":1}}}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"1}","item":{}}"#,
            r#"{"type":"response.completed","delta":"x"}"#,
            r#"{"delta":"x"}"#,
        ];
        for other in others {
            assert_eq!(fast(other), None, "{other}");
        }
        // A stream read fast, decoded and as the Hash path's events, gives
        // what the full reading of each event gives.
        let args = args_delta(0, "fc_a", r#"{"q":"#);
        let mut stream = vec![
            ADD_A,
            &args,
            r#"{"type":"response.function_call_arguments.delta","output_index":7,"delta":"orphan"}"#,
        ];
        stream.extend([r#"{"type":"response.output_text.delta","item_id":"","delta":"t\u00e9"}"#, ADD_A]);
        stream.extend(others);
        let (decoded, b, _) = decode(Options::default(), &sse(&stream), 1000);
        let (mut full, mut hash) = (ResponsesProcessor::default(), ResponsesProcessor::default());
        let (mut a, mut c) = (Seen::default(), Seen::default());
        for e in &stream {
            let value = crate::json::parse_complete(e).unwrap();
            full.step(|s| s.apply_value(&value, false)).unwrap();
            collect(&full, &mut a);
            hash.process_json(e, false).unwrap();
            collect(&hash, &mut c);
        }
        for (p, seen) in [(&mut full, &mut a), (&mut hash, &mut c)] {
            p.finish().unwrap();
            collect(p, seen);
        }
        assert_eq!((&a, &b), (&c, &c));
        assert_eq!((full.usage(), decoded.anomalies().all()), (hash.usage(), hash.anomalies().all()));
        assert_eq!(full.anomalies().all(), hash.anomalies().all());
        assert_eq!((c.text.as_str(), c.calls.len(), hash.usage().completion_tokens), ("téxx", 1, Some(1)));
        // A number serde_json refuses (an infinite Float, as the Hash reader
        // writes it) is read whole too.
        let inf = r#"{"type":"response.output_text.delta","delta":"x","output_index":1e400}"#;
        assert_eq!(hash.process_json(inf, false).unwrap().items().collect::<Vec<_>>(), [Item::Text("x")]);
    }

    #[test]
    fn an_output_item_of_another_type_is_reported_once() {
        let stream = sse(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fs_1","type":"file_search_call","status":"in_progress"}}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fs_1","type":"file_search_call","status":"completed"}}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fs_2","type":"file_search_call"}}"#,
        ]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!((error, seen), (None, Seen::default()));
        assert_eq!(kinds(&p), [AnomalyKind::IgnoredEvent]);
        assert!(p.anomalies().all()[0].message.contains("file_search_call"));
    }

    #[test]
    fn an_item_announced_twice_is_one_call() {
        let stream = sse(&[ADD_A, ADD_A, &args_delta(0, "fc_a", r#"{"q":2}"#)]);
        let (p, seen, error) = decode(Options::default(), &stream, 1000);
        assert_eq!(error, None);
        assert_eq!(seen.calls, [("call_a".into(), "search".into(), r#"{"q":2}"#.into())]);
        assert_eq!(kinds(&p), [AnomalyKind::DuplicateId, AnomalyKind::Truncated]);
    }

    #[test]
    fn numbers_beyond_a_float_lose_no_event() {
        let created = r#"{"type":"response.created","response":{"id":"r","status":"in_progress"},"x":1e400}"#;
        let text = r#"{"type":"response.output_text.delta","item_id":"m","delta":"hi","x":-1e400}"#;
        let big = format!(
            r#"{{"type":"response.output_text.delta","item_id":"m","delta":" you","n":{}}}"#,
            "9".repeat(400)
        );
        let stream: String = [created, text, &big].iter().map(|e| format!("data: {e}\n\n")).collect();
        let (p, seen, error) = decode(Options::default(), &stream, 5);
        assert_eq!((seen.text.as_str(), error), ("hi you", None));
        assert!(!kinds(&p).contains(&AnomalyKind::UnreadableEvent), "{:?}", p.anomalies().all());
    }

    #[test]
    fn an_unreadable_event_is_skipped_and_reported_unless_strict() {
        let stream = format!(
        "{}data: {{\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"delta\":\"{{\\\"q\\\"\" oops}}\n\n{}",
        sse(&[ADD_A]),
        sse(&[r#"{"type":"response.output_text.delta","delta":"after"}"#])
    );
        let (p, seen, error) = decode(Options::default(), &stream, 7);
        // The event was lost: the open call is not repaired into something else.
        assert!(matches!(error, Some(Error::Arguments { .. })), "{error:?}");
        assert_eq!(seen.text, "after");
        assert!(kinds(&p).contains(&AnomalyKind::UnreadableEvent));
        let (_, _, strict) = decode(Options { strict: true, ..Options::default() }, &stream, 7);
        assert!(matches!(strict, Some(Error::Stream { .. })), "{strict:?}");
    }

    #[test]
    fn a_delta_event_with_a_key_nested_too_deep_raises_as_any_event_does() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let stream =
            format!("data: {{\"type\":\"response.output_text.delta\",\"delta\":\"hi\",\"x\":{deep}}}\n\n");
        let (_, seen, error) = decode(Options::default(), &stream, 1000);
        assert!(
            matches!(error, Some(Error::Stream { kind: crate::error::StreamErrorKind::TooDeep, .. })),
            "{error:?}"
        );
        assert_eq!(seen.text, "");
    }

    #[test]
    fn a_reasoning_left_waiting_by_a_whole_response_links_to_the_next_message_either_way() {
        let json = |s: &str| -> JsonValue { serde_json::from_str(s).unwrap() };
        let reasoning = json(r#"{"output":[{"id":"rs_1","type":"reasoning","summary":[]}]}"#);
        let message = r#"{"id":"msg_2","type":"message","content":[]}"#;
        // The next response with a reasoning item of its own before its message,
        // and without: the first reasoning learns the message's id both times,
        // as it does in a stream.
        for next in [
            format!(r#"{{"output":[{{"id":"rs_2","type":"reasoning"}},{message}]}}"#),
            format!(r#"{{"output":[{message}]}}"#),
        ] {
            let mut p = ResponsesProcessor::new(Options { output_thinking: true, ..Options::default() });
            p.process_json(&reasoning.to_json(), true).unwrap();
            p.process_json(&next, true).unwrap();
            assert!(p.linked_reasonings().contains(&0), "{next}");
            assert_eq!(p.reasoning(0).and_then(|r| r.next_message_id.as_deref()), Some("msg_2"), "{next}");
        }
    }

    #[test]
    fn a_stream_without_one_responses_event_is_reported_at_finish() {
        let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
        let (p, seen, error) = decode(Options::default(), chat, 7);
        assert_eq!((seen.text.as_str(), error.is_none()), ("", true));
        assert_eq!(kinds(&p).last(), Some(&AnomalyKind::WrongProtocol));
        assert!(p.anomalies().all().last().is_some_and(|a| a.message.contains("Responses API event")));
        for stream in [
            sse(&[r#"{"type":"response.output_text.delta","delta":"Hi"}"#]),
            sse(&[r#"{"type":"response.created","response":{}}"#]),
        ] {
            let (p, _, _) = decode(Options::default(), &stream, 5);
            assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol), "{stream}");
        }
        // An error event is an event of the protocol: raised, and nothing more.
        for stream in
            ["event: error\ndata: {\"message\":\"overloaded\"}\n\n", "event: error\ndata: overloaded\n\n"]
        {
            let (p, _, error) = decode(Options::default(), stream, 5);
            assert!(
                matches!(error, Some(Error::Provider { ref message, .. }) if message == "overloaded"),
                "{error:?}"
            );
            assert_eq!(kinds(&p), [], "{stream:?}");
        }
    }
}
