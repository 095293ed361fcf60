//! The template of a stream's plain deltas: the last text or arguments delta
//! with its one varying string cut out.
//!
//! Consecutive events of a stream differ, nearly always, in one string: the
//! `content` of a text delta, or the `arguments` fragment of a tool-call
//! delta. Everything before that string (the envelope, `choices`, the
//! index...) and everything after it (`logprobs`, `finish_reason: null`, the
//! closing brackets) repeats byte for byte. So when a text starts with the
//! template's prefix and ends with its suffix, and the bytes between are one
//! JSON string that ends exactly where the suffix starts, a JSON reader
//! would reach that string in the same state as last time, read it, and
//! continue over the same bytes to the same end: the chunk is the template's
//! chunk with the new string. Reading it costs two comparisons and the scan
//! of that string, and no chunk is built: the processor applies the delta
//! (see [`Plain`]).
//!
//! Templates are made only from chunks that are nothing but that delta
//! (every other field absent or null, an `object` that is not `"error"`, one
//! choice, no finish_reason) and whose fields beside the varying string can
//! be rebuilt from the prefix (texts borrowed from it, an integer index),
//! with exactly one varying string read in the whole chunk (so duplicate
//! keys never make one). Without templates the raw path misses its targets
//! (docs/decisions.md).

use std::borrow::Cow;

use super::{Absent, EnvelopeFields, Plain, PlainCall, TextAt, Varying};
use crate::calls::Arguments;
use crate::chat::{Chunk, Content, Function, ToolCallDelta};
use crate::lenient::{Field, Id, Int, Text};

/// Longest prefix, and longest suffix, a template keeps.
const MAX_PART: usize = 2048;

#[derive(Debug)]
pub(super) struct Template {
    /// The chunk's text with its varying string cut out.
    cut: crate::scan::Template<()>,
    /// The varying string is `choices[0].delta.tool_calls[0].function.arguments`
    /// of this call (else `choices[0].delta.content`).
    call: Option<CallAt>,
}

/// Where the fields of the varying call beside its arguments are.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CallAt {
    index: Field<Int>,
    id: TextAt,
    name: TextAt,
    function_id: TextAt,
}

impl Template {
    /// The template of a chunk just read from `text`, when it has one.
    pub(super) fn of(text: &str, c: &Chunk<'_>, varying: Varying) -> Option<Template> {
        let Varying { count, start, end } = varying;
        if count != 1 || start > MAX_PART || text.len().checked_sub(end)? > MAX_PART || start > end {
            return None;
        }
        let at = |field: &Field<Id<'_>>| TextAt::of(text, start, field, |id| &id.0);
        let Field::Value(choices) = &c.choices else { return None };
        let [Field::Value(choice)] = choices.as_slice() else { return None };
        let (Field::Value(delta), Field::Missing) = (&choice.delta, &choice.message) else { return None };
        // What the next request carries back is read from whole chunks only.
        Absent::of(&delta.reasoning_content)
            .and(Absent::of(&delta.reasoning))
            .and(Absent::of(&delta.reasoning_details))
            .and(Absent::of(&delta.refusal))?;
        let call = match (&delta.content, &delta.tool_calls) {
            (Field::Value(Content::Text(_)), tool_calls) => {
                Absent::of(tool_calls)?;
                None
            }
            (content, Field::Value(calls)) => {
                let [Field::Value(call)] = calls.as_slice() else { return None };
                let Field::Value(function) = &call.function else { return None };
                if !matches!(function.arguments, Field::Value(Arguments::Text(_)))
                    || matches!(call.index, Field::Converted(..) | Field::Wrong(_))
                    || Absent::of(&call.extra_content).is_none()
                {
                    return None;
                }
                Absent::of(content)?;
                Some(CallAt {
                    index: call.index.clone(),
                    id: at(&call.id)?,
                    name: TextAt::of(text, start, &function.name, |t| &t.0)?,
                    function_id: at(&function.id)?,
                })
            }
            _ => return None,
        };
        // Every other field is absent or null (or an `object`); vLLM's
        // `object: "error"` makes the chunk more than its delta.
        let envelope = EnvelopeFields::before(text, start, c)?;
        if matches!(envelope.object.get(text, Text), Field::Value(Text(o)) if o == "error") {
            return None;
        }
        Absent::of(&choice.finish_reason)
            .and(Absent::of(&choice.native_finish_reason))
            .and(Absent::of(&choice.error))
            .and(Absent::of(&choice.usage))?;
        // The string with its quotes.
        Some(Template {
            cut: crate::scan::Template::cut(text, &[(start.checked_sub(1)?, end + 1, ())])?,
            call,
        })
    }

    /// The bytes as this template with another string: the chunk is
    /// nothing but one delta, whose text or one tool call the processor
    /// applies as it would the chunk, without the chunk being built.
    pub(super) fn plain<'a>(&self, bytes: &'a [u8]) -> Option<Plain<'a>> {
        let mut value = Cow::Borrowed("");
        let text = self.cut.read(bytes, |s, ()| {
            value = s.string()?;
            Some(())
        })?;
        Some(match &self.call {
            None => Plain::Text(value),
            Some(call) => Plain::Call(PlainCall { text, arguments: value, call: call.clone() }),
        })
    }
}

impl CallAt {
    /// The call with these fields, read from `text`, and `arguments`.
    #[inline(always)]
    fn delta<'a>(&self, text: &'a str, arguments: Cow<'a, str>) -> ToolCallDelta<'a> {
        let function = Function {
            name: self.name.get(text, Text),
            arguments: Field::Value(Arguments::Text(arguments)),
            id: self.function_id.get(text, Id),
        };
        ToolCallDelta {
            index: self.index.clone(),
            id: self.id.get(text, Id),
            function: Field::Value(function),
            extra_content: Field::Missing,
        }
    }
}

