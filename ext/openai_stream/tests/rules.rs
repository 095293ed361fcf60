//! The chat rules of docs/stream-shapes.md (1 to 44, 74, 77 to 79 and 81), each test with
//! its own small stream and the rules it checks in its name, through the
//! Hash path (parsed chunks). The raw path, and the SSE framing rules (45 to
//! 56), are covered in `framing.rs` and the equivalence property tests.

mod common;

use common::*;
use openai_stream::anomaly::AnomalyKind;
use openai_stream::calls::CallId;
use openai_stream::chat::Options;
use openai_stream::error::Error;
use serde_json::json;

const MISTRAL: &str = r#"{"id":"cmpl-e5cc70bb28c444948073e77776eb30ef","object":"chat.completion.chunk","created":1702256327,"model":"mistral-large-latest","choices":[{"index":0,"delta":{"content":"","tool_calls":[{"id":"bM0Xl0KSh","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"},"index":0},{"id":"kgOYVL46d","function":{"name":"get_local_time","arguments":"{\"timezone\": \"Europe/Paris\"}"},"index":1}]},"finish_reason":"tool_calls","logprobs":null}],"usage":{"prompt_tokens":172,"total_tokens":195,"completion_tokens":23},"p":"abcdefghijklmnopq"}"#;

#[test]
fn bug_report_two_calls_in_one_chunk_both_come_out() {
    let chunk = tool_chunk(
        r#"[{"index":0,"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\"}"}},
            {"index":1,"id":"call_2","type":"function","function":{"name":"echo","arguments":"{\"text\":\"b\"}"}}]"#,
        Some("tool_calls"),
    );
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[&chunk]);
        let calls = final_calls(&items);
        assert_eq!(ids(&calls.iter().cloned().map(Out::Call).collect::<Vec<_>>()), ["call_1", "call_2"]);
        assert_eq!(calls[0].params, json!({"text": "a"}));
        assert_eq!(calls[1].params, json!({"text": "b"}));
        assert_eq!(calls.len(), 2, "partial={partial}");
    }
}

#[test]
fn rule_1_mistral_parallel_calls_with_usage_and_unknown_fields() {
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[MISTRAL]);
        let calls = final_calls(&items);
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("bM0Xl0KSh", "get_weather"));
        assert_eq!((calls[1].id.as_str(), calls[1].name.as_str()), ("kgOYVL46d", "get_local_time"));
        assert_eq!(calls[0].params, json!({"city": "Paris"}));
        assert_eq!(calls[1].params, json!({"timezone": "Europe/Paris"}));
        assert!(texts(&items).is_empty(), "empty content is no text");
        assert_eq!(h.usage().prompt_tokens, Some(172));
        assert_eq!(h.usage().completion_tokens, Some(23));
        // The calls completed in the chunk itself, not at finish.
        let mut h = Harness::new(partial);
        assert_eq!(final_calls(&h.chunk(MISTRAL).unwrap()).len(), 2);
        assert!(h.finish().unwrap().is_empty());
    }
}

#[test]
fn three_calls_in_one_chunk() {
    let chunk = tool_chunk(
        r#"[{"id":"a","function":{"name":"search","arguments":"{\"q\":\"1\"}"}},
            {"id":"b","function":{"name":"search","arguments":"{\"q\":\"2\"}"}},
            {"id":"c","function":{"name":"search","arguments":"{\"q\":\"3\"}"}}]"#,
        Some("tool_calls"),
    );
    let items = Harness::new(false).stream(&[&chunk]);
    assert_eq!(
        final_calls(&items).iter().map(|c| c.params["q"].clone()).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
}

#[test]
fn reference_shape_fragments_build_one_call() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &header_chunk(0, "call_1", "lookup"),
        &fragment_chunk(0, r#"{""#),
        &fragment_chunk(0, "lo"),
        &fragment_chunk(0, "catio"),
        &fragment_chunk(0, r#"n": "B"#),
        &fragment_chunk(0, r#"erlin"}"#),
        &finish_chunk("tool_calls"),
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
    ]);
    assert_eq!(final_calls(&items).len(), 1);
    assert_eq!(final_calls(&items)[0].params, json!({"location": "Berlin"}));
    assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
}

#[test]
fn rule_2_complete_arguments_on_the_header_are_appended_once() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"x1","function":{"name":"f","arguments":"{\"a\":1}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({"a": 1}));
}

#[test]
fn rule_3_arguments_omitted_or_null_on_the_header() {
    for header in [
        r#"[{"index":0,"id":"x1","function":{"name":"f"}}]"#,
        r#"[{"index":0,"id":"x1","function":{"name":"f","arguments":null}}]"#,
    ] {
        let mut h = Harness::new(false);
        let items = h.stream(&[
            &tool_chunk(header, None),
            &fragment_chunk(0, r#"{"a":"#),
            &fragment_chunk(0, "true}"),
            &finish_chunk("tool_calls"),
        ]);
        assert_eq!(final_calls(&items)[0].params, json!({"a": true}));
    }
    // A tool without parameters: nothing but the header.
    let items = Harness::new(false).stream(&[
        &tool_chunk(r#"[{"index":0,"id":"x1","function":{"name":"now"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({}));
}

#[test]
fn rule_4_arguments_as_an_object() {
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(
                r#"[{"index":0,"id":"t1","function":{"name":"f","arguments":{"q":"x","n":[1,2]}}}]"#,
                None,
            ),
            &finish_chunk("tool_calls"),
        ]);
        assert_eq!(final_calls(&items)[0].params, json!({"q": "x", "n": [1, 2]}));
        if partial {
            let progress: Vec<_> = items.iter().filter_map(Out::call).filter(|c| c.partial).collect();
            assert_eq!(progress.len(), 1);
            assert_eq!(progress[0].params, json!({"q": "x", "n": [1, 2]}));
        }
    }
}

#[test]
fn rule_5_interleaved_fragments_are_keyed_by_index() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(
            r#"[{"index":0,"id":"a","function":{"name":"f","arguments":""}},
                {"index":1,"id":"b","function":{"name":"g","arguments":""}}]"#,
            None,
        ),
        &fragment_chunk(1, r#"{"y":"#),
        &fragment_chunk(0, r#"{"x":"#),
        &fragment_chunk(1, "2}"),
        &fragment_chunk(0, "1}"),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].id.as_str(), &calls[0].params), ("a", &json!({"x": 1})));
    assert_eq!((calls[1].id.as_str(), &calls[1].params), ("b", &json!({"y": 2})));
    // Switching index did not complete anything early.
    let mut h = Harness::new(false);
    h.chunk(&tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]"#, None)).unwrap();
    let out = h
        .chunk(&tool_chunk(r#"[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]"#, None))
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn rule_6_index_missing_matches_by_id_or_continues_the_latest() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"id":"g1","function":{"name":"f","arguments":"{\"a\""}}]"#, None),
        &tool_chunk(r#"[{"id":"g2","function":{"name":"g","arguments":"{\"b\":2}"}}]"#, None),
        &tool_chunk(r#"[{"id":"g1","function":{"arguments":":1}"}}]"#, None),
        &tool_chunk(r#"[{"function":{"arguments":""}}]"#, None),
        &finish_chunk("stop"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(
        calls.iter().map(|c| c.params.clone()).collect::<Vec<_>>(),
        [json!({"a": 1}), json!({"b": 2})]
    );
    let items = Harness::new(false).stream(&[
        &tool_chunk(r#"[{"id":"g1","function":{"name":"f","arguments":"{\"a\""}}]"#, None),
        &tool_chunk(r#"[{"function":{"arguments":":1}"}}]"#, None),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({"a": 1}));
}

#[test]
fn rule_6_an_id_only_header_and_index_only_fragments_are_one_call() {
    for partial in [false, true] {
        // Header with an id and no index, fragment with an index and no id.
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(r#"[{"id":"call_sam","type":"function","function":{"name":"search","arguments":"{\"query\":\""}}]"#, None),
            &fragment_chunk(0, r#"sam"}"#),
            &fragment_chunk(0, " "),
            &finish_chunk("tool_calls"),
        ]);
        let calls = final_calls(&items);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].id.as_str(), &calls[0].params), ("call_sam", &json!({"query": "sam"})));
        assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
        // The roles swapped: an indexed header, id-only fragments.
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(r#"[{"index":0,"id":"call_sam","type":"function","function":{"name":"search","arguments":"{\"query\":\""}}]"#, None),
            &tool_chunk(r#"[{"id":"call_sam","function":{"arguments":"sam\"}"}}]"#, None),
            &finish_chunk("tool_calls"),
        ]);
        let calls = final_calls(&items);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].id.as_str(), &calls[0].params), ("call_sam", &json!({"query": "sam"})));
        assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
    }
}

#[test]
fn rule_6_nameless_fragments_at_a_shifted_index_continue_the_latest_call() {
    // Nebius, Cerebras: each call's fragments at its header's index + 1.
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &header_chunk(0, "n1", "f"),
            &fragment_chunk(1, r#"{"a":"#),
            &fragment_chunk(1, "1}"),
            &header_chunk(1, "n2", "g"),
            &fragment_chunk(2, r#"{"b":"#),
            &fragment_chunk(2, "2}"),
            &finish_chunk("tool_calls"),
        ]);
        let calls = final_calls(&items);
        let got: Vec<_> = calls.iter().map(|c| (c.id.as_str(), c.params.clone())).collect();
        assert_eq!(got, [("n1", json!({"a": 1})), ("n2", json!({"b": 2}))], "partial={partial}");
        assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
    }
    // Once the latest call is complete there is nothing to continue.
    let mut h = Harness::new(false);
    h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"n1","function":{"name":"f","arguments":"{}"}}]"#, None),
        &finish_chunk("tool_calls"),
        &fragment_chunk(1, r#"{"late":1}"#),
    ]);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::OrphanFragment]);
    // Vertex Gemini: fragments carrying an id go to that call, whatever
    // their index, also when the indexes cross.
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(r#"[{"index":1,"id":"A","function":{"name":"f","arguments":""}}]"#, None),
            &tool_chunk(r#"[{"index":0,"id":"B","function":{"name":"g","arguments":""}}]"#, None),
            &tool_chunk(r#"[{"index":0,"id":"A","function":{"arguments":"{\"a\":"}}]"#, None),
            &tool_chunk(r#"[{"index":1,"id":"B","function":{"arguments":"{\"b\":"}}]"#, None),
            &tool_chunk(r#"[{"index":0,"id":"A","function":{"arguments":"1}"}}]"#, None),
            &tool_chunk(r#"[{"index":1,"id":"B","function":{"arguments":"2}"}}]"#, None),
            &finish_chunk("tool_calls"),
        ]);
        let calls = final_calls(&items);
        let got: Vec<_> = calls.iter().map(|c| (c.id.as_str(), c.params.clone())).collect();
        assert_eq!(got, [("A", json!({"a": 1})), ("B", json!({"b": 2}))], "partial={partial}");
        assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
    }
}

#[test]
fn rule_7_a_reused_index_with_a_new_id_and_name_starts_a_new_call() {
    let mut h = Harness::new(false);
    let first = h
        .chunk(&tool_chunk(
            r#"[{"index":0,"id":"o1","function":{"name":"f","arguments":"{\"a\":1}"}}]"#,
            None,
        ))
        .unwrap();
    assert!(first.is_empty());
    let second = h
        .chunk(&tool_chunk(
            r#"[{"index":0,"id":"o2","function":{"name":"g","arguments":"{\"b\":2}"}}]"#,
            None,
        ))
        .unwrap();
    // The first call is complete once its index is taken.
    assert_eq!(ids(&second), ["o1"]);
    let rest = h.stream(&[&finish_chunk("tool_calls")]);
    assert_eq!(ids(&rest), ["o2"]);
    assert_eq!(final_calls(&rest)[0].params, json!({"b": 2}));
}

#[test]
fn rule_8_a_changed_id_on_an_arguments_only_delta_is_a_continuation() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"first","function":{"name":"f","arguments":"{\"a\":"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":"other","function":{"arguments":"1}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].id.as_str(), &calls[0].params), ("first", &json!({"a": 1})));
    assert!(h.anomaly_kinds().contains(&AnomalyKind::IdChanged));
}

