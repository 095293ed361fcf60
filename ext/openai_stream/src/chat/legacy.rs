//! What the legacy Discourse processor (2026.10 and before) would have done
//! with a stream: it keeps one tool, reads only `tool_calls[0]` of each
//! chunk, and drops the rest. Used by the audit to count the calls a site
//! already lost. Only the tool-call bookkeeping is modelled, from the
//! behaviour described in docs/discourse-contract.md; nothing else.
//!
//! It also raised on the way, which failed the whole request (Discourse
//! lets the exception out of `decode_chunk`): the arguments of its one tool
//! are every `tool_calls[0].function.arguments` appended as Ruby's `to_s`
//! (fragments of other calls included, when they interleave), and they are
//! parsed strictly when the tool completes. A `finish_reason` (or an empty
//! `tool_calls` list) parses them even when empty; an id change or the end
//! of the stream parses them only when not blank and leaves no buffer
//! behind, so a fragment of the same chunk fails too. Anything but a JSON
//! object fails (`parameters=` takes only a Hash). After such an error
//! nothing ran: [`LegacyOutcome::raised`] is set and `emitted` is empty.

use serde::de::IgnoredAny;

use super::{Chunk, ToolCallDelta};
use crate::calls::Arguments;
use crate::json::JsonValue;
use crate::lenient::{Field, Id, Text};

/// The calls the legacy processor would have run, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LegacyOutcome {
    /// Ids of the calls it would have emitted (none when it raised).
    pub emitted: Vec<String>,
    /// It would have raised (a `JSON::ParserError` on the arguments, or
    /// worse), failing the request.
    pub raised: bool,
}

/// Follows a stream chunk by chunk like the legacy processor.
#[derive(Debug, Default)]
pub struct LegacySimulator {
    /// The one tool it tracks: its id.
    tool: Option<String>,
    /// Its arguments buffer, as Ruby text.
    arguments: String,
    /// A non-string arguments value went into the buffer: Ruby's `to_s` of
    /// it is never JSON (an empty object aside).
    poisoned: bool,
    /// The buffer was parsed and dropped (Ruby's `nil`): appending raises.
    consumed: bool,
    outcome: LegacyOutcome,
}

impl LegacySimulator {
    pub fn observe(&mut self, chunk: &Chunk) {
        if self.outcome.raised {
            return;
        }
        let Some(choice) = chunk.choices.get().and_then(|list| list.first()).and_then(Field::get) else {
            return;
        };
        let delta = choice.delta.get();
        let tool_calls = delta.and_then(|d| d.tool_calls.get()).map(|l| l.as_slice());
        let finish_reason = matches!(&choice.finish_reason, Field::Value(Text(_)));
        let empty_list = matches!(tool_calls, Some([]));
        let finished = finish_reason || empty_list;
        match tool_calls {
            Some([Field::Wrong(_), ..]) => self.raise(), // `dig` on a non-Hash
            Some([first, ..]) => self.observe_first_call(first.get()),
            _ if finished && self.tool.is_some() => {
                if !self.parses() {
                    return self.raise();
                }
                self.emit();
            }
            _ => {}
        }
    }

    /// `tool_calls[0]` of a chunk, the one call the legacy processor read
    /// (also of a plain delta, whose chunk is not built).
    pub fn observe_first_call(&mut self, first: Option<&ToolCallDelta>) {
        if self.outcome.raised {
            return;
        }
        // Ruby's `present?` holds for any Integer, so an integer id
        // (Poolside) starts a tool there as a String id does.
        let id = first.and_then(|t| t.id.get()).filter(|Id(id)| !id.is_empty()).map(|Id(id)| id.to_string());
        let name = first
            .and_then(|t| t.function.get())
            .and_then(|f| f.name.get())
            .filter(|Text(n)| !n.trim().is_empty());
        if let (Some(id), Some(current)) = (&id, &self.tool) {
            if id != current {
                if !self.process_arguments() {
                    return self.raise();
                }
                self.emit();
            }
        }
        if let (Some(id), Some(_)) = (id, name) {
            self.tool = Some(id);
            self.arguments.clear();
            self.poisoned = false;
            self.consumed = false;
        }
        if self.consumed {
            return self.raise();
        }
        self.append(first.and_then(|t| t.function.get()).map(|f| &f.arguments));
    }

    /// End of stream.
    pub fn finish(&mut self) -> LegacyOutcome {
        if !self.outcome.raised && self.tool.is_some() {
            if self.process_arguments() {
                self.emit();
            } else {
                self.raise();
            }
        }
        std::mem::take(&mut self.outcome)
    }

    fn emit(&mut self) {
        if let Some(id) = self.tool.take() {
            self.outcome.emitted.push(id);
        }
    }

    fn raise(&mut self) {
        self.tool = None;
        self.outcome.emitted.clear();
        self.outcome.raised = true;
    }

    /// `arguments.to_s` appended to the buffer.
    fn append(&mut self, arguments: Option<&Field<Arguments>>) {
        match arguments {
            None | Some(Field::Missing | Field::Null) => {}
            Some(Field::Value(Arguments::Text(text)) | Field::Converted(Arguments::Text(text), _)) => {
                self.arguments.push_str(text);
            }
            Some(Field::Value(Arguments::Object(value)) | Field::Converted(Arguments::Object(value), _))
                if matches!(value, JsonValue::Object(pairs) if pairs.is_empty()) =>
            {
                self.arguments.push_str("{}");
            }
            Some(_) => self.poisoned = true,
        }
    }

