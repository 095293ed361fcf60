//! The accumulator driven by arbitrary event sequences: structured chunks
//! with tool-call deltas (index, id, name, arguments fragments of every
//! type the servers of docs/stream-shapes.md send, and wrong ones), content and
//! finish reasons, rendered to JSON and fed through `process_json` (the
//! Hash path's entry), then `finish`. The same chunks run in both modes.
//!
//! Invariants:
//! - no panic; every item names a call that exists; no call completes twice;
//! - every call the processor created (its header arrived) comes out: as an
//!   `Item::Completed` from some call, or as an `invalid_arguments` anomaly
//!   (or the error returned for it), never both;
//! - partial and non-partial runs complete the same calls with the same
//!   parameters and fail the same calls;
//! - partial mode: the view a caller built from the view events is
//!   consistent with the final parameters when the call completes.
#![no_main]

mod common;

use std::collections::{HashMap, HashSet};

use common::{consistent, ruby_view, Mirror};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use openai_stream::anomaly::AnomalyKind;
use openai_stream::error::Error;
use openai_stream::json::JsonValue;
use openai_stream::output::Item;
use openai_stream::chat::{ChatProcessor, Options};
use serde_json::{json, Value};

/// Whole argument documents; fragments are slices of them, so fragmented
/// arguments are mostly real JSON cut anywhere.
const DOCS: &[&str] = &[
    r#"{"city": "Paris"}"#,
    r#"{"q":"h\u00e9llo \"x\" \\ \ud83d\ude00","n":[1,-2.5e3,{"x":null}],"b":true}"#,
    r#"{"a":"x","a":"yz","a":{"b":[]}}"#,
    "{}",
    "",
    r#""{\"a\":1}""#,
    r#""a":1}"#,
    r#"{"a":[1,{"b":"c"#,
    r#"{"n":1e400,"m":-0,"big":123456789012345678901234567890}"#,
    r#"{"d":[[[[{"e":[]}]]]]}"#,
    r#"{"a":1}{"b":2}"#,
    r#"  {"t":"tab\tnew\nline"}  "#,
];

#[derive(Arbitrary, Debug)]
struct Input {
    chunks: Vec<ChunkSpec>,
}

#[derive(Arbitrary, Debug)]
struct ChunkSpec {
    shape: ChoiceShape,
    content: Option<ContentSpec>,
    tool_calls: ToolCalls,
    finish: u8,
    usage: Option<(u8, u8)>,
}

#[derive(Arbitrary, Debug)]
enum ChoiceShape {
    Normal,
    /// `choices: []` (the usage chunk).
    NoChoices,
    /// A choice with no delta (Azure content filter annotations).
    NoDelta,
    /// Two choices: only the first is read.
    TwoChoices,
}

#[derive(Arbitrary, Debug)]
enum ContentSpec {
    Text(String),
    Empty,
    Null,
    Parts(String),
    Wrong(u8),
}

#[derive(Arbitrary, Debug)]
enum ToolCalls {
    Missing,
    Null,
    Empty,
    Wrong,
    List(Vec<DeltaSpec>),
}

#[derive(Arbitrary, Debug)]
struct DeltaSpec {
    index: IndexSpec,
    id: IdSpec,
    id_in_function: bool,
    function: FunctionShape,
    name: NameSpec,
    arguments: ArgsSpec,
}

#[derive(Arbitrary, Debug)]
enum IndexSpec {
    Missing,
    Null,
    Int(u8),
    Str(u8),
    Negative,
    Float,
    Huge,
    Wrong,
}

#[derive(Arbitrary, Debug)]
enum IdSpec {
    Missing,
    Null,
    Empty,
    Pool(u8),
    Int(u8),
    Wrong,
}

#[derive(Arbitrary, Debug)]
enum FunctionShape {
    Object,
    Missing,
    Null,
    Wrong,
}

#[derive(Arbitrary, Debug)]
enum NameSpec {
    Missing,
    Null,
    Empty,
    Pool(u8),
    Wrong,
}

#[derive(Arbitrary, Debug)]
enum ArgsSpec {
    Missing,
    Null,
    /// A slice of one of `DOCS`, by char: (doc, start, length).
    Slice(u8, u8, u8),
    Whole(u8),
    Raw(String),
    /// Arguments as an object (TGI): one of `DOCS` parsed, when it is one.
    Object(u8),
    Wrong(u8),
}

fn pick<T: Copy>(pool: &[T], n: u8) -> T {
    pool[usize::from(n) % pool.len()]
}

fn wrong(n: u8) -> Value {
    match n % 4 {
        0 => json!(7),
        1 => json!(true),
        2 => json!([1]),
        _ => json!({"x": 1}),
    }
}

fn put(map: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.to_owned(), v);
    }
}

fn slice(doc: &str, start: u8, len: u8) -> String {
    doc.chars().skip(usize::from(start) % (doc.chars().count() + 1)).take(usize::from(len % 24)).collect()
}

