//! Unit tests of the processor: framing decisions and the non-streamed path.

use super::*;
use crate::error::StreamErrorKind;
use crate::output::Item;

const A: &str = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
const B: &str = r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"}]}"#;

/// Ids of the completed calls in the processor's last output.
fn completed(p: &Processor) -> Vec<String> {
    p.output()
        .items()
        .filter_map(|i| match i {
            Item::Completed(c, _) => p.calls().get(c).map(|c| c.id.clone()),
            _ => None,
        })
        .collect()
}

fn texts(p: &Processor) -> Vec<String> {
    p.output()
        .items()
        .filter_map(|i| match i {
            Item::Text(t) => Some(t.to_owned()),
            _ => None,
        })
        .collect()
}

fn kinds(p: &Processor) -> Vec<AnomalyKind> {
    p.anomalies().all().iter().map(|a| a.kind).collect()
}

fn message(p: &mut Processor, json: &str) -> Result<(), Error> {
    let chunk = Chunk::from_json(json).expect("test JSON");
    p.process_message(&chunk).map(|_| ())
}

fn strict() -> Processor {
    Processor::new(Options { strict: true, ..Options::default() })
}

/// Decodes `stream` by default (the unreadable event is skipped and
/// reported) and strictly (it is raised); the processor after each.
fn both(stream: &str) -> [(Processor, Result<(), Error>); 2] {
    [Processor::default(), strict()].map(|mut p| {
        let r = p.decode(stream.as_bytes()).map(|_| ());
        (p, r)
    })
}

#[test]
fn a_truncated_line_without_a_blank_line_does_not_swallow_the_next_event() {
    let stream = format!("data: {A}\n\ndata: {{\"choices\":[{{\"delta\":{{\"content\":\"cut\ndata: {B}\n\n");
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
    let mut p = Processor::default();
    let stream = "data: {\"choices\":\ndata: [{\"delta\":{\"content\":\"a\"}}]}\n\n";
    p.decode(stream.as_bytes()).map(|_| ()).expect("one event over two lines");
    assert_eq!(texts(&p), ["a"]);
    // A continuation line that starts with `{` joins when the joined text
    // completes the event.
    let mut p = Processor::default();
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
    let mut p = Processor::default();
    p.decode(format!("data: {A}\n\ndata: {{\"choices\":[").as_bytes()).map(|_| ()).unwrap();
    p.finish().map(|_| ()).expect("recorded");
    assert_eq!(kinds(&p), [AnomalyKind::TruncatedEvent]);
}

#[test]
fn process_message_raises_a_choice_error_after_keeping_the_calls() {
    let mut p = Processor::default();
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
    let mut p = Processor::default();
    let json = r#"{"choices":[{"message":{"content":"x"},"finish_reason":"error"}]}"#;
    assert!(matches!(message(&mut p, json), Err(Error::Provider { .. })));
    // A null or empty error is no error.
    let mut p = Processor::default();
    let json = r#"{"choices":[{"message":{"content":"x"},"finish_reason":"stop","error":null}]}"#;
    message(&mut p, json).expect("no error");
}

fn chunk(p: &mut Processor, json: &str) -> Result<(), Error> {
    let chunk = Chunk::from_json(json).expect("test JSON");
    p.process_chunk(&chunk).map(|_| ())
}

