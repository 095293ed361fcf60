//! Test harness: drives a ChatProcessor and mirrors its items the way the Ruby
//! binding does (one object per call, view events applied in place), so tests
//! can assert what a Ruby caller would see.
#![allow(dead_code)]

use std::collections::HashMap;

use openai_stream::anomaly::AnomalyKind;
use openai_stream::calls::CallId;
use openai_stream::chat::{ChatProcessor, Options};
use openai_stream::error::Error;
use openai_stream::json::{ContainerKind, JsonValue, ViewEvent};
use openai_stream::output::{Item, Thinking};
use openai_stream::usage::UsageReport;
use serde_json::{json, Map, Value};

/// What a Ruby caller holds for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub params: Value,
    pub partial: bool,
}

/// One returned item, as seen right after the call that returned it.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    Text(String),
    Call(Call),
    /// Reasoning, whole (with `Options::output_thinking`).
    Thinking(String),
}

impl Out {
    pub fn call(&self) -> Option<&Call> {
        match self {
            Out::Call(c) => Some(c),
            _ => None,
        }
    }
}

pub struct Harness {
    pub processor: ChatProcessor,
    mirrors: HashMap<CallId, Mirror>,
}

struct Mirror {
    call: Call,
    /// Path of open containers inside params (keys/indexes).
    stack: Vec<Slot>,
}

#[derive(Debug, Clone)]
enum Slot {
    Key(String),
    Index(usize),
}

impl Harness {
    pub fn new(partial: bool) -> Self {
        Self::with(Options { partial_tool_calls: partial, ..Options::default() })
    }

    pub fn with(options: Options) -> Self {
        Harness { processor: ChatProcessor::new(options), mirrors: HashMap::new() }
    }

    /// The Hash path: one parsed chunk.
    pub fn chunk(&mut self, json: &str) -> Result<Vec<Out>, Error> {
        let r = self.processor.process_json(json, false).map(|_| ());
        self.collect(r)
    }

    pub fn chunks(&mut self, jsons: &[&str]) -> Vec<Out> {
        let mut all = Vec::new();
        for j in jsons {
            all.extend(self.chunk(j).expect("chunk processes"));
        }
        all
    }

    pub fn message(&mut self, json: &str) -> Result<Vec<Out>, Error> {
        let r = self.processor.process_json(json, true).map(|_| ());
        self.collect(r)
    }

    pub fn raw(&mut self, bytes: &[u8]) -> Result<Vec<Out>, Error> {
        let r = self.processor.decode(bytes).map(|_| ());
        self.collect(r)
    }

    pub fn finish(&mut self) -> Result<Vec<Out>, Error> {
        let r = self.processor.finish().map(|_| ());
        let out = self.collect(r);
        self.mirrors.clear();
        out
    }

    /// Items so far plus finish, flattened; panics on errors.
    pub fn stream(&mut self, jsons: &[&str]) -> Vec<Out> {
        let mut all = self.chunks(jsons);
        all.extend(self.finish().expect("finish"));
        all
    }

    pub fn usage(&self) -> UsageReport {
        self.processor.usage()
    }

    pub fn anomaly_kinds(&self) -> Vec<AnomalyKind> {
        self.processor.anomalies().all().iter().map(|a| a.kind).collect()
    }

    fn collect(&mut self, result: Result<(), Error>) -> Result<Vec<Out>, Error> {
        let mut items = Vec::new();
        let p = &self.processor;
        for item in p.output().items() {
            match item {
                Item::Text(t) => items.push(Out::Text(t.to_owned())),
                Item::Progress(id) => {
                    let info = p.calls().get(id).expect("progress names a call");
                    let mirror = Mirror::of(&mut self.mirrors, id, info);
                    mirror.call.partial = true;
                    if let Some(view) = info.view() {
                        for event in view.iter() {
                            mirror.apply(event);
                        }
                    }
                    items.push(Out::Call(mirror.call.clone()));
                }
                Item::Completed(id, params) => {
                    let info = p.calls().get(id).expect("completion names a call");
                    let mirror = Mirror::of(&mut self.mirrors, id, info);
                    mirror.call.id = info.id.clone();
                    mirror.call.params = to_serde(params);
                    mirror.call.partial = false;
                    items.push(Out::Call(mirror.call.clone()));
                }
                Item::Thinking { text, kind: Thinking::Chat } => items.push(Out::Thinking(text.to_owned())),
                Item::Thinking { kind, .. } => panic!("the chat processor returned a {kind:?} thinking item"),
            }
        }
        result.map(|()| items)
    }
}