    /// Parses a buffer that is not blank, then drops it; false if that raised.
    fn process_arguments(&mut self) -> bool {
        if self.arguments.trim().is_empty() && !self.poisoned {
            return true;
        }
        self.consumed = true;
        self.parses()
    }

    /// The buffer parses as a JSON object.
    fn parses(&self) -> bool {
        !self.poisoned
            && self.arguments.trim_start().starts_with('{')
            && serde_json::from_str::<IgnoredAny>(&self.arguments).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(chunks: &[&str]) -> LegacyOutcome {
        let mut sim = LegacySimulator::default();
        for c in chunks {
            sim.observe(&Chunk::from_json(c).unwrap());
        }
        sim.finish()
    }

    /// A chunk with one whole call; `id` is JSON (a string or a number).
    fn call(index: u32, id: &str, name: &str) -> String {
        format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{index},"id":{id},"function":{{"name":"{name}","arguments":"{{}}"}}}}]}}}}]}}"#
        )
    }

    #[test]
    fn integer_ids_start_tools_as_string_ids_do() {
        assert_eq!(outcome(&[&call(0, "7", "f"), &call(1, "8", "g"), END]).emitted, ["7", "8"]);
    }

    #[test]
    fn keeps_only_the_first_call_of_a_chunk() {
        let chunk = r#"{"choices":[{"delta":{"tool_calls":[
            {"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},
            {"index":1,"id":"b","function":{"name":"f","arguments":"{}"}},
            {"index":2,"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(outcome(&[chunk]).emitted, ["a"]);
    }

    #[test]
    fn sequential_calls_in_separate_chunks_all_run() {
        assert_eq!(outcome(&[&call(0, r#""a""#, "f"), &call(1, r#""b""#, "g"), END]).emitted, ["a", "b"]);
    }

    #[test]
    fn interleaved_calls_after_simultaneous_headers_lose_all_but_the_first() {
        let headers = r#"{"choices":[{"delta":{"tool_calls":[
            {"index":0,"id":"a","function":{"name":"f","arguments":""}},
            {"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}"#;
        let frag = r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}"#;
        assert_eq!(outcome(&[headers, frag]).emitted, ["a"]);
    }

    #[test]
    fn an_empty_tool_calls_list_emits_the_tool() {
        let noise = r#"{"choices":[{"delta":{"content":"x","tool_calls":[]}}]}"#;
        let mut sim = LegacySimulator::default();
        sim.observe(&Chunk::from_json(&call(0, r#""a""#, "f")).unwrap());
        sim.observe(&Chunk::from_json(noise).unwrap());
        assert_eq!(sim.outcome.emitted, ["a"]);
    }

    const HEADER_A: &str = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":""}}]}}]}"#;
    const END: &str = r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#;

    fn fragment(index: u32, arguments: &str) -> String {
        let arguments = serde_json::to_string(arguments).unwrap();
        format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{index},"function":{{"arguments":{arguments}}}}}]}}}}]}}"#
        )
    }

    #[test]
    fn interleaved_fragments_go_into_one_buffer_and_raise_at_the_finish() {
        let headers = r#"{"choices":[{"delta":{"tool_calls":[
            {"index":0,"id":"a","function":{"name":"f","arguments":""}},
            {"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}"#;
        let (f1, f2, f3) = (fragment(0, r#"{"q":"#), fragment(1, r#"{"u":1}"#), fragment(0, "2}"));
        let out = outcome(&[headers, &f1, &f2, &f3, END]);
        assert!(out.raised);
        assert!(out.emitted.is_empty());
    }

    #[test]
    fn object_arguments_raise() {
        let chunk = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f",
            "arguments":{"city":"Rome"}}}]}}]}"#;
        assert!(outcome(&[chunk, END]).raised);
        let empty = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f",
            "arguments":{}}}]}}]}"#;
        assert_eq!(outcome(&[empty, END]), LegacyOutcome { emitted: vec!["a".into()], raised: false });
    }

    #[test]
    fn truncated_arguments_raise_at_the_end_of_the_stream() {
        let out = outcome(&[HEADER_A, &fragment(0, r#"{"path": "/tmp/a""#)]);
        assert!(out.raised);
        assert!(out.emitted.is_empty());
    }

    #[test]
    fn empty_arguments_raise_at_a_finish_reason_but_not_at_the_end() {
        assert!(outcome(&[HEADER_A, END]).raised);
        assert_eq!(outcome(&[HEADER_A]).emitted, ["a"]);
    }

    #[test]
    fn arguments_that_are_not_an_object_raise() {
        assert!(outcome(&[HEADER_A, &fragment(0, "[1]"), END]).raised);
    }

    #[test]
    fn an_id_change_without_a_name_after_parsed_arguments_raises() {
        let changed =
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a2","function":{"arguments":""}}]}}]}"#;
        assert!(outcome(&[HEADER_A, &fragment(0, "{}"), changed, END]).raised);
    }

    #[test]
    fn good_streams_do_not_raise() {
        let out = outcome(&[HEADER_A, &fragment(0, r#"{"x": 1}"#), &call(1, r#""b""#, "g"), END]);
        assert_eq!(out, LegacyOutcome { emitted: vec!["a".into(), "b".into()], raised: false });
    }
}