impl DeltaSpec {
    fn render(&self) -> Value {
        let mut d = serde_json::Map::new();
        let index = match self.index {
            IndexSpec::Missing => None,
            IndexSpec::Null => Some(Value::Null),
            IndexSpec::Int(n) => Some(json!(n % 4)),
            IndexSpec::Str(n) => Some(json!((n % 4).to_string())),
            IndexSpec::Negative => Some(json!(-1)),
            IndexSpec::Float => Some(json!(1.5)),
            IndexSpec::Huge => Some(json!(u64::MAX)),
            IndexSpec::Wrong => Some(json!([0])),
        };
        put(&mut d, "index", index);
        let id = match self.id {
            IdSpec::Missing => None,
            IdSpec::Null => Some(Value::Null),
            IdSpec::Empty => Some(json!("")),
            IdSpec::Pool(n) => Some(json!(pick(&["call_a", "call_b", "call_c", "0"], n))),
            IdSpec::Int(n) => Some(json!(n % 3)),
            IdSpec::Wrong => Some(json!({"id": 1})),
        };
        let mut f = serde_json::Map::new();
        if let (Some(id), true) = (&id, self.id_in_function) {
            f.insert("id".into(), id.clone());
        } else if let Some(id) = id {
            d.insert("id".into(), id);
        }
        let name = match self.name {
            NameSpec::Missing => None,
            NameSpec::Null => Some(Value::Null),
            NameSpec::Empty => Some(json!("")),
            NameSpec::Pool(n) => Some(json!(pick(&["get_weather", "search", "é"], n))),
            NameSpec::Wrong => Some(json!(["x"])),
        };
        put(&mut f, "name", name);
        let arguments = match &self.arguments {
            ArgsSpec::Missing => None,
            ArgsSpec::Null => Some(Value::Null),
            ArgsSpec::Slice(doc, start, len) => Some(json!(slice(pick(DOCS, *doc), *start, *len))),
            ArgsSpec::Whole(doc) => Some(json!(pick(DOCS, *doc))),
            ArgsSpec::Raw(text) => Some(json!(text)),
            ArgsSpec::Object(doc) => Some(
                serde_json::from_str::<Value>(pick(DOCS, *doc))
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"k": "v"})),
            ),
            ArgsSpec::Wrong(n) => Some(wrong(*n)),
        };
        put(&mut f, "arguments", arguments);
        let function = match self.function {
            FunctionShape::Object => Some(Value::Object(f)),
            FunctionShape::Missing => None,
            FunctionShape::Null => Some(Value::Null),
            FunctionShape::Wrong => Some(json!("f")),
        };
        put(&mut d, "function", function);
        d.insert("type".into(), json!("function"));
        Value::Object(d)
    }
}

impl ChunkSpec {
    fn render(&self) -> String {
        let mut delta = serde_json::Map::new();
        let content = self.content.as_ref().map(|c| match c {
            ContentSpec::Text(t) => json!(t),
            ContentSpec::Empty => json!(""),
            ContentSpec::Null => Value::Null,
            ContentSpec::Parts(t) => json!([
                {"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]},
                {"type": "text", "text": t}
            ]),
            ContentSpec::Wrong(n) => wrong(*n),
        });
        put(&mut delta, "content", content);
        let tool_calls = match &self.tool_calls {
            ToolCalls::Missing => None,
            ToolCalls::Null => Some(Value::Null),
            ToolCalls::Empty => Some(json!([])),
            ToolCalls::Wrong => Some(json!({"index": 0})),
            ToolCalls::List(list) => Some(Value::Array(list.iter().map(DeltaSpec::render).collect())),
        };
        put(&mut delta, "tool_calls", tool_calls);
        // Mostly no finish reason; "error" rarely (it raises).
        let finish = match self.finish {
            0..=159 => None,
            160..=179 => Some(Value::Null),
            180..=199 => Some(json!("")),
            200..=224 => Some(json!("tool_calls")),
            225..=249 => Some(json!("stop")),
            250..=252 => Some(json!(3)),
            _ => Some(json!("error")),
        };
        let mut choice = serde_json::Map::new();
        choice.insert("index".into(), json!(0));
        if !matches!(self.shape, ChoiceShape::NoDelta) {
            choice.insert("delta".into(), Value::Object(delta));
        }
        if let Some(f) = finish {
            choice.insert("finish_reason".into(), f);
        }
        let choices = match self.shape {
            ChoiceShape::NoChoices => json!([]),
            ChoiceShape::TwoChoices => {
                json!([Value::Object(choice), {"index": 1, "delta": {"content": "other"}}])
            }
            _ => json!([Value::Object(choice)]),
        };
        let mut chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices});
        if let Some((p, c)) = self.usage {
            chunk["usage"] = json!({"prompt_tokens": p, "completion_tokens": c});
        }
        chunk.to_string()
    }
}

/// One mode's result, for the comparison of the two.
#[derive(Debug, PartialEq)]
struct Run {
    /// CallId, server id (None when generated), name, parameters.
    completed: Vec<(u32, Option<String>, String, JsonValue)>,
    failed: Vec<u32>,
    calls: usize,
}

