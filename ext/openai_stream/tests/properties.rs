//! Property tests of the core invariants: whatever the server's shape and
//! however the bytes are cut, every call comes out once, with the parameters
//! a non-streamed response of the same calls gives.

mod common;

use common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
enum Shape {
    /// OpenAI: header with "", fragments by index, finish chunk, usage chunk.
    Reference,
    /// Mistral/Groq: every call complete in one delta with finish_reason.
    AllInOne,
    /// Ollama 0.20: each call complete at index 0, finish later.
    ReusedIndex,
    /// Aggregators: all headers first, then fragments interleaved.
    Interleaved,
    /// Gemini: no index, ids on every delta.
    IdsOnly,
    /// LiteLLM/vLLM: id and index repeated on every delta, name repeated too.
    Repeated,
    /// TGI: arguments as an object.
    ObjectArguments,
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Reference),
        Just(Shape::AllInOne),
        Just(Shape::ReusedIndex),
        Just(Shape::Interleaved),
        Just(Shape::IdsOnly),
        Just(Shape::Repeated),
        Just(Shape::ObjectArguments),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-zé😀\"\\\\ \n{}:,]{0,12}".prop_map(Value::String),
        Just(Value::Null),
    ]
}

fn params() -> impl Strategy<Value = Value> {
    let value = leaf().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z_]{1,6}", value, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

#[derive(Debug, Clone)]
struct Spec {
    text: Vec<String>,
    calls: Vec<(String, Value)>,
    shape: Shape,
    /// Cut points (as fractions) for each call's arguments text.
    cuts: Vec<Vec<u8>>,
    /// Which call's fragment comes next, for interleaved shapes.
    schedule: Vec<u8>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec("[a-z \n]{1,8}", 0..3),
        prop::collection::vec(("[a-z_]{1,8}", params()), 0..4),
        shape(),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 4),
        prop::collection::vec(any::<u8>(), 1..16),
    )
        .prop_map(|(text, calls, shape, cuts, schedule)| Spec { text, calls, shape, cuts, schedule })
}

/// Splits `s` at char boundaries chosen from `cuts`.
fn fragments(s: &str, cuts: &[u8]) -> Vec<String> {
    let mut points: Vec<usize> = cuts.iter().map(|c| (*c as usize * s.len()) / 256).collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for mut p in points {
        while p < s.len() && !s.is_char_boundary(p) {
            p += 1;
        }
        if p > start && p < s.len() {
            out.push(s[start..p].to_owned());
            start = p;
        }
    }
    out.push(s[start..].to_owned());
    out
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
}

fn id(i: usize) -> String {
    format!("call_{i}")
}