impl PlainCall<'_> {
    /// Runs `f` with the one element of `tool_calls`.
    #[inline(always)]
    pub fn with_delta<R>(&self, f: impl FnOnce(&ToolCallDelta<'_>) -> R) -> R {
        let delta = self.call.delta(self.text, Cow::Borrowed(&self.arguments));
        let result = f(&delta);
        // Every text of it is borrowed (from the payload, or from the
        // arguments string kept here) and it holds no list: it owns
        // nothing, and forgetting it leaks nothing. Its drop glue (a check
        // of every field) was a fortieth of an arguments event.
        std::mem::forget(delta);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde(text: &str) -> Chunk<'_> {
        Chunk::from_json(text).expect("valid JSON")
    }

    /// The template `first` leaves, through a real scan.
    fn template(first: &str) -> Option<Template> {
        let mut memo = super::super::ScanMemo::default();
        assert!(super::super::read(first, &mut Chunk::default(), &mut memo), "scanned {first}");
        memo.template
    }

    /// Whether `next` is read through the template of `first`; when it is,
    /// the text or call read is serde's of `next` (that the chunk holds
    /// nothing else the processor reads is checked in `tests/scan.rs`).
    fn through(first: &str, next: &str) -> bool {
        let Some(plain) = template(first).and_then(|t| t.plain(next.as_bytes())) else { return false };
        let chunk = serde(next);
        let choice = chunk.choices.get().and_then(|c| c.first()).and_then(Field::get);
        let delta = choice.and_then(|c| c.delta.get()).expect("a delta");
        match plain {
            Plain::Text(text) => assert_eq!(delta.content, Field::Value(Content::Text(text))),
            Plain::Call(call) => call.with_delta(|d| {
                assert_eq!(delta.tool_calls.get().map(|l| l.as_slice()), Some(&[Field::Value(d.clone())][..]))
            }),
        }
        true
    }

    const TEXT: &str = r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]}"#;
    const ARGS: &str = r#"{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","function":{"name":"f","arguments":"{\"a"}}]},"finish_reason":null}]}"#;

    #[test]
    fn the_next_text_delta_is_read_from_the_template() {
        for value in ["lo", "", " ", "\\\"quoted\\\"", "caf\u{e9} \\u00e9 \\n", "\\\\"] {
            let next = TEXT.replace("Hel", value);
            assert!(through(TEXT, &next), "{next}");
        }
    }

    #[test]
    fn the_next_arguments_fragment_is_read_from_the_template() {
        for value in ["\\\":1}", "x", "", "\\u007b"] {
            let next = ARGS.replace("{\\\"a", value);
            assert!(through(ARGS, &next), "{next}");
        }
    }

    #[test]
    fn a_string_that_ends_before_the_suffix_is_not_the_template() {
        // Same prefix and suffix, but the bytes between are not one string.
        let next = TEXT.replace("Hel", r#"a","content":"b"#);
        assert!(!through(TEXT, &next));
        let next = TEXT.replace("Hel", r#"a"},"delta":{"content":"b"#);
        assert!(!through(TEXT, &next));
        // An escape left open, a control character, a surrogate pair.
        for value in ["\\", "a\u{1}b", "\\ud83d\\ude00"] {
            let next = TEXT.replace("Hel", value);
            assert!(!through(TEXT, &next), "{next}");
        }
    }

    #[test]
    fn other_bytes_before_or_after_are_not_the_template() {
        let finished = TEXT.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#);
        assert!(!through(TEXT, &finished));
        let other_index = ARGS.replace(r#""index":1"#, r#""index":2"#);
        assert!(!through(ARGS, &other_index));
        assert!(!through(TEXT, "{}"));
        assert!(!through(TEXT, ""));
    }

    #[test]
    fn chunks_with_two_varying_strings_or_late_fields_make_no_template() {
        let both = r#"{"choices":[{"delta":{"content":"a","tool_calls":[{"index":0,"function":{"arguments":"x"}}]}}]}"#;
        assert!(template(both).is_none());
        let twice = r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#;
        assert!(template(twice).is_none());
        // The id comes after the varying string: it could not be rebuilt
        // from the prefix.
        let late_id =
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"x"},"id":"call_9"}]}}]}"#;
        assert!(template(late_id).is_none());
        let usage = r#"{"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}"#;
        assert!(template(usage).is_none());
        let two_calls = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"x"}},{"index":1}]}}]}"#;
        assert!(template(two_calls).is_none());
        let escaped_id =
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"c\u0031","function":{"arguments":"x"}}]}}]}"#;
        assert!(template(escaped_id).is_none());
        // A chunk that is more than its delta makes none either.
        for more in [
            TEXT.replace("chat.completion.chunk", "error"),
            TEXT.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
            TEXT.replace(r#""logprobs":null"#, r#""usage":{}"#),
            TEXT.replace(r#""logprobs":null"#, r#""native_finish_reason":"STOP""#),
            ARGS.replace(r#""tool_calls""#, r#""content":"x","tool_calls""#),
        ] {
            assert!(template(&more).is_none(), "{more}");
        }
    }

    #[test]
    fn fields_in_the_prefix_are_rebuilt() {
        let first = r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","id":"f1","arguments":"{"}}]},"finish_reason":null,"error":null}],"usage":null,"x_groq":null,"error":null}"#;
        let next = first.replace(r#""arguments":"{""#, r#""arguments":"}""#);
        assert!(through(first, &next));
    }
}
