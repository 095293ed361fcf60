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
//! of that string.
//!
//! Templates are made only from chunks whose every field can be rebuilt
//! from the prefix (texts borrowed from it, absent or null fields, an
//! integer index), with exactly one varying string read in the whole chunk
//! (so duplicate keys never make one).
//!
//! What it pays (raw path over the Ruby floor's throughput, text_2k /
//! tools_4k / tools_4k_partial, one run each way with templates switched off
//! by a temporary patch, 2026-12-04): on Ruby 3.4 + YJIT 12.8x / 24.5x /
//! 13.6x with templates, 8.4x / 10.1x / 7.3x without; on 3.1 23.9x / 34.2x /
//! 20.7x against 11.9x / 14.4x / 11.2x. Without it the raw path misses issue
//! 8's targets (10x / 15x / 10x) on the Ruby Discourse runs.

use std::borrow::Cow;

use super::{Absent, EnvelopeFields, Plain, PlainCall, Scanner, TextAt, Varying};
use crate::calls::Arguments;
use crate::chat::{Choice, Chunk, Content, Delta, Function, ToolCallDelta};
use crate::lenient::{Field, Id, Int, List, Text};

/// Longest prefix, and longest suffix, a template keeps.
const MAX_PART: usize = 2048;

#[derive(Debug)]
pub(super) struct Template {
    /// The text before the varying string, its opening quote included.
    /// (Both parts are `String`s: each is valid UTF-8 on its own, which
    /// [`Template::value`] relies on.)
    prefix: String,
    /// The text from the varying string's closing quote to the end.
    suffix: String,
    envelope: EnvelopeFields,
    finish_reason: Absent,
    choice_error: Absent,
    choice_usage: Absent,
    native_finish_reason: Absent,
    slot: Slot,
    /// Nothing but the delta counts (see [`Template::plain`]).
    plain: bool,
}

/// What the varying string is, and the fields beside it.
#[derive(Debug)]
enum Slot {
    /// `choices[0].delta.content`.
    Content { tool_calls: Absent },
    /// `choices[0].delta.tool_calls[0].function.arguments`.
    Arguments { content: Absent, call: CallAt },
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
        let slot = match (&delta.content, &delta.tool_calls) {
            (Field::Value(Content::Text(_)), tool_calls) => {
                Slot::Content { tool_calls: Absent::of(tool_calls)? }
            }
            (content, Field::Value(calls)) => {
                let [Field::Value(call)] = calls.as_slice() else { return None };
                let Field::Value(function) = &call.function else { return None };
                if !matches!(function.arguments, Field::Value(Arguments::Text(_)))
                    || matches!(call.index, Field::Converted(..) | Field::Wrong(_))
                {
                    return None;
                }
                let call = CallAt {
                    index: call.index.clone(),
                    id: at(&call.id)?,
                    name: TextAt::of(text, start, &function.name, |t| &t.0)?,
                    function_id: at(&function.id)?,
                };
                Slot::Arguments { content: Absent::of(content)?, call }
            }
            _ => return None,
        };
        let envelope = EnvelopeFields::before(text, start, c)?;
        // Every other field is absent or null (or an `object`); only vLLM's
        // `object: "error"` makes the chunk more than its delta.
        let plain = !matches!(envelope.object.get(text), Field::Value(Text(o)) if o == "error");
        Some(Template {
            prefix: text.get(..start)?.to_owned(),
            suffix: text.get(end..)?.to_owned(),
            envelope,
            finish_reason: Absent::of(&choice.finish_reason)?,
            choice_error: Absent::of(&choice.error)?,
            choice_usage: Absent::of(&choice.usage)?,
            native_finish_reason: Absent::of(&choice.native_finish_reason)?,
            slot,
            plain,
        })
    }

    /// Reads `text` into `out` (a default chunk) when it is this template
    /// with another string; false (and `out` untouched) when it is not.
    pub(super) fn read<'a>(&self, text: &'a str, out: &mut Chunk<'a>) -> bool {
        let Some((text, value)) = self.value(text.as_bytes()) else { return false };
        self.fill(text, value, out);
        true
    }

    /// The bytes as this template with another string: the bytes as text,
    /// and the string. Only the bytes between prefix and suffix are checked
    /// for UTF-8: the prefix and suffix are text, so the whole is text when
    /// they are (and the standard check of a whole payload was a tenth of
    /// an event).
    pub(super) fn value<'a>(&self, bytes: &'a [u8]) -> Option<(&'a str, Cow<'a, str>)> {
        let value_end = bytes.len().checked_sub(self.suffix.len())?;
        if value_end < self.prefix.len()
            || !bytes.starts_with(self.prefix.as_bytes())
            || !bytes.ends_with(self.suffix.as_bytes())
        {
            return None;
        }
        crate::utf8::text(&bytes[self.prefix.len()..value_end])?;
        // SAFETY: the bytes are the prefix (a String), UTF-8 text (just
        // checked) and the suffix (a String); each is valid UTF-8 on its
        // own, so their concatenation is.
        let text = unsafe { std::str::from_utf8_unchecked(bytes) };
        let mut s = Scanner::new(text);
        s.pos = self.prefix.len();
        let value = s.string_body()?;
        // The string must end where the suffix starts (its closing quote is
        // the suffix's first byte), not earlier.
        if s.pos != value_end + 1 {
            return None;
        }
        Some((text, value))
    }

    /// The bytes as this template with another string, when the chunk is
    /// nothing but its delta: every other field it has is absent or null
    /// (`object` aside, which is not `"error"`), one choice, no
    /// finish_reason, and either text content and no tool calls or one
    /// tool call and no content. The processor does with such a chunk
    /// exactly what it does with that delta's text or that one call,
    /// without the chunk being built.
    pub(super) fn plain<'a>(&self, bytes: &'a [u8]) -> Option<Plain<'a>> {
        if !self.plain {
            return None;
        }
        let (text, value) = self.value(bytes)?;
        Some(match &self.slot {
            Slot::Content { .. } => Plain::Text(value),
            Slot::Arguments { call, .. } => {
                Plain::Call(PlainCall { text, arguments: value, call: call.clone() })
            }
        })
    }

    fn fill<'a>(&self, text: &'a str, value: Cow<'a, str>, out: &mut Chunk<'a>) {
        let mut delta = Delta::default();
        match &self.slot {
            Slot::Content { tool_calls } => {
                delta.content = Field::Value(Content::Text(value));
                delta.tool_calls = tool_calls.get();
            }
            Slot::Arguments { content, call } => {
                delta.content = content.get();
                delta.tool_calls = Field::Value(List::one(Field::Value(call.delta(text, value))));
            }
        }
        let choice = Choice {
            delta: Field::Value(delta),
            message: Field::Missing,
            finish_reason: self.finish_reason.get(),
            error: self.choice_error.get(),
            usage: self.choice_usage.get(),
            native_finish_reason: self.native_finish_reason.get(),
        };
        out.choices = Field::Value(List::one(Field::Value(choice)));
        self.envelope.apply(text, out);
    }
}