impl Mirror {
    /// The mirror of call `id`, made with empty params on its first item.
    fn of<'m>(
        mirrors: &'m mut HashMap<CallId, Mirror>,
        id: CallId,
        info: &openai_stream::calls::Call,
    ) -> &'m mut Mirror {
        mirrors.entry(id).or_insert_with(|| Mirror {
            call: Call { id: info.id.clone(), name: info.name.clone(), params: json!({}), partial: false },
            stack: Vec::new(),
        })
    }

    fn container(&mut self) -> &mut Value {
        let mut v = &mut self.call.params;
        for slot in &self.stack {
            v = match slot {
                Slot::Key(k) => v.get_mut(k.as_str()).expect("open key exists"),
                Slot::Index(i) => v.get_mut(*i).expect("open index exists"),
            };
        }
        v
    }

    fn insert(&mut self, key: Option<&str>, value: Value) -> Slot {
        let c = self.container();
        match (c, key) {
            (Value::Object(map), Some(k)) => {
                map.insert(k.to_owned(), value);
                Slot::Key(k.to_owned())
            }
            (Value::Array(items), None) => {
                items.push(value);
                Slot::Index(items.len() - 1)
            }
            (other, key) => panic!("view event with key {key:?} into {other}"),
        }
    }

    fn apply(&mut self, event: ViewEvent) {
        match event {
            ViewEvent::Open { key, kind } => {
                let value = match kind {
                    ContainerKind::Object => json!({}),
                    ContainerKind::Array => json!([]),
                    ContainerKind::String => json!(""),
                };
                let slot = self.insert(key, value);
                self.stack.push(slot);
            }
            ViewEvent::Append(text) => match self.container() {
                Value::String(s) => s.push_str(text),
                other => panic!("append into {other}"),
            },
            ViewEvent::Scalar { key, value } => {
                self.insert(key, to_serde(value));
            }
            ViewEvent::Close => {
                self.stack.pop().expect("close matches an open");
            }
        }
    }
}

/// JsonValue to serde_json (last duplicate key wins).
pub fn to_serde(v: &JsonValue) -> Value {
    match v {
        JsonValue::Null => Value::Null,
        JsonValue::Bool(b) => Value::Bool(*b),
        JsonValue::Number(n) => serde_json::from_str(n.as_str()).expect("numbers are valid JSON"),
        JsonValue::String(s) => Value::String(s.clone()),
        JsonValue::Array(items) => Value::Array(items.iter().map(to_serde).collect()),
        JsonValue::Object(pairs) => {
            let mut map = Map::new();
            for (k, v) in pairs {
                map.insert(k.clone(), to_serde(v));
            }
            Value::Object(map)
        }
    }
}

/// The ids of the calls among `items`, in order.
pub fn ids(items: &[Out]) -> Vec<String> {
    items.iter().filter_map(Out::call).map(|c| c.id.clone()).collect()
}

/// The final (non-partial) calls, in order: each call completes once (two
/// calls may share an id, rule 14).
pub fn final_calls(items: &[Out]) -> Vec<Call> {
    items.iter().filter_map(Out::call).filter(|c| !c.partial).cloned().collect()
}

pub fn texts(items: &[Out]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match i {
            Out::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// A delta chunk with the given tool_calls JSON array (and finish_reason).
pub fn tool_chunk(tool_calls: &str, finish: Option<&str>) -> String {
    let finish = finish.map_or("null".to_owned(), |f| format!("{f:?}"));
    format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"tool_calls":{tool_calls}}},"finish_reason":{finish}}}]}}"#
    )
}

/// A chunk holding one call's header: its index, id and name, no arguments.
pub fn header_chunk(index: u32, id: &str, name: &str) -> String {
    tool_chunk(
        &format!(
            r#"[{{"index":{index},"id":"{id}","type":"function","function":{{"name":"{name}","arguments":""}}}}]"#
        ),
        None,
    )
}

/// A chunk holding one fragment of arguments for the call at `index`.
pub fn fragment_chunk(index: u32, arguments: &str) -> String {
    let arguments = serde_json::to_string(arguments).expect("string serializes");
    tool_chunk(&format!(r#"[{{"index":{index},"function":{{"arguments":{arguments}}}}}]"#), None)
}

pub fn text_chunk(text: &str) -> String {
    format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":{}}},"finish_reason":null}}]}}"#,
        serde_json::to_string(text).expect("string serializes")
    )
}

pub fn finish_chunk(reason: &str) -> String {
    format!(r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":{reason:?}}}]}}"#)
}

/// SSE bytes for a list of JSON events.
pub fn sse(events: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(e.as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}