/// A delta that carries an id and nothing else before its call's header
/// (Discourse's compliance mocks open with `{"id":"tool_0","function":{}}`)
/// drops nothing: no `orphan_fragment`, and the call comes out whole.
#[test]
fn an_empty_delta_before_the_header_is_not_an_orphan() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"id":"tool_0","function":{}}]"#, None),
        &tool_chunk(r#"[{"id":"tool_0","function":{"name":"get_weather","arguments":""}}]"#, None),
        &tool_chunk(r#"[{"id":"tool_0","function":{"arguments":"{\"city\":\"Oslo\"}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({"city": "Oslo"}));
    assert_eq!(h.anomaly_kinds(), Vec::<AnomalyKind>::new());
}

#[test]
fn rule_8_an_unknown_id_after_complete_arguments_belongs_to_no_call() {
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(r#"[{"index":0,"id":"call_sam","type":"function","function":{"name":"search","arguments":"{\"query\":\"sam\"}"}}]"#, None),
            &tool_chunk(r#"[{"index":0,"id":"call_dan","function":{"arguments":"{\"query\":\"dan\"}"}}]"#, None),
            &finish_chunk("tool_calls"),
        ]);
        let calls = final_calls(&items);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].id.as_str(), &calls[0].params), ("call_sam", &json!({"query": "sam"})));
        let all = h.processor.anomalies().all();
        assert_eq!(all.len(), 1, "{all:?}");
        let a = &all[0];
        assert_eq!(a.kind, AnomalyKind::OrphanFragment);
        assert_eq!((a.call_id.as_deref(), a.index), (Some("call_dan"), Some(0)));
        assert_eq!(a.excerpt.as_deref(), Some(r#"{"query":"dan"}"#));
        assert!(a.message.contains("call_sam"), "{}", a.message);
    }
    // The same without an index: the most recent call is not continued either.
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(
            r#"[{"id":"call_sam","function":{"name":"search","arguments":"{\"query\":\"sam\"}"}}]"#,
            None,
        ),
        &tool_chunk(r#"[{"id":"call_dan","function":{"arguments":"{\"query\":\"dan\"}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({"query": "sam"}));
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::OrphanFragment]);
    // While the arguments are incomplete (a closed inner object or a brace
    // inside a string is not the end), an unknown id is a continuation.
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(
            r#"[{"index":0,"id":"k1","function":{"name":"f","arguments":"{\"o\":{\"s\":\"}\"}"}}]"#,
            None,
        ),
        &tool_chunk(r#"[{"index":0,"id":"k2","function":{"arguments":",\"n\":1"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":"k3","function":{"arguments":"}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!((calls[0].id.as_str(), &calls[0].params), ("k1", &json!({"o": {"s": "}"}, "n": 1})));
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::IdChanged]);
}

#[test]
fn rule_8_an_explicit_matching_id_wins_over_a_conflicting_index() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(
            r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}},
                {"index":1,"id":"b","function":{"name":"g","arguments":"{\"y\":"}}]"#,
            None,
        ),
        &tool_chunk(r#"[{"index":1,"id":"a","function":{"arguments":"1}"}}]"#, None),
        &tool_chunk(r#"[{"index":1,"id":"b","function":{"arguments":"2}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(calls[0].params, json!({"x": 1}));
    assert_eq!(calls[1].params, json!({"y": 2}));
}

#[test]
fn rule_9_ids_repeated_empty_null_or_integer() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"0","function":{"name":"f","arguments":"{\"a\""}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":"0","function":{"arguments":":"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":"","function":{"arguments":"1"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":null,"function":{"arguments":"}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].id.as_str(), &calls[0].params), ("0", &json!({"a": 1})));
    // Integer ids (Poolside) become strings.
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":7,"function":{"name":"f","arguments":"{}"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":7,"function":{"arguments":""}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(ids(&items), ["7"]);
    let converted = h.anomaly_kinds().iter().filter(|k| **k == AnomalyKind::ConvertedField).count();
    assert_eq!(converted, 1, "reported once per field, not per delta");
}

#[test]
fn rule_10_names_repeated_in_full_or_empty_on_continuations() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"c","function":{"name":"get_weather","arguments":"{\"a\""}}]"#, None),
        &tool_chunk(r#"[{"index":0,"function":{"name":"get_weather","arguments":":"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"function":{"name":"","arguments":"1}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].params, json!({"a": 1}));
}