impl CallAt {
    /// The call with these fields, read from `text`, and `arguments`.
    #[inline(always)]
    fn delta<'a>(&self, text: &'a str, arguments: Cow<'a, str>) -> ToolCallDelta<'a> {
        let function = Function {
            name: self.name.get(text),
            arguments: Field::Value(Arguments::Text(arguments)),
            id: id_field(self.function_id, text),
        };
        ToolCallDelta {
            index: self.index.clone(),
            id: id_field(self.id, text),
            function: Field::Value(function),
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

fn id_field(at: TextAt, text: &str) -> Field<Id<'_>> {
    match at.get(text) {
        Field::Value(Text(t)) => Field::Value(Id(t)),
        Field::Null => Field::Null,
        _ => Field::Missing,
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

    /// `next` read through the template of `first`: Some(chunk) when the
    /// template applied.
    fn through<'a>(first: &str, next: &'a str) -> Option<Chunk<'a>> {
        let t = template(first)?;
        let mut out = Chunk::default();
        t.read(next, &mut out).then_some(out)
    }

    const TEXT: &str = r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]}"#;
    const ARGS: &str = r#"{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","function":{"name":"f","arguments":"{\"a"}}]},"finish_reason":null}]}"#;

    #[test]
    fn the_next_text_delta_is_read_from_the_template() {
        for value in ["lo", "", " ", "\\\"quoted\\\"", "caf\u{e9} \\u00e9 \\n", "\\\\"] {
            let next = TEXT.replace("Hel", value);
            assert_eq!(through(TEXT, &next), Some(serde(&next)), "{next}");
        }
    }

    #[test]
    fn the_next_arguments_fragment_is_read_from_the_template() {
        for value in ["\\\":1}", "x", "", "\\u007b"] {
            let next = ARGS.replace("{\\\"a", value);
            assert_eq!(through(ARGS, &next), Some(serde(&next)), "{next}");
        }
    }

    #[test]
    fn a_string_that_ends_before_the_suffix_is_not_the_template() {
        // Same prefix and suffix, but the bytes between are not one string.
        let next = TEXT.replace("Hel", r#"a","content":"b"#);
        assert_eq!(through(TEXT, &next), None);
        let next = TEXT.replace("Hel", r#"a"},"delta":{"content":"b"#);
        assert_eq!(through(TEXT, &next), None);
        // An escape left open, a control character, a surrogate pair.
        for value in ["\\", "a\u{1}b", "\\ud83d\\ude00"] {
            let next = TEXT.replace("Hel", value);
            assert_eq!(through(TEXT, &next), None, "{next}");
        }
    }

    #[test]
    fn other_bytes_before_or_after_are_not_the_template() {
        let finished = TEXT.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#);
        assert_eq!(through(TEXT, &finished), None);
        let other_index = ARGS.replace(r#""index":1"#, r#""index":2"#);
        assert_eq!(through(ARGS, &other_index), None);
        assert_eq!(through(TEXT, "{}"), None);
        assert_eq!(through(TEXT, ""), None);
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
    }

    #[test]
    fn fields_in_the_prefix_are_rebuilt() {
        let first = r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","id":"f1","arguments":"{"}}]},"finish_reason":null,"error":null}],"usage":null,"x_groq":null,"error":null}"#;
        let next = first.replace(r#""arguments":"{""#, r#""arguments":"}""#);
        assert_eq!(through(first, &next), Some(serde(&next)));
    }
}