/// The stream of chunks for a spec.
fn render(spec: &Spec) -> Vec<String> {
    let mut chunks: Vec<String> = spec.text.iter().map(|t| chunk(json!({"content": t}), None)).collect();
    let args: Vec<String> = spec.calls.iter().map(|(_, p)| p.to_string()).collect();
    let frags: Vec<Vec<String>> =
        args.iter().enumerate().map(|(i, a)| fragments(a, &spec.cuts[i % spec.cuts.len()])).collect();
    let header = |i: usize, arguments: Value| json!({"index": i, "id": id(i), "type": "function", "function": {"name": spec.calls[i].0, "arguments": arguments}});
    match spec.shape {
        Shape::Reference => {
            for (i, f) in frags.iter().enumerate() {
                chunks.push(chunk(json!({"tool_calls": [header(i, json!(""))]}), None));
                for piece in f {
                    chunks.push(chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                        None,
                    ));
                }
            }
            chunks.push(chunk(json!({}), Some("tool_calls")));
            chunks.push(
                json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}).to_string(),
            );
        }
        Shape::AllInOne => {
            let calls: Vec<Value> = (0..args.len()).map(|i| header(i, json!(args[i]))).collect();
            chunks.push(chunk(json!({"tool_calls": calls}), Some("tool_calls")));
        }
        Shape::ReusedIndex => {
            for (i, a) in args.iter().enumerate() {
                let mut h = header(i, json!(a));
                h["index"] = json!(0);
                chunks.push(chunk(json!({"tool_calls": [h]}), Some("")));
            }
            chunks.push(chunk(json!({}), Some("stop")));
        }
        Shape::Interleaved => {
            let headers: Vec<Value> = (0..args.len()).map(|i| header(i, json!(""))).collect();
            if !headers.is_empty() {
                chunks.push(chunk(json!({"tool_calls": headers}), None));
            }
            // Any interleaving that keeps each call's own fragments in
            // order: the schedule picks which call goes next.
            let mut next = vec![0usize; frags.len()];
            let mut schedule = spec.schedule.iter().cycle();
            while next.iter().zip(&frags).any(|(n, f)| *n < f.len()) {
                let pending: Vec<usize> = (0..frags.len()).filter(|&i| next[i] < frags[i].len()).collect();
                let pick = pending[*schedule.next().unwrap_or(&0) as usize % pending.len()];
                let piece = &frags[pick][next[pick]];
                next[pick] += 1;
                chunks.push(chunk(
                    json!({"tool_calls": [{"index": pick, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
            chunks.push(chunk(json!({}), Some("tool_calls")));
        }
        Shape::IdsOnly => {
            for (i, f) in frags.iter().enumerate() {
                for (n, piece) in f.iter().enumerate() {
                    let mut function = json!({"arguments": piece});
                    if n == 0 {
                        function["name"] = json!(spec.calls[i].0);
                    }
                    chunks.push(chunk(json!({"tool_calls": [{"id": id(i), "function": function}]}), None));
                }
            }
            chunks.push(chunk(json!({}), Some("stop")));
        }
        Shape::Repeated => {
            for (i, f) in frags.iter().enumerate() {
                for piece in f {
                    chunks.push(chunk(json!({"tool_calls": [header(i, json!(piece))]}), None));
                }
            }
            chunks.push(chunk(json!({}), Some("tool_calls")));
        }
        Shape::ObjectArguments => {
            for (i, (_, p)) in spec.calls.iter().enumerate() {
                chunks.push(chunk(json!({"tool_calls": [header(i, p.clone())]}), None));
            }
            chunks.push(chunk(json!({}), Some("tool_calls")));
        }
    }
    chunks
}

/// The non-streamed response of the same calls.
fn message(spec: &Spec) -> String {
    let calls: Vec<Value> = spec
        .calls
        .iter()
        .enumerate()
        .map(|(i, (name, p))| json!({"id": id(i), "type": "function", "function": {"name": name, "arguments": p.to_string()}}))
        .collect();
    json!({"choices": [{"index": 0, "message": {"content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}]})
        .to_string()
}

fn summary(calls: &[Call]) -> Vec<(String, String, Value)> {
    calls.iter().map(|c| (c.id.clone(), c.name.clone(), c.params.clone())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn streamed_equals_non_streamed_in_every_shape(spec in spec(), partial in any::<bool>()) {
        let chunks = render(&spec);
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let mut h = Harness::new(partial);
        let streamed = h.stream(&refs);
        let control = Harness::new(false).message(&message(&spec)).unwrap();
        prop_assert_eq!(summary(&final_calls(&streamed)), summary(&final_calls(&control)));
        // Each call is completed exactly once.
        let finals = streamed.iter().filter_map(Out::call).filter(|c| !c.partial).count();
        prop_assert_eq!(finals, spec.calls.len());
        prop_assert_eq!(texts(&streamed).concat(), spec.text.concat());
        // Partial views are always consistent with the final value.
        for c in streamed.iter().filter_map(Out::call).filter(|c| c.partial) {
            let last = final_calls(&streamed).into_iter().find(|f| f.id == c.id).unwrap();
            prop_assert!(consistent(&c.params, &last.params), "{} not a prefix view of {}", c.params, last.params);
        }
    }

    #[test]
    fn any_split_of_the_raw_bytes_gives_the_same_result(spec in spec(), partial in any::<bool>(), cuts in prop::collection::vec(any::<u16>(), 0..12)) {
        let chunks = render(&spec);
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let bytes = sse(&refs);
        let decode = |reads: Vec<&[u8]>| {
            let mut h = Harness::new(partial);
            let mut items = Vec::new();
            for r in reads {
                items.extend(h.raw(r).unwrap());
            }
            items.extend(h.finish().unwrap());
            (ordered(final_calls(&items), partial), texts(&items).concat(), h.usage())
        };
        let whole = decode(vec![&bytes]);
        let mut points: Vec<usize> = cuts.iter().map(|c| *c as usize % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut reads = Vec::new();
        let mut start = 0;
        for p in points {
            reads.push(&bytes[start..p]);
            start = p;
        }
        reads.push(&bytes[start..]);
        prop_assert_eq!(decode(reads), whole.clone());
        prop_assert_eq!(decode(bytes.chunks(1).collect()), whole.clone());
        // And the raw path equals the Hash path.
        let mut h = Harness::new(partial);
        let hashed = h.stream(&refs);
        prop_assert_eq!(summary(&ordered(final_calls(&hashed), partial)), summary(&whole.0));
        prop_assert_eq!(h.usage(), whole.2);
    }
}

/// With partial tool calls a call sits where it first appeared in a read
/// (Discourse keeps the first of repeated ToolCall objects), so the order of
/// calls depends on where reads end; without, it is the order of completion.
fn ordered(mut calls: Vec<Call>, partial: bool) -> Vec<Call> {
    if partial {
        calls.sort_by(|a, b| a.id.cmp(&b.id));
    }
    calls
}

/// A partial view is consistent with the final value: strings are prefixes,
/// arrays are prefixes with the last element possibly in progress, objects
/// hold a subset of the keys, scalars are equal.
fn consistent(view: &Value, last: &Value) -> bool {
    match (view, last) {
        (Value::String(a), Value::String(b)) => b.starts_with(a.as_str()),
        (Value::Array(a), Value::Array(b)) => match a.split_last() {
            None => true,
            Some((last, done)) => {
                done.len() < b.len() && done == &b[..done.len()] && consistent(last, &b[done.len()])
            }
        },
        (Value::Object(a), Value::Object(b)) => {
            a.iter().all(|(k, v)| b.get(k).is_some_and(|w| consistent(v, w)))
        }
        (a, b) => a == b,
    }
}