fuzz_target!(|input: Input| {
    let chunks: Vec<String> = input.chunks.iter().map(ChunkSpec::render).collect();
    let plain = drive(false, &chunks);
    let partial = drive(true, &chunks);
    assert_eq!(plain, partial, "non-partial vs partial");
});

fn drive(partial: bool, chunks: &[String]) -> Run {
    let mut p = ChatProcessor::new(Options { partial_tool_calls: partial, ..Options::default() });
    let mut state = State::default();
    for text in chunks {
        let result = p.process_json(text, false).map(|_| ());
        state.observe(&p, result);
    }
    // Every call created before finish must come out.
    let created = p.calls().len();
    let result = p.finish().map(|_| ());
    state.observe(&p, result);
    assert_eq!(p.calls().len(), created, "finish creates no call");
    assert!(p.calls().open().next().is_none(), "finish completes every call");

    let done: HashSet<u32> = state.completed.iter().map(|c| c.0).collect();
    let limit_hit = p.anomalies().dropped() > 0;
    for i in 0..created as u32 {
        let out = done.contains(&i);
        let failed = state.failed.contains(&i);
        assert!(!(out && failed), "call {i} both completed and failed");
        // Past the anomaly limit a failed call is only counted (and its
        // error possibly not the one returned).
        assert!(
            out || failed || limit_hit,
            "call {i} ({:?}) was lost",
            p.calls().get(openai_stream::calls::CallId(i))
        );
    }
    let mut failed: Vec<u32> = state.failed.into_iter().collect();
    failed.sort_unstable();
    // By call: within one output a call sits where it first appeared, so
    // with partial tool calls (progress first) completions of one chunk can
    // come in another order than without.
    let mut completed = state.completed;
    completed.sort_by_key(|c| c.0);
    Run { completed, failed, calls: created }
}

#[derive(Default)]
struct State {
    completed: Vec<(u32, Option<String>, String, JsonValue)>,
    failed: HashSet<u32>,
    mirrors: HashMap<u32, Mirror>,
    anomalies_seen: usize,
}

impl State {
    fn observe(&mut self, p: &ChatProcessor, result: Result<(), Error>) {
        for item in p.output().items() {
            match item {
                Item::Text(t) => assert!(!t.is_empty()),
                Item::Progress(id) => {
                    let call = p.calls().get(id).expect("progress names a call that exists");
                    let mirror = self.mirrors.entry(id.0).or_insert_with(Mirror::params);
                    if let Some(view) = call.view() {
                        for event in view.iter() {
                            mirror.apply(event);
                        }
                    }
                }
                Item::Completed(id, params) => {
                    let call = p.calls().get(id).expect("completion names a call that exists");
                    assert!(call.is_completed());
                    assert!(!self.completed.iter().any(|c| c.0 == id.0), "call {id:?} completed twice");
                    assert!(params.is_object(), "parameters are not an object: {params:?}");
                    if let Some(mirror) = self.mirrors.remove(&id.0) {
                        let view = mirror.root.as_ref().expect("a params mirror has a root");
                        assert!(
                            consistent(view, params, Some(&mirror.path)),
                            "call {id:?}: view {view:?} (open {:?}) vs final {params:?}",
                            mirror.path
                        );
                    }
                    let server_id = (!call.id_generated).then(|| call.id.clone());
                    self.completed.push((id.0, server_id, call.name.clone(), ruby_view(params)));
                }
                Item::Thinking { .. } => panic!("the chat processor returned a thinking item"),
            }
        }
        // Calls that failed: an invalid_arguments anomaly names them (by
        // the id they have now: a failed call takes no more deltas that
        // could change it within the same processor call).
        let all = p.anomalies().all();
        for a in &all[self.anomalies_seen..] {
            if a.kind == AnomalyKind::InvalidArguments {
                let id = a.call_id.as_deref().expect("invalid_arguments names its call");
                let matching: Vec<u32> = (0..p.calls().len() as u32)
                    .filter(|&i| {
                        let c = p.calls().get(openai_stream::calls::CallId(i)).unwrap();
                        c.id == id && c.is_completed()
                    })
                    .filter(|i| !self.completed.iter().any(|c| c.0 == *i) && !self.failed.contains(i))
                    .collect();
                let first =
                    *matching.first().unwrap_or_else(|| panic!("invalid_arguments for {id:?} names no call"));
                self.failed.insert(first);
                self.mirrors.remove(&first);
            }
        }
        self.anomalies_seen = all.len();
        if let (Err(Error::Arguments { id, .. }), 0) = (&result, p.anomalies().dropped()) {
            assert!(
                (0..p.calls().len() as u32).any(|i| self.failed.contains(&i)
                    && p.calls().get(openai_stream::calls::CallId(i)).is_some_and(|c| &c.id == id)),
                "an arguments error for {id:?} without its anomaly"
            );
        }
    }
}