#[test]
fn a_streamed_message_instead_of_a_delta_is_read_and_reported() {
    let mut p = Processor::default();
    chunk(&mut p, r#"{"choices":[{"message":{"content":"hi"}}]}"#).unwrap();
    assert_eq!(texts(&p), ["hi"]);
    assert_eq!(kinds(&p), [AnomalyKind::ConvertedField]);
    chunk(&mut p, r#"{"choices":[{"message":{"content":"again"}}]}"#).unwrap();
    assert_eq!(p.anomalies().all()[0].count, 2, "one entry, counted");
}

#[test]
fn content_parts_of_the_wrong_shape_are_reported() {
    let mut p = Processor::default();
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
    let mut p = Processor::default();
    chunk(&mut p, r#"{"object":5,"message":{"a":1},"choices":[{"message":7}]}"#).unwrap();
    let fields: Vec<_> = p.anomalies().all().iter().map(|a| a.field).collect();
    assert_eq!(fields, [Some("object"), Some("message"), Some("choices[0].message")]);
}

/// What a processor holds after a step, as text to compare.
fn snapshot(p: &Processor) -> String {
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
fn process_text_does_what_process_chunk_does_with_a_text_chunk() {
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
            let (mut chunks, mut texts) = (Processor::new(options), Processor::new(options));
            for round in 0..2 {
                for step in &steps {
                    let (a, b) = match step {
                        Ok(json) => {
                            let c = Chunk::from_json(json).expect("test JSON");
                            (chunks.process_chunk(&c).map(|_| ()), texts.process_chunk(&c).map(|_| ()))
                        }
                        Err(text) => (
                            chunks.process_chunk(&Chunk::text(text)).map(|_| ()),
                            texts.process_text(text).map(|_| ()),
                        ),
                    };
                    assert_eq!(format!("{a:?}"), format!("{b:?}"), "{step:?}");
                    assert_eq!(snapshot(&chunks), snapshot(&texts), "{step:?} (round {round}, {options:?})");
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
    let mut p = Processor::default();
    let err = p.decode(b"event: error \ndata: overloaded\n\n").map(|_| ()).expect_err("an error event");
    assert!(matches!(err, Error::Provider { ref message, .. } if message == "overloaded"), "{err:?}");
}

#[test]
fn a_stream_without_one_chat_chunk_is_reported_at_finish_and_only_then() {
    let responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n\
                     event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n";
    let anthropic = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n";
    for stream in [responses, anthropic, ""] {
        let mut p = Processor::default();
        p.decode(stream.as_bytes()).expect("decoded");
        assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol), "{stream:?}: not before finish");
        p.finish().expect("finished");
        assert_eq!(kinds(&p).last(), Some(&AnomalyKind::WrongProtocol), "{stream:?}");
        assert!(p.anomalies().all().last().is_some_and(|a| a.message.contains("chat completion chunk")));
    }
    // One chunk is enough: a text delta (fast paths too), a usage chunk with
    // no choice, a provider's error.
    for stream in [&format!("data: {A}\n\n"), "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"] {
        let mut p = Processor::default();
        p.decode(stream.as_bytes()).expect("decoded");
        p.finish().expect("finished");
        assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol), "{stream}");
    }
    let mut p = Processor::default();
    p.process_chunk(&Chunk::from_json(r#"{"choices":[],"usage":{"prompt_tokens":3}}"#).expect("JSON"))
        .expect("read");
    let _ = p.decode(b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
    p.finish().expect("finished");
    assert!(!kinds(&p).contains(&AnomalyKind::WrongProtocol));
    let mut p = Processor::default();
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
        let mut p = Processor::default();
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
    let mut p = Processor::default();
    p.decode(format!("data: {A}\n\n").as_bytes()).expect("decoded");
    p.finish().expect("finished");
    p.finish().expect("finished again");
    assert!(p.output().is_empty());
    assert_eq!(kinds(&p), [], "finish twice reports nothing");
    p.decode(format!("data: {B}\n\n").as_bytes()).expect("read as a new stream");
    assert_eq!(completed(&p), ["b"]);
    assert_eq!(kinds(&p), [AnomalyKind::InputAfterFinish]);
    p.finish().expect("finished");
    let chunk = Chunk::from_json(A).expect("JSON");
    p.process_chunk(&chunk).expect("the Hash path too");
    assert_eq!(kinds(&p), [AnomalyKind::InputAfterFinish], "the same anomaly again is counted");
    assert_eq!(p.anomalies().all()[0].count, 2);
    assert_eq!(completed(&p), ["a"]);
}