#[test]
fn rule_11_id_nested_in_function_or_generated() {
    let items = Harness::new(false).stream(&[
        &tool_chunk(r#"[{"index":0,"function":{"id":"nested","name":"f","arguments":"{}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(ids(&items), ["nested"]);
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"function":{"name":"f","arguments":"{}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    let calls = final_calls(&items);
    assert_eq!(calls.len(), 1);
    assert!(calls[0].id.starts_with("call_das_"), "{}", calls[0].id);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::GeneratedId]);
}

#[test]
fn rule_12_type_is_ignored() {
    let items = Harness::new(false).stream(&[
        &header_chunk(0, "a", "f"),
        &tool_chunk(r#"[{"index":0,"type":"","function":{"arguments":"{\"a\":1}"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"type":"function","function":{"arguments":""}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({"a": 1}));
}

#[test]
fn rule_13_sparse_indexes_come_out_in_order_of_first_appearance() {
    let items = Harness::new(false).stream(&[
        &tool_chunk(r#"[{"index":3,"id":"late","function":{"name":"f","arguments":"{}"}}]"#, None),
        &tool_chunk(r#"[{"index":1,"id":"early","function":{"name":"g","arguments":"{}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(ids(&items), ["late", "early"]);
}

#[test]
fn rule_14_headers_at_two_indexes_sharing_an_id_are_two_calls() {
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(r#"[{"index":0,"id":"same","function":{"name":"f","arguments":"{\"a\":"}}]"#, None),
            &tool_chunk(r#"[{"index":1,"id":"same","function":{"name":"g","arguments":"{\"b\":"}}]"#, None),
            // By index: each call its own fragments.
            &fragment_chunk(0, "1}"),
            // By id: the most recent call with that id.
            &tool_chunk(r#"[{"index":0,"id":"same","function":{"arguments":"2}"}}]"#, None),
            &finish_chunk("tool_calls"),
        ]);
        let calls = final_calls(&items);
        let got: Vec<_> = calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.params.clone())).collect();
        assert_eq!(
            got,
            [("same", "f", json!({"a": 1})), ("same", "g", json!({"b": 2}))],
            "partial={partial}"
        );
        let dup: Vec<_> =
            h.processor.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::DuplicateId).collect();
        assert_eq!(dup.len(), 1, "{:?}", h.processor.anomalies().all());
        assert_eq!(
            (dup[0].call_id.as_deref(), dup[0].call_name.as_deref(), dup[0].index),
            (Some("same"), Some("g"), Some(1))
        );
    }
    // A header repeated at its own index, and an id-carrying fragment at
    // another index, still continue the call.
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"one","function":{"name":"f","arguments":"{\"a\":"}}]"#, None),
        &tool_chunk(r#"[{"index":0,"id":"one","function":{"name":"f","arguments":"1"}}]"#, None),
        &tool_chunk(r#"[{"index":3,"id":"one","function":{"arguments":"}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items).iter().map(|c| c.params.clone()).collect::<Vec<_>>(), [json!({"a": 1})]);
    assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
}

#[test]
fn rule_15_completion_only_on_a_non_empty_finish_reason() {
    for noise in [r#""finish_reason":null"#, r#""finish_reason":"""#, ""] {
        let mut h = Harness::new(false);
        h.chunk(&tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]"#, None))
            .unwrap();
        let sep = if noise.is_empty() { "" } else { "," };
        let chunk = format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"x"}}{sep}{noise}}}]}}"#);
        let out = h.chunk(&chunk).unwrap();
        assert_eq!(out, [Out::Text("x".into())], "{noise}");
    }
    // "stop" although tools were called.
    let mut h = Harness::new(false);
    h.chunk(&tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]"#, None)).unwrap();
    assert_eq!(ids(&h.chunk(&finish_chunk("stop")).unwrap()), ["a"]);
}

#[test]
fn rule_16_an_empty_tool_calls_list_ends_nothing() {
    let mut h = Harness::new(false);
    h.chunk(&tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"a\":"}}]"#, None))
        .unwrap();
    let out = h.chunk(r#"{"choices":[{"index":0,"delta":{"content":"\n","tool_calls":[]}}]}"#).unwrap();
    assert_eq!(out, [Out::Text("\n".into())]);
    let rest = h.stream(&[&fragment_chunk(0, "2}"), &finish_chunk("tool_calls")]);
    assert_eq!(final_calls(&rest)[0].params, json!({"a": 2}));
}

#[test]
fn rule_17_chunks_after_finish_reason_keep_being_read() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]"#, None),
        &finish_chunk("tool_calls"),
        r#"{"choices":[{"index":0,"content_filter_results":{"hate":{"filtered":false}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"late"}}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
    ]);
    assert_eq!(ids(&items), ["a"]);
    assert_eq!(texts(&items), ["late"]);
    assert_eq!(h.usage().completion_tokens, Some(4));
}

#[test]
fn rules_18_19_finish_completes_every_open_call_in_order() {
    let mut h = Harness::new(false);
    h.chunks(&[
        &tool_chunk(r#"[{"index":5,"id":"x","function":{"name":"f","arguments":"{\"n\":1}"}}]"#, None),
        &tool_chunk(r#"[{"index":2,"id":"y","function":{"name":"f","arguments":"{\"n\":2}"}}]"#, None),
        &tool_chunk(r#"[{"index":9,"id":"z","function":{"name":"f","arguments":"{\"n\":3}"}}]"#, None),
    ]);
    let out = h.finish().unwrap();
    assert_eq!(ids(&out), ["x", "y", "z"]);
    assert!(h.anomaly_kinds().contains(&AnomalyKind::Truncated));
}

#[test]
fn rule_21_a_valid_prefix_does_not_complete_a_call() {
    let mut h = Harness::new(false);
    let out = h
        .chunk(&tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"a\":1}"}}]"#, None))
        .unwrap();
    assert!(out.is_empty());
    let out = h.chunk(&fragment_chunk(0, " ")).unwrap();
    assert!(out.is_empty());
}

#[test]
fn rule_20_empty_arguments_mean_no_parameters() {
    let items = Harness::new(false).stream(&[
        &tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"now","arguments":""}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items)[0].params, json!({}));
}

#[test]
fn rule_22_broken_arguments_are_repaired_and_reported() {
    for (args, expected) in [
        (r#"\"city\": \"Paris\"}"#, json!({"city": "Paris"})),
        (r#"{\"city\": \"Paris\""#, json!({"city": "Paris"})),
        (r#"{\"a\": {\"b\": [1"#, json!({"a": {"b": [1]}})),
    ] {
        let mut h = Harness::new(false);
        let items = h.stream(&[
            &tool_chunk(
                &format!(r#"[{{"index":0,"id":"a","function":{{"name":"f","arguments":"{args}"}}}}]"#),
                None,
            ),
            &finish_chunk("tool_calls"),
        ]);
        assert_eq!(final_calls(&items)[0].params, expected, "{args}");
        assert_eq!(h.anomaly_kinds(), [AnomalyKind::RepairedArguments]);
    }
}

#[test]
fn rule_22_unrepairable_arguments_raise_naming_the_tool_and_keep_the_rest() {
    let mut h = Harness::new(false);
    h.chunk(&tool_chunk(
        r#"[{"index":0,"id":"good","function":{"name":"ok","arguments":"{}"}},
            {"index":1,"id":"bad","function":{"name":"broken","arguments":"{\"a\": tru"}}]"#,
        None,
    ))
    .unwrap();
    let err = h.chunk(&finish_chunk("tool_calls")).unwrap_err();
    match &err {
        Error::Arguments { id, name, raw, .. } => {
            assert_eq!((id.as_str(), name.as_str(), raw.as_str()), ("bad", "broken", r#"{"a": tru"#));
        }
        other => panic!("expected an arguments error, got {other:?}"),
    }
    // The good call completed in the same chunk is still in the output.
    let good: Vec<_> = h.processor.output().items().collect();
    assert_eq!(good.len(), 1);
    assert!(h.anomaly_kinds().contains(&AnomalyKind::InvalidArguments));
    assert!(h.finish().unwrap().is_empty());
}

#[test]
fn rules_25_27_28_content_shapes() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\n"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hmm"}]},{"type":"text","text":"3"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"secret","reasoning":"more"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":" ok"}}]}"#,
    ]);
    assert_eq!(texts(&items), ["\n", "3", " ok"]);
    assert!(h.anomaly_kinds().is_empty());
}

#[test]
fn rule_25_mistral_thinking_parts_come_out_as_thinking_when_asked_for() {
    let part = |thinking: &str, text: &str| {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":[{{"type":"thinking","thinking":{thinking}}},{{"type":"text","text":"{text}"}}]}}}}]}}"#
        )
    };
    let mut h = Harness::with(Options { output_thinking: true, ..Options::default() });
    let items = h.stream(&[
        &part(r#"[{"type":"text","text":"Let me "},{"type":"text","text":"add."}]"#, ""),
        &part(r#"[{"type":"text","text":" 1+2"}]"#, ""),
        &part("[]", "3"),
        // Text before a thinking part in one delta stays before it.
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":" ok"},{"type":"thinking","thinking":"done"}]}}]}"#,
        &finish_chunk("stop"),
    ]);
    assert_eq!(kinds(&items), ["thinking", "text", "text", "thinking"]);
    assert_eq!(thinkings(&items), ["Let me add. 1+2", "done"]);
    assert_eq!(texts(&items), ["3", " ok"]);
    assert!(h.anomaly_kinds().is_empty());
    // Not carried back: Mistral's next request does not need it.
    assert!(!h.processor.round_trip().carries());

    // What is not text in it is reported, the rest kept.
    let mut h = Harness::with(Options { output_thinking: true, ..Options::default() });
    let items = h.stream(&[
        &part(r#"[{"type":"image","url":"x"},{"type":"text","text":"why"}]"#, "a"),
        &part("7", "b"),
    ]);
    assert_eq!(thinkings(&items), ["why"]);
    assert_eq!(texts(&items), ["a", "b"]);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::IgnoredContentPart, AnomalyKind::IgnoredContentPart]);
}

