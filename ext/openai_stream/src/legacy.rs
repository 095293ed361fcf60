//! What the legacy Discourse processor (2026.10 and before) would have done
//! with a stream: it keeps one tool, reads only `tool_calls[0]` of each
//! chunk, and drops the rest. Used by the audit to count the calls a site
//! already lost. Only the tool-call bookkeeping is modelled, from the
//! behaviour described in discourse-contract.md; nothing else.

use crate::chunk::{Chunk, Field, Id, List, Text};

/// The calls the legacy processor would have run, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LegacyOutcome {
    /// Ids of the calls it would have emitted.
    pub emitted: Vec<String>,
}

/// Follows a stream chunk by chunk like the legacy processor.
#[derive(Debug, Default)]
pub struct LegacySimulator {
    /// The one tool it tracks: its id.
    tool: Option<String>,
    outcome: LegacyOutcome,
}

impl LegacySimulator {
    pub fn observe(&mut self, chunk: &Chunk) {
        let Some(choice) = chunk.choices.get().and_then(|List(list)| list.first()).and_then(Field::get)
        else {
            return;
        };
        let delta = choice.delta.get();
        let tool_calls = delta.and_then(|d| d.tool_calls.get()).map(|List(l)| l.as_slice());
        let finish_reason = matches!(&choice.finish_reason, Field::Value(Text(_)));
        let empty_list = matches!(tool_calls, Some([]));
        let finished = finish_reason || empty_list;
        match tool_calls {
            Some([first, ..]) => {
                let first = first.get();
                let id = first.and_then(|t| match &t.id {
                    Field::Value(Id(id)) if !id.is_empty() => Some(id.to_string()),
                    _ => None,
                });
                let name = first
                    .and_then(|t| t.function.get())
                    .and_then(|f| f.name.get())
                    .filter(|Text(n)| !n.trim().is_empty());
                if let (Some(id), Some(current)) = (&id, &self.tool) {
                    if id != current {
                        self.emit();
                    }
                }
                if let (Some(id), Some(_)) = (id, name) {
                    self.tool = Some(id);
                }
            }
            _ if finished => self.emit(),
            _ => {}
        }
    }

    /// End of stream.
    pub fn finish(&mut self) -> LegacyOutcome {
        self.emit();
        std::mem::take(&mut self.outcome)
    }

    fn emit(&mut self) {
        if let Some(id) = self.tool.take() {
            self.outcome.emitted.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str]) -> Vec<String> {
        let mut sim = LegacySimulator::default();
        for c in chunks {
            sim.observe(&Chunk::from_json(c).unwrap());
        }
        sim.finish().emitted
    }

    #[test]
    fn keeps_only_the_first_call_of_a_chunk() {
        let chunk = r#"{"choices":[{"delta":{"tool_calls":[
            {"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},
            {"index":1,"id":"b","function":{"name":"f","arguments":"{}"}},
            {"index":2,"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(run(&[chunk]), ["a"]);
    }

    #[test]
    fn sequential_calls_in_separate_chunks_all_run() {
        let a = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#;
        let b = r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#;
        let end = r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(run(&[a, b, end]), ["a", "b"]);
    }

    #[test]
    fn interleaved_calls_after_simultaneous_headers_lose_all_but_the_first() {
        let headers = r#"{"choices":[{"delta":{"tool_calls":[
            {"index":0,"id":"a","function":{"name":"f","arguments":""}},
            {"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}"#;
        let frag = r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}"#;
        assert_eq!(run(&[headers, frag]), ["a"]);
    }

    #[test]
    fn an_empty_tool_calls_list_emits_the_tool() {
        let a = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#;
        let noise = r#"{"choices":[{"delta":{"content":"x","tool_calls":[]}}]}"#;
        let mut sim = LegacySimulator::default();
        sim.observe(&Chunk::from_json(a).unwrap());
        sim.observe(&Chunk::from_json(noise).unwrap());
        assert_eq!(sim.outcome.emitted, ["a"]);
    }
}