#[test]
fn rule_26_content_and_tool_calls_in_one_delta_give_the_text_first() {
    let items = Harness::new(false).stream(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Let me check.","tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
    ]);
    assert_eq!(items[0], Out::Text("Let me check.".into()));
    assert_eq!(ids(&items), ["a"]);
}

#[test]
fn rules_34_35_usage_from_any_chunk_and_groq() {
    let mut h = Harness::new(false);
    h.stream(&[
        r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"usage":{"prompt_tokens":11,"completion_tokens":2}}}"#,
        r#"{"choices":[],"usage":null}"#,
    ]);
    assert_eq!((h.usage().prompt_tokens, h.usage().completion_tokens), (Some(11), Some(2)));
}

#[test]
fn rules_40_41_42_in_band_errors_raise_with_the_providers_message() {
    let cases = [
        (r#"{"error":{"message":"Rate limit reached","code":429}}"#, "Rate limit reached"),
        (
            r#"{"object":"error","message":"context too long","type":"BadRequestError","code":400}"#,
            "context too long",
        ),
        (
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error","error":{"message":"upstream died"}}]}"#,
            "upstream died",
        ),
    ];
    for (chunk, message) in cases {
        let mut h = Harness::new(false);
        assert_eq!(h.chunk(&text_chunk("before")).unwrap(), [Out::Text("before".into())]);
        match h.chunk(chunk).unwrap_err() {
            Error::Provider { message: m, .. } => assert_eq!(m, message),
            other => panic!("expected a provider error, got {other:?}"),
        }
    }
}

#[test]
fn non_streamed_message_gives_every_call() {
    let mut h = Harness::new(false);
    let items = h
        .message(
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\"}"}},
                {"id":"call_2","type":"function","function":{"name":"echo","arguments":"{\"text\":\"b\"}"}}]},
                "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":6}}"#,
        )
        .unwrap();
    assert_eq!(ids(&items), ["call_1", "call_2"]);
    assert_eq!(final_calls(&items)[1].params, json!({"text": "b"}));
    assert_eq!(h.usage().prompt_tokens, Some(5));
}

#[test]
fn rule_31_wrong_types_never_fail_the_chunk() {
    let mut h = Harness::new(false);
    let items = h.stream(&[
        r#"{"choices":[{"index":0,"delta":{"content":5,"tool_calls":[7,{"index":"0","id":"a","function":{"name":"f","arguments":5}}]}}]}"#,
        &tool_chunk(r#"[{"index":"0","function":{"arguments":"{}"}}]"#, None),
        r#"{"choices":"nope","usage":[1]}"#,
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(ids(&items), ["a"]);
    let kinds = h.anomaly_kinds();
    assert!(kinds.contains(&AnomalyKind::IgnoredField));
    assert!(kinds.contains(&AnomalyKind::ConvertedField));
}

#[test]
fn rule_6_an_orphan_fragment_is_reported_with_its_text() {
    let mut h = Harness::new(false);
    h.stream(&[&fragment_chunk(4, r#"{"lost":1}"#)]);
    let a = &h.processor.anomalies().all()[0];
    assert_eq!(a.kind, AnomalyKind::OrphanFragment);
    assert_eq!(a.excerpt.as_deref(), Some(r#"{"lost":1}"#));
}

/// Arguments: a call that ends with empty arguments while fragments that
/// matched no call were dropped during its life is an error naming them,
/// not `{}` (rule 23). Calls whose arguments parse are unaffected, and a
/// fragment dropped before a call started is not that call's.
#[test]
fn rule_23_arguments_never_empty_after_fragments_were_dropped_while_the_call_was_open() {
    // call_a's arguments are complete, so a fragment with an unknown id at
    // its index belongs to no call (rule 8) and is dropped while call_w is
    // open with empty arguments.
    let first = tool_chunk(
        r#"[{"index":0,"id":"call_a","function":{"name":"lookup","arguments":"{\"a\":1}"}}]"#,
        None,
    );
    let header =
        tool_chunk(r#"[{"index":1,"id":"call_w","function":{"name":"weather","arguments":""}}]"#, None);
    let orphan =
        tool_chunk(r#"[{"index":0,"id":"zz","function":{"arguments":"{\"city\":\"Oslo\"}"}}]"#, None);
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        h.chunk(&first).unwrap();
        h.chunk(&header).unwrap();
        h.chunk(&orphan).unwrap();
        match h.chunk(&finish_chunk("tool_calls")) {
            Err(Error::Arguments { id, message, .. }) => {
                assert_eq!(id, "call_w");
                assert!(
                    message.contains("empty") && message.contains(r#"dropped: {"city":"Oslo"}"#),
                    "{message}"
                );
            }
            other => panic!("expected an arguments error, got {other:?}"),
        }
        let kinds = h.anomaly_kinds();
        assert_eq!(kinds, [AnomalyKind::OrphanFragment, AnomalyKind::InvalidArguments], "partial={partial}");
    }
    // Arguments that parse: unaffected (call_a's too, though it was open).
    let args = fragment_chunk(1, "{}");
    let items = Harness::new(false).stream(&[&first, &header, &orphan, &args, &finish_chunk("tool_calls")]);
    let calls = final_calls(&items);
    assert_eq!((calls[0].params.clone(), calls[1].params.clone()), (json!({"a": 1}), json!({})));
    // Dropped before the call started: not during its life.
    let items = Harness::new(false).stream(&[&first, &orphan, &header, &finish_chunk("tool_calls")]);
    assert_eq!(final_calls(&items)[1].params, json!({}));
}

#[test]
fn rule_24_partial_progress_only_when_the_visible_parameters_change() {
    let mut h = Harness::new(true);
    let mut visible = Vec::new();
    for piece in [r#"{"s": "abc"#, "\"", r#", "l": ["x"#, "\"", "]", " ", r#", "n": 1"#, "2", "}"] {
        let chunk = tool_chunk(
            &format!(
                r#"[{{"index":0,"id":"v","function":{{"name":"f","arguments":{}}}}}]"#,
                serde_json::to_string(piece).unwrap()
            ),
            None,
        );
        let out = h.chunk(&chunk).unwrap();
        visible.push(out.first().and_then(Out::call).map(|c| c.params.clone()));
    }
    assert_eq!(
        visible,
        [
            Some(json!({"s": "abc"})),
            None,
            Some(json!({"s": "abc", "l": ["x"]})),
            None,
            None,
            None,
            None,
            None,
            Some(json!({"s": "abc", "l": ["x"], "n": 12})),
        ]
    );
}

#[test]
fn rule_16_an_empty_tool_calls_list_completes_the_calls_whose_arguments_are_whole() {
    let header = tool_chunk(
        r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"n\":1}"}},
            {"index":1,"id":"b","function":{"name":"g","arguments":{"o":true}}},
            {"index":2,"id":"c","function":{"name":"h","arguments":"{\"m\":"}},
            {"index":3,"id":"d","function":{"name":"k","arguments":""}}]"#,
        None,
    );
    let noise = r#"{"choices":[{"index":0,"delta":{"content":"\n","tool_calls":[]}}]}"#;
    for partial in [false, true] {
        // The Hash path: the calls come out of the chunk itself, text first.
        let mut h = Harness::new(partial);
        h.chunk(&header).unwrap();
        let out = h.chunk(noise).unwrap();
        assert_eq!(out[0], Out::Text("\n".into()), "partial={partial}");
        let done = final_calls(&out);
        assert_eq!(ids(&out), ["a", "b"], "partial={partial}");
        assert_eq!((done[0].params.clone(), done[1].params.clone()), (json!({"n": 1}), json!({"o": true})));
        assert!(done.iter().all(|c| !c.partial));
        // Incomplete arguments (and none yet) stay open: vLLM's noise.
        let rest =
            h.stream(&[&fragment_chunk(2, "2}"), &fragment_chunk(3, "{}"), &finish_chunk("tool_calls")]);
        let rest_ids: Vec<String> = final_calls(&rest).into_iter().map(|c| c.id).collect();
        assert_eq!(rest_ids, ["c", "d"], "partial={partial}");
        assert_eq!(final_calls(&rest)[0].params, json!({"m": 2}));
        assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
        // The raw path: the read that holds the `[]` event returns them.
        let bytes = format!("data: {noise}\n\n");
        for cut in [1, bytes.len() / 2, bytes.len() - 2, bytes.len() - 1] {
            let mut h = Harness::new(partial);
            h.raw(format!("data: {}\n\n", header.replace('\n', "")).as_bytes()).unwrap();
            let (first, second) = bytes.as_bytes().split_at(cut);
            let mut out = h.raw(first).unwrap();
            out.extend(h.raw(second).unwrap());
            assert_eq!(out[0], Out::Text("\n".into()), "cut={cut}");
            assert_eq!(ids(&out), ["a", "b"], "cut={cut}");
        }
    }
}

#[test]
fn rule_29_a_whole_message_after_the_stream_is_an_echo_whose_usage_counts() {
    let echo = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",
        "content":"Checking.","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"n\":1}"}}]},
        "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":12}}"#;
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &text_chunk("Checking."),
            &tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"n\":1}"}}]"#, None),
            &finish_chunk("tool_calls"),
            echo,
            "{\"choices\":[]}",
        ]);
        assert_eq!(texts(&items), ["Checking."], "partial={partial}");
        let done = final_calls(&items);
        assert_eq!((done.len(), done[0].id.as_str()), (1, "a"));
        assert_eq!((h.usage().prompt_tokens, h.usage().completion_tokens), (Some(30), Some(12)));
        let echoes =
            h.processor.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::EchoedMessage).count();
        assert_eq!(echoes, 1);
    }
    // Text alone streamed, the echo before any finish_reason: its
    // finish_reason still ends the turn.
    let mut h = Harness::new(false);
    let text_echo = r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop"}]}"#;
    assert_eq!(texts(&h.stream(&[&text_chunk("Hi"), text_echo])), ["Hi"]);
    assert!(h.anomaly_kinds().contains(&AnomalyKind::EchoedMessage));
    // Nothing streamed yet: the message is read.
    let mut h = Harness::new(false);
    let first = r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"Whole"},"finish_reason":"stop"}]}"#;
    assert_eq!(texts(&h.stream(&[first])), ["Whole"]);
    assert!(!h.anomaly_kinds().contains(&AnomalyKind::EchoedMessage));
    // An echo that holds calls the stream never had (one with an id, one
    // without): they come out of it, after the streamed one, reported; the
    // streamed call it repeats does not come twice.
    let echo = r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"Checking.","tool_calls":[
        {"id":"a","type":"function","function":{"name":"f","arguments":"{\"n\":1}"}},
        {"id":"b","type":"function","function":{"name":"g","arguments":"{\"city\":\"Oslo\"}"}},
        {"type":"function","function":{"name":"h","arguments":{"x":2}}}]},"finish_reason":"tool_calls"}]}"#;
    let text = text_chunk("Checking.");
    let a = tool_chunk(r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"n\":1}"}}]"#, None);
    for partial in [false, true] {
        for streamed in [vec![&text], vec![&text, &a]] {
            let mut h = Harness::new(partial);
            let mut chunks: Vec<&str> = streamed.iter().map(|c| c.as_str()).collect();
            chunks.push(echo);
            let items = h.stream(&chunks);
            let got: Vec<_> =
                final_calls(&items).iter().map(|c| (c.name.clone(), c.params.clone())).collect();
            let want = [("f", json!({"n": 1})), ("g", json!({"city": "Oslo"})), ("h", json!({"x": 2}))];
            assert_eq!(
                got,
                want.map(|(n, p)| (n.to_owned(), p)),
                "partial={partial} streamed={}",
                streamed.len()
            );
            let cut =
                h.processor.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::Truncated).count();
            assert_eq!(cut, 4 - streamed.len(), "partial={partial}: {:?}", h.processor.anomalies().all());
        }
    }
    // A streamed call repeated under another id (a generated one, or the
    // one an id change kept) is matched by its name and arguments; of two
    // calls of one name without ids, the one never streamed comes out; with
    // no finish_reason, still after the streamed call.
    let f = |args: &str| {
        tool_chunk(&format!(r#"[{{"index":0,"function":{{"name":"f","arguments":{args}}}}}]"#), None)
    };
    let whole = |calls: &str, finish: &str| {
        format!(
            r#"{{"object":"chat.completion","choices":[{{"index":0,"message":{{"tool_calls":[{calls}]}},"finish_reason":{finish}}}]}}"#
        )
    };
    let one = r#"{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}"#;
    let two = r#"{"type":"function","function":{"name":"f","arguments":"{\"a\":2}"}}"#;
    let changed = [
        tool_chunk(r#"[{"index":0,"id":"c1","function":{"name":"f","arguments":"{\"a\":"}}]"#, None),
        tool_chunk(r#"[{"index":0,"id":"c2","function":{"arguments":"1}"}}]"#, None),
    ];
    let cases: Vec<(Vec<String>, String, Vec<serde_json::Value>)> = vec![
        (vec![f(r#""{\"a\":1}""#)], whole(one, r#""tool_calls""#), vec![json!({"a": 1})]),
        (changed.to_vec(), whole(&one.replace("call_1", "c2"), r#""tool_calls""#), vec![json!({"a": 1})]),
        (
            vec![f(r#""{\"a\":1}""#)],
            whole(&format!("{},{two}", one.replace(r#""id":"call_1","#, "")), "null"),
            vec![json!({"a": 1}), json!({"a": 2})],
        ),
    ];
    for (streamed, echo, want) in cases {
        let mut h = Harness::new(false);
        let mut chunks: Vec<&str> = streamed.iter().map(String::as_str).collect();
        chunks.push(&echo);
        let items = h.stream(&chunks);
        let got: Vec<_> = final_calls(&items).iter().map(|c| c.params.clone()).collect();
        assert_eq!(got, want, "{echo}");
        let cut = h.processor.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::Truncated).count();
        assert_eq!(cut, want.len() - 1, "{echo}: {:?}", h.processor.anomalies().all());
    }
    // The same with the turn ended before the echo (the streamed calls are
    // complete then): matched by id, else by name, each streamed call once;
    // an echoed call without a name is reported, not dropped.
    let fin = finish_chunk("tool_calls");
    let nameless = r#"{"id":"c9","type":"function","function":{"arguments":"{\"z\":9}"}}"#;
    let ended: Vec<(Vec<String>, String, usize, Vec<AnomalyKind>)> = vec![
        (
            vec![f(r#""{\"a\":1}""#), fin.clone()],
            whole(&one.replace(r#""id":"call_1","#, ""), "null"),
            1,
            vec![],
        ),
        (vec![f(r#""{\"a\":1}""#), fin.clone()], whole(one, "null"), 1, vec![]),
        (
            vec![changed[0].clone(), changed[1].clone(), fin.clone()],
            whole(&one.replace("call_1", "c2"), "null"),
            1,
            vec![],
        ),
        (
            vec![f(r#""{\"a\":1}""#), fin.clone()],
            whole(&format!("{one},{nameless}"), "null"),
            1,
            vec![AnomalyKind::OrphanFragment],
        ),
    ];
    for (streamed, echo, calls, kinds) in ended {
        let mut h = Harness::new(false);
        let mut chunks: Vec<&str> = streamed.iter().map(String::as_str).collect();
        chunks.push(&echo);
        let items = h.stream(&chunks);
        assert_eq!(final_calls(&items).len(), calls, "{echo}");
        let got: Vec<_> = h
            .anomaly_kinds()
            .into_iter()
            .filter(|k| {
                *k != AnomalyKind::EchoedMessage
                    && *k != AnomalyKind::GeneratedId
                    && *k != AnomalyKind::IdChanged
            })
            .collect();
        assert_eq!(got, kinds, "{echo}");
    }
}

#[test]
fn rules_34_35_37_usage_inside_the_choice_cache_creation_input_tokens_and_running_totals() {
    // Moonshot Kimi: only inside the finish chunk's choice.
    let mut h = Harness::new(false);
    h.stream(&[
        &text_chunk("a"),
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}]}"#,
    ]);
    assert_eq!((h.usage().prompt_tokens, h.usage().completion_tokens), (Some(12), Some(5)));
    // DashScope: cache writes as cache_creation_input_tokens.
    let mut h = Harness::new(false);
    h.stream(&[
        &text_chunk("a"),
        r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":20,"cache_creation_input_tokens":30}}}"#,
    ]);
    let u = h.usage();
    assert_eq!((u.prompt_tokens, u.cache_read_tokens, u.cache_write_tokens), (Some(50), Some(20), Some(30)));
    // Rule 76: a stream after finish is a new stream, with its own usage:
    // the last one's cache counts are not taken off its prompt.
    h.stream(&[&text_chunk("b"), r#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2}}"#]);
    let u = h.usage();
    assert_eq!((u.prompt_tokens, u.cache_read_tokens, u.cache_write_tokens), (Some(40), Some(0), Some(0)));
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::InputAfterFinish]);
    // vLLM continuous_usage_stats: a running total on every chunk.
    let mut h = Harness::new(false);
    h.stream(&[
        r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":9,"total_tokens":10,"completion_tokens":1}}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2}}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}}"#,
    ]);
    assert_eq!((h.usage().prompt_tokens, h.usage().completion_tokens), (Some(9), Some(3)));
    assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
}

#[test]
fn rule_42_finish_reason_error_names_the_native_reason() {
    let mut h = Harness::new(false);
    h.chunk(&text_chunk("before")).unwrap();
    let chunk = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error","native_finish_reason":"MALFORMED_FUNCTION_CALL"}]}"#;
    match h.chunk(chunk).unwrap_err() {
        Error::Provider { message, .. } => {
            assert!(message.contains("MALFORMED_FUNCTION_CALL"), "{message}");
            assert!(message.contains("finish_reason \"error\""), "{message}");
        }
        other => panic!("expected a provider error, got {other:?}"),
    }
    // An error object still gives its own message.
    let mut h = Harness::new(false);
    let with_error = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error","native_finish_reason":"STOP","error":{"message":"upstream died"}}]}"#;
    match h.chunk(with_error).unwrap_err() {
        Error::Provider { message, .. } => assert_eq!(message, "upstream died"),
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[test]
fn rule_14_a_repeated_id_and_name_at_another_index_continue_a_call_not_yet_complete() {
    // LocalAI: a header with empty arguments, then the same id and name at
    // another index with the real ones.
    let mut h = Harness::new(false);
    let items = h.stream(&[
        &tool_chunk(r#"[{"index":0,"id":"la","function":{"name":"lookup","arguments":""}}]"#, None),
        &tool_chunk(r#"[{"index":1,"id":"la","function":{"name":"lookup","arguments":"{\"t\":1}"}}]"#, None),
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(final_calls(&items).iter().map(|c| c.params.clone()).collect::<Vec<_>>(), [json!({"t": 1})]);
    assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
    // Vertex Gemini: each call's header at one index, its fragments, id
    // and name repeated, at the other.
    let piece = |index, id, name, args: &str| {
        let args = serde_json::to_string(args).unwrap();
        tool_chunk(
            &format!(
                r#"[{{"index":{index},"id":"{id}","function":{{"name":"{name}","arguments":{args}}}}}]"#
            ),
            None,
        )
    };
    let mut h = Harness::new(true);
    let items = h.stream(&[
        &piece(1, "A", "f", ""),
        &piece(0, "B", "g", ""),
        &piece(0, "A", "f", r#"{"a":"#),
        &piece(1, "B", "g", r#"{"b":"#),
        &piece(0, "A", "f", "1}"),
        &piece(1, "B", "g", "2}"),
        &finish_chunk("tool_calls"),
    ]);
    let got: Vec<_> = final_calls(&items).iter().map(|c| (c.id.clone(), c.params.clone())).collect();
    assert_eq!(got, [("A".to_owned(), json!({"a": 1})), ("B".to_owned(), json!({"b": 2}))]);
    assert!(h.anomaly_kinds().is_empty(), "{:?}", h.anomaly_kinds());
    // Once A's arguments are complete, its id and name repeated with no
    // arguments (empty, blank, null or none) add nothing: no third call,
    // and B, whose index it comes at, is not ended by it.
    for trailing in [r#""""#, r#"" ""#, "null", ""] {
        let arguments =
            if trailing.is_empty() { String::new() } else { format!(r#","arguments":{trailing}"#) };
        let repeat =
            tool_chunk(&format!(r#"[{{"index":0,"id":"A","function":{{"name":"f"{arguments}}}}}]"#), None);
        for partial in [false, true] {
            let mut h = Harness::new(partial);
            let items = h.stream(&[
                &piece(1, "A", "f", ""),
                &piece(0, "B", "g", ""),
                &piece(0, "A", "f", r#"{"a":1}"#),
                &repeat,
                &piece(1, "B", "g", r#"{"b":2}"#),
                &finish_chunk("tool_calls"),
            ]);
            let got: Vec<_> = final_calls(&items).iter().map(|c| (c.id.clone(), c.params.clone())).collect();
            assert_eq!(
                got,
                [("A".to_owned(), json!({"a": 1})), ("B".to_owned(), json!({"b": 2}))],
                "{trailing}"
            );
            assert!(h.anomaly_kinds().is_empty(), "{trailing}: {:?}", h.anomaly_kinds());
        }
    }
    // Two calls of one function that share an id, the second's header, with
    // no arguments, at an index no call has: two calls, as before.
    for partial in [false, true] {
        let mut h = Harness::new(partial);
        let items = h.stream(&[
            &tool_chunk(r#"[{"index":0,"id":"x","function":{"name":"f","arguments":""}}]"#, None),
            &fragment_chunk(0, r#"{"a":1}"#),
            &tool_chunk(r#"[{"index":1,"id":"x","function":{"name":"f","arguments":""}}]"#, None),
            &fragment_chunk(1, r#"{"b":2}"#),
            &finish_chunk("tool_calls"),
        ]);
        let got: Vec<_> = final_calls(&items).iter().map(|c| (c.id.clone(), c.params.clone())).collect();
        assert_eq!(
            got,
            [("x".to_owned(), json!({"a": 1})), ("x".to_owned(), json!({"b": 2}))],
            "partial={partial}"
        );
        assert_eq!(h.anomaly_kinds(), [AnomalyKind::DuplicateId]);
    }
}

#[test]
fn rule_74_output_limit_decides_the_calls_open_at_a_length_stop() {
    use openai_stream::driver::OutputLimit;
    // "a" has whole arguments, "b" cut ones.
    let calls = tool_chunk(
        r#"[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"q\":1}"}},
            {"index":1,"id":"b","function":{"name":"g","arguments":"{\"q\":"}}]"#,
        None,
    );
    let message = r#"{"choices":[{"finish_reason":"length","message":{"content":"Partial","tool_calls":[
        {"id":"a","function":{"name":"f","arguments":"{\"q\":1}"}},{"id":"b","function":{"name":"g","arguments":"{\"q\":"}}]}}]}"#;
    for (output_limit, kept, dropped) in
        [(OutputLimit::Drop, vec![], 2), (OutputLimit::DropCut, vec!["a"], 1)]
    {
        for partial in [false, true] {
            let mut h =
                Harness::with(Options { output_limit, partial_tool_calls: partial, ..Options::default() });
            let items = h.stream(&[&calls, &text_chunk("Partial"), &finish_chunk("length")]);
            assert_eq!(ids(&final_calls(&items).into_iter().map(Out::Call).collect::<Vec<_>>()), kept);
            assert_eq!(texts(&items), ["Partial"]);
            assert_eq!(h.processor.stop_reason(), Some("length"));
            let reported = h.anomaly_kinds().into_iter().filter(|k| *k == AnomalyKind::DroppedCall).count();
            assert_eq!(reported, dropped, "{output_limit:?}");
            // The whole message: the same.
            let mut h = Harness::with(Options { output_limit, ..Options::default() });
            let items = h.message(message).unwrap();
            assert_eq!(ids(&items), kept);
            assert_eq!(texts(&items), ["Partial"]);
            assert_eq!(h.processor.stop_reason(), Some("length"));
        }
    }
    // :keep: as at any other end (b's arguments do not parse).
    let mut h = Harness::with(Options { output_limit: OutputLimit::Keep, ..Options::default() });
    h.chunk(&calls).unwrap();
    assert!(matches!(h.chunk(&finish_chunk("length")), Err(Error::Arguments { ref id, .. }) if id == "b"));
    // Only "length" is the limit; the stop reason is the last one, and a
    // new stream starts without one.
    let mut h = Harness::with(Options { output_limit: OutputLimit::Drop, ..Options::default() });
    assert_eq!(ids(&h.stream(&[&calls.replace(r#"{\"q\":""#, r#"{}""#), &finish_chunk("stop")])), ["a", "b"]);
    assert_eq!(h.processor.stop_reason(), Some("stop"));
    h.chunk(&text_chunk("x")).unwrap();
    assert_eq!(h.processor.stop_reason(), None);
}

// ---- What the next request carries back (rules 77 to 79) -------------------

fn reasoning_chunk(field: &str, text: &str) -> String {
    json!({"choices":[{"index":0,"delta":{"content":null, field: text},"finish_reason":null}]}).to_string()
}

fn thinking_options(partial: bool) -> Options {
    Options { partial_tool_calls: partial, output_thinking: true, round_trip: true, ..Options::default() }
}

fn kinds(items: &[Out]) -> Vec<&'static str> {
    items
        .iter()
        .map(|i| match i {
            Out::Text(_) => "text",
            Out::Call(c) if c.partial => "partial",
            Out::Call(_) => "call",
            Out::Thinking(_) => "thinking",
        })
        .collect()
}

fn thinkings(items: &[Out]) -> Vec<String> {
    items.iter().filter_map(|i| if let Out::Thinking(t) = i { Some(t.clone()) } else { None }).collect()
}

#[test]
fn rule_77_reasoning_comes_out_whole_before_the_item_it_led_to() {
    let header = header_chunk(0, "call_1", "search");
    let fragment = fragment_chunk(0, r#"{"q":"x"}"#);
    for partial in [false, true] {
        let mut h = Harness::with(thinking_options(partial));
        let items = h.stream(&[
            &reasoning_chunk("reasoning_content", ""),
            &reasoning_chunk("reasoning_content", "Let "),
            &reasoning_chunk("reasoning_content", "me look."),
            &header,
            &fragment,
            &finish_chunk("tool_calls"),
        ]);
        assert_eq!(thinkings(&items), ["Let me look."]);
        // Right before the completed call (with partial calls, after their
        // updates).
        let kinds = kinds(&items);
        let thinking = kinds.iter().position(|k| *k == "thinking");
        assert_eq!(thinking.map(|t| kinds.get(t + 1)), Some(Some(&"call")), "partial={partial}: {kinds:?}");
        assert_eq!(ids(&final_calls(&items).into_iter().map(Out::Call).collect::<Vec<_>>()), ["call_1"]);
        assert_eq!(h.processor.round_trip().fields(), ["reasoning_content"]);
        assert!(h.processor.round_trip().carries());
        assert!(h.anomaly_kinds().is_empty());
    }
    // Text before the calls: the reasoning comes before the text; reasoning
    // that resumes is a new stretch; at the end, it comes out at finish.
    let mut h = Harness::with(thinking_options(false));
    let items = h.stream(&[
        &reasoning_chunk("reasoning", "a"),
        &text_chunk("Hi"),
        &reasoning_chunk("reasoning", "b"),
        &reasoning_chunk("reasoning", "c"),
        &header,
        &fragment,
        &finish_chunk("tool_calls"),
    ]);
    assert_eq!(kinds(&items), ["thinking", "text", "thinking", "call"]);
    assert_eq!(thinkings(&items), ["a", "bc"]);
    let mut h = Harness::with(thinking_options(false));
    assert!(h.chunk(&reasoning_chunk("reasoning", "only")).unwrap().is_empty());
    assert_eq!(kinds(&h.finish().unwrap()), ["thinking"]);
}

#[test]
fn rule_77_reasoning_that_resumes_between_parallel_calls_is_one_thinking_with_or_without_partial_calls() {
    for partial in [false, true] {
        // One read per chunk, and all in one read.
        for whole in [false, true] {
            let mut h = Harness::with(thinking_options(partial));
            let chunks = [
                reasoning_chunk("reasoning_content", "R1."),
                header_chunk(0, "call_a", "search"),
                fragment_chunk(0, r#"{"q":"a"}"#),
                reasoning_chunk("reasoning_content", "R2."),
                header_chunk(1, "call_b", "search"),
                fragment_chunk(1, r#"{"q":"b"}"#),
                finish_chunk("tool_calls"),
            ];
            let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
            let items = if whole {
                let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                let mut items = h.raw(body.as_bytes()).expect("read");
                items.extend(h.finish().expect("finish"));
                items
            } else {
                h.stream(&chunks)
            };
            let what = format!("partial={partial} whole={whole}: {:?}", kinds(&items));
            assert_eq!(thinkings(&items), ["R1.R2."], "{what}");
            let kinds = kinds(&items);
            let first_call = kinds.iter().position(|k| *k == "call");
            assert_eq!(
                first_call.and_then(|c| c.checked_sub(1)).map(|t| kinds[t]),
                Some("thinking"),
                "{what}"
            );
            assert!(h.anomaly_kinds().is_empty(), "{what}");
        }
    }
}

#[test]
fn rule_77_an_empty_field_counts_null_does_not_and_without_the_options_nothing_changes() {
    let calls =
        tool_chunk(r#"[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]"#, Some("tool_calls"));
    // DeepSeek V4 sometimes streams a tool turn with empty reasoning, and
    // then wants the field back: "" is a field used.
    let mut h = Harness::with(thinking_options(false));
    let items = h.stream(&[&reasoning_chunk("reasoning_content", ""), &calls]);
    assert_eq!(kinds(&items), ["thinking", "call"]);
    assert_eq!(thinkings(&items), [""]);
    assert_eq!(h.processor.round_trip().fields(), ["reasoning_content"]);
    // null is absent.
    let nulls = json!({"choices":[{"delta":{"content":"x","reasoning_content":null,"reasoning":null,"reasoning_details":null}}]});
    let mut h = Harness::with(thinking_options(false));
    let items = h.stream(&[&nulls.to_string(), &calls]);
    assert_eq!(kinds(&items), ["text", "call"]);
    assert!(!h.processor.round_trip().carries());
    // Neither option: exactly the items without these fields.
    let with = [reasoning_chunk("reasoning_content", "hm"), text_chunk("x"), calls.clone()];
    let without = [text_chunk("x"), calls.clone()];
    let mut h = Harness::new(false);
    let items = h.stream(&with.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(items, Harness::new(false).stream(&without.iter().map(String::as_str).collect::<Vec<_>>()));
    assert!(!h.processor.round_trip().carries());
}

#[test]
fn rule_77_both_fields_in_one_delta() {
    let both =
        |a: &str, b: &str| json!({"choices":[{"delta":{"reasoning_content":a,"reasoning":b}}]}).to_string();
    let mut h = Harness::with(thinking_options(false));
    let items = h.stream(&[&both("same", "same"), &both("", "more"), &text_chunk("x")]);
    assert_eq!(thinkings(&items), ["samemore"]);
    assert_eq!(h.processor.round_trip().fields(), ["reasoning_content", "reasoning"]);
    assert!(h.anomaly_kinds().is_empty());
    let mut h = Harness::with(thinking_options(false));
    let items = h.stream(&[&both("one", "other"), &text_chunk("x")]);
    assert_eq!(thinkings(&items), ["one"]);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::ConflictingValue]);
    // A field of the wrong type is reported and not used.
    let mut h = Harness::with(thinking_options(false));
    h.stream(&[&json!({"choices":[{"delta":{"reasoning":5,"content":"x"}}]}).to_string()]);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::IgnoredField]);
    assert!(!h.processor.round_trip().carries());
}

#[test]
fn rule_77_a_whole_message_gives_its_reasoning_first() {
    let message = r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"Sure","reasoning_content":"Think.",
        "tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"sig"}}}]}}]}"#;
    let mut h = Harness::with(thinking_options(false));
    let items = h.message(message).unwrap();
    assert_eq!(kinds(&items), ["thinking", "text", "call"]);
    assert_eq!(thinkings(&items), ["Think."]);
    let call = h.processor.calls().get(CallId(0)).map(|c| c.id.clone());
    assert_eq!(call.as_deref(), Some("a"));
    let extra = h.processor.round_trip().extra(CallId(0)).map(|v| v.to_json());
    assert_eq!(extra.as_deref(), Some(r#"{"google":{"thought_signature":"sig"}}"#));
}

#[test]
fn rule_78_reasoning_details_merge_by_index_and_type() {
    let details = |d: serde_json::Value| {
        json!({"choices":[{"delta":{"content":"","reasoning_details":d}}]}).to_string()
    };
    let mut h = Harness::with(thinking_options(false));
    h.stream(&[
        &details(json!([{"type":"reasoning.text","text":"Look","index":0,"format":"google-gemini-v1"}])),
        &details(json!([{"type":"reasoning.text","text":"ing.","index":0}])),
        &details(json!([{"type":"reasoning.encrypted","data":"enc","index":0,"id":"call_1","format":"google-gemini-v1"}])),
        &text_chunk("x"),
    ]);
    let merged: Vec<String> = h.processor.round_trip().details().iter().map(|v| v.to_json()).collect();
    assert_eq!(
        merged,
        [
            r#"{"format":"google-gemini-v1","index":0,"text":"Looking.","type":"reasoning.text"}"#,
            r#"{"data":"enc","format":"google-gemini-v1","id":"call_1","index":0,"type":"reasoning.encrypted"}"#
        ]
    );
    assert!(h.processor.round_trip().carries());
    // Details after the thinking came out make another (no text of its
    // own) before the next item.
    let mut h = Harness::with(thinking_options(false));
    let items = h.stream(&[
        &details(json!([{"type":"reasoning.text","text":"a","index":0}])),
        &text_chunk("x"),
        &details(json!([{"type":"reasoning.text","text":"b","index":0}])),
        &tool_chunk(r#"[{"id":"c","function":{"name":"f","arguments":"{}"}}]"#, Some("tool_calls")),
    ]);
    assert_eq!(kinds(&items), ["thinking", "text", "thinking", "call"]);
    assert_eq!(thinkings(&items), ["", ""]);
    assert_eq!(h.processor.round_trip().details()[0].get("text").and_then(|t| t.as_str()), Some("ab"));
}

/// OpenRouter sends `"reasoning":null,"reasoning_details":[]` with every
/// delta of every model; some servers repeat an empty `reasoning_content`.
/// Neither is reasoning that resumes: no thinking before each text delta.
#[test]
fn rules_77_78_empty_reasoning_repeated_on_each_delta_makes_no_thinking_per_delta() {
    let delta = |content: &str, extra: serde_json::Value| {
        let mut d = json!({"role":"assistant","content":content});
        if let (Some(o), Some(extra)) = (d.as_object_mut(), extra.as_object()) {
            o.extend(extra.clone());
        }
        json!({"choices":[{"index":0,"delta":d,"finish_reason":null}]}).to_string()
    };
    let empty = json!({"reasoning":null,"reasoning_details":[]});
    for partial in [false, true] {
        let mut h = Harness::with(thinking_options(partial));
        let items =
            h.stream(&[&delta("", empty.clone()), &delta("Hel", empty.clone()), &delta("lo", empty.clone())]);
        assert_eq!(kinds(&items), ["text", "text"], "partial={partial}");
        // Nothing to carry back either.
        assert!(!h.processor.round_trip().carries());
        assert!(h.anomaly_kinds().is_empty());

        // An empty reasoning field still goes back (DeepSeek refuses a
        // request without it): one thinking carries it, the first time.
        let mut h = Harness::with(thinking_options(partial));
        let blank = json!({"reasoning_content":""});
        let items =
            h.stream(&[&delta("Hel", blank.clone()), &delta("lo", blank.clone()), &finish_chunk("stop")]);
        assert_eq!(kinds(&items), ["thinking", "text", "text"], "partial={partial}");
        assert_eq!(h.processor.round_trip().fields(), ["reasoning_content"]);

        // Details, then the empty list with each text delta: one thinking.
        let mut h = Harness::with(thinking_options(partial));
        let items = h.stream(&[
            &delta("", json!({"reasoning_details":[{"type":"reasoning.text","text":"a","index":0}]})),
            &delta("Hel", empty.clone()),
            &delta("lo", empty.clone()),
        ]);
        assert_eq!(kinds(&items), ["thinking", "text", "text"], "partial={partial}");
        assert!(h.processor.round_trip().carries());
    }
}

#[test]
fn rule_79_extra_content_per_call_and_one_turn_per_response() {
    let calls = tool_chunk(
        r#"[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"s1"}}},
            {"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]"#,
        Some("stop"),
    );
    for partial in [false, true] {
        let mut h =
            Harness::with(Options { round_trip: true, partial_tool_calls: partial, ..Options::default() });
        let items = h.stream(&[&calls]);
        assert_eq!(ids(&final_calls(&items).into_iter().map(Out::Call).collect::<Vec<_>>()), ["a", "b"]);
        let trip = h.processor.round_trip();
        let extra = |n| trip.extra(CallId(n)).map(|v| v.to_json());
        assert_eq!(extra(0).as_deref(), Some(r#"{"google":{"thought_signature":"s1"}}"#));
        assert_eq!(extra(1), None);
        assert!(trip.carries());
        let turn = trip.turn().map(str::to_owned);
        assert!(turn.is_some());
        // The next response is another turn.
        h.stream(&[&calls]);
        assert!(h.processor.round_trip().turn().is_some());
        assert_ne!(h.processor.round_trip().turn(), turn.as_deref());
    }
    // Another value later: the first is kept, and reported; not an object: ignored.
    let again = tool_chunk(
        r#"[{"id":"a","function":{"arguments":""},"extra_content":{"google":{"thought_signature":"s2"}}}]"#,
        None,
    );
    let odd = tool_chunk(
        r#"[{"id":"c","function":{"name":"h","arguments":"{}"},"extra_content":"x"}]"#,
        Some("stop"),
    );
    let mut h = Harness::with(Options { round_trip: true, ..Options::default() });
    h.stream(&[&calls.replace("\"stop\"", "null"), &again, &odd]);
    let extra = h.processor.round_trip().extra(CallId(0)).map(|v| v.to_json());
    assert_eq!(extra.as_deref(), Some(r#"{"google":{"thought_signature":"s1"}}"#));
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::ConflictingValue, AnomalyKind::IgnoredField]);
    // On a delta that matches no call and names none: not kept, and said.
    let early =
        tool_chunk(r#"[{"index":0,"id":"a","extra_content":{"google":{"thought_signature":"s0"}}}]"#, None);
    let mut h = Harness::with(Options { round_trip: true, ..Options::default() });
    h.stream(&[&early, &calls]);
    let extra = h.processor.round_trip().extra(CallId(0)).map(|v| v.to_json());
    assert_eq!(extra.as_deref(), Some(r#"{"google":{"thought_signature":"s1"}}"#));
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::IgnoredField]);
    // Without round_trip nothing is kept.
    let mut h = Harness::new(false);
    h.stream(&[&calls]);
    assert!(!h.processor.round_trip().carries());
    assert_eq!(h.processor.round_trip().extra(CallId(0)), None);
}

#[test]
fn rule_81_a_refusal_is_reported_whole_and_not_handed_out() {
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"I can't "}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"help with that."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    ];
    let mut h = Harness::new(false);
    let items = h.stream(&chunks);
    assert!(items.is_empty(), "{items:?}");
    let refusals: Vec<_> =
        h.processor.anomalies().all().iter().filter(|a| a.kind == AnomalyKind::Refusal).collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].excerpt.as_deref(), Some("I can't help with that."));
    // The raw path, in reads of every size, says the same once per stream.
    let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    for step in [1, 7, body.len()] {
        let mut raw = Harness::new(false);
        for read in body.as_bytes().chunks(step) {
            raw.raw(read).expect("read");
        }
        raw.finish().expect("finish");
        assert_eq!(raw.anomaly_kinds(), [AnomalyKind::Refusal], "reads of {step} bytes");
    }
    // A whole response's message.
    let mut whole = Harness::new(false);
    let out = whole.message(
        r#"{"choices":[{"index":0,"message":{"content":null,"refusal":"No."},"finish_reason":"stop"}]}"#,
    );
    assert!(out.expect("message").is_empty());
    assert_eq!(whole.anomaly_kinds(), [AnomalyKind::Refusal]);
    // Null or empty refusals, as OpenAI sends on every answer, say nothing.
    let mut plain = Harness::new(false);
    plain.stream(&[chunks[0], r#"{"choices":[{"index":0,"delta":{"content":"Hi","refusal":""}}]}"#]);
    assert_eq!(plain.anomaly_kinds(), []);
}

#[test]
fn rule_81_a_refusal_is_reported_when_its_response_ends_or_a_read_fails() {
    let refusal = r#"{"choices":[{"index":0,"delta":{"refusal":"No way."}}]}"#;
    // At its finish_reason, before `finish`.
    let mut h = Harness::new(false);
    h.chunks(&[refusal, r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#]);
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::Refusal]);
    h.finish().expect("finish");
    assert_eq!(h.anomaly_kinds(), [AnomalyKind::Refusal], "once");
    // A read that fails on a provider error: a caller that ends the
    // request there never calls `finish`.
    let mut raw = Harness::new(false);
    let body = format!("data: {refusal}\n\ndata: {{\"error\":{{\"message\":\"boom\"}}}}\n\n");
    assert!(matches!(raw.raw(body.as_bytes()), Err(Error::Provider { .. })));
    assert_eq!(raw.anomaly_kinds(), [AnomalyKind::Refusal]);
    // A long refusal is counted whole and kept in part.
    let mut long = Harness::new(false);
    let piece = format!(r#"{{"choices":[{{"index":0,"delta":{{"refusal":"{}"}}}}]}}"#, "x".repeat(10_000));
    for _ in 0..100 {
        long.chunks(&[&piece]);
    }
    long.finish().expect("finish");
    let all = long.processor.anomalies().all();
    assert!(all[0].message.contains("(1000000 bytes)"), "{}", all[0].message);
}

#[test]
fn rule_81_a_whole_message_after_a_streamed_refusal_echoes_it() {
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"refusal":"No."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":null,"refusal":"No."},"finish_reason":"stop"}]}"#,
    ];
    let mut h = Harness::new(false);
    h.stream(&chunks);
    let body: String =
        chunks.iter().map(|c| format!("data: {c}\n\n")).collect::<String>() + "data: [DONE]\n\n";
    let mut raw = Harness::new(false);
    raw.raw(body.as_bytes()).expect("read");
    raw.finish().expect("finish");
    for kinds in [h.anomaly_kinds(), raw.anomaly_kinds()] {
        assert_eq!(kinds.iter().filter(|k| **k == AnomalyKind::Refusal).count(), 1, "{kinds:?}");
        assert!(kinds.contains(&AnomalyKind::EchoedMessage), "{kinds:?}");
    }
}
