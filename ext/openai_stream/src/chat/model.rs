//! The chat chunk model: a typed, lenient view of one chat completion chunk
//! (or a non-streamed response), read with serde from JSON bytes or,
//! through the binding, from a Ruby Hash, and by the scanner (`scan/`) on
//! the raw path. Only the fields the processor uses are read; every other
//! key is skipped without being built.

use std::borrow::Cow;

use serde::de::{MapAccess, SeqAccess};

use crate::calls::Arguments;
use crate::lenient::{lenient_struct, Any, Field, Id, Int, Lenient, List, ReadsOf, Text};
use crate::usage::Usage;

lenient_struct! {
    /// One chunk (`chat.completion.chunk`) or a whole non-streamed response.
    pub struct Chunk<'a> {
        "choices" => choices: Field<List<Choice<'a>>>,
        "usage" => usage: Field<Usage>,
        "x_groq" => x_groq: Field<XGroq>,
        /// In-band error (`{"error": {...}}`, OpenAI, OpenRouter, LiteLLM).
        "error" => error: Field<Any>,
        /// `"error"` for vLLM's in-band errors.
        "object" => object: Field<Text<'a>>,
        /// vLLM's error message (with `object: "error"`).
        "message" => message: Field<Text<'a>>,
    }

    pub struct Choice<'a> {
        "delta" => delta: Field<Delta<'a>>,
        /// The non-streamed response's message; same shape as a delta.
        "message" => message: Field<Delta<'a>>,
        "finish_reason" => finish_reason: Field<Text<'a>>,
        /// OpenRouter's error object next to `finish_reason: "error"`.
        "error" => error: Field<Any>,
        /// Usage inside the choice (Moonshot Kimi, on the finish chunk).
        "usage" => usage: Field<Usage>,
        /// OpenRouter: the upstream's own reason (Gemini's
        /// `MALFORMED_FUNCTION_CALL`); read when `finish_reason` is `"error"`.
        "native_finish_reason" => native_finish_reason: Field<Text<'a>>,
    }

    pub struct Delta<'a> {
        "content" => content: Field<Content<'a>>,
        "tool_calls" => tool_calls: Field<List<ToolCallDelta<'a>>>,
        /// Reasoning text (DeepSeek, Kimi, z.ai, vLLM...), read for the
        /// round trip (rule 77).
        "reasoning_content" => reasoning_content: Field<Text<'a>>,
        /// The same, as OpenRouter, Ollama and Groq name it (rule 77).
        "reasoning" => reasoning: Field<Text<'a>>,
        /// OpenRouter's typed reasoning fragments (rule 78).
        "reasoning_details" => reasoning_details: Field<Any>,
        /// The model's refusal (OpenAI, Azure: rule 81).
        "refusal" => refusal: Field<Text<'a>>,
    }

    pub struct ToolCallDelta<'a> {
        "index" => index: Field<Int>,
        "id" => id: Field<Id<'a>>,
        "function" => function: Field<Function<'a>>,
        /// What the call must carry back (Gemini's thought signature, rule 79).
        "extra_content" => extra_content: Field<Any>,
    }

    pub struct Function<'a> {
        "name" => name: Field<Text<'a>>,
        "arguments" => arguments: Field<Arguments<'a>>,
        /// llama.cpp before mid-2025 put the id here.
        "id" => id: Field<Id<'a>>,
    }

    /// Groq's `x_groq` block; its `usage` arrives on the finish chunk.
    pub struct XGroq {
        "usage" => usage: Field<Usage>,
    }

    /// One typed part of an array `content`.
    pub struct ContentPart<'a> {
        "type" => kind: Field<Text<'a>>,
        "text" => text: Field<Text<'a>>,
        /// A `thinking` part's reasoning: Mistral's list of text parts.
        "thinking" => thinking: Field<Any>,
    }
}

/// `content`: a string, or an array of typed parts (Mistral reasoning models).
#[derive(Debug, Clone, PartialEq)]
pub enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Field<ContentPart<'a>>>),
}

impl ReadsOf for Content<'_> {}
impl ReadsOf for Arguments<'_> {}

impl<'de> Lenient<'de> for Content<'de> {
    fn from_str(v: Cow<'de, str>) -> Field<Self> {
        Field::Value(Content::Text(v))
    }
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Field<Self>, A::Error> {
        Ok(List::<ContentPart<'de>>::from_seq(seq)?.map(|parts| Content::Parts(parts.into_vec())))
    }
}

/// `function.arguments`: JSON text (the reference shape) or, from TGI and
/// some proxies, the parameters object itself.
impl<'de> Lenient<'de> for Arguments<'de> {
    fn from_str(v: Cow<'de, str>) -> Field<Self> {
        Field::Value(Arguments::Text(v))
    }
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Field<Self>, A::Error> {
        Ok(Field::Value(Arguments::Object(Any::map(map)?)))
    }
}

impl<'a> Chunk<'a> {
    /// None of a chunk's fields: an object of another kind.
    pub fn is_foreign(&self) -> bool {
        matches!(self.choices, Field::Missing)
            && matches!(self.usage, Field::Missing)
            && matches!(self.x_groq, Field::Missing)
            && matches!(self.error, Field::Missing)
            && matches!(self.object, Field::Missing)
            && matches!(self.message, Field::Missing)
    }

    /// Reads a chunk from JSON text. Errors are serde_json's (syntax, end of
    /// input, recursion limit); type mismatches are never errors.
    pub fn from_json(text: &'a str) -> Result<Chunk<'a>, serde_json::Error> {
        let field: Field<Chunk<'a>> = serde_json::from_str(text)?;
        Ok(Chunk::from_field(field))
    }

    /// A chunk from a lenient top-level field: anything that is not an
    /// object is an empty chunk (the caller reports it).
    pub fn from_field(field: Field<Chunk<'a>>) -> Chunk<'a> {
        match field {
            Field::Value(c) | Field::Converted(c, _) => c,
            _ => Chunk::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lenient::Kind;

    #[test]
    fn reads_the_reference_shape_and_skips_unknown_fields() {
        let c = Chunk::from_json(
            r#"{"id":"x","object":"chat.completion.chunk","obfuscation":"zz","p":"abc",
               "choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
               "function":{"name":"echo","arguments":""}}]},"finish_reason":null}],"usage":null}"#,
        )
        .unwrap();
        let choices = c.choices.get().unwrap();
        let delta = choices[0].get().unwrap().delta.get().unwrap();
        let call = delta.tool_calls.get().unwrap()[0].get().unwrap();
        assert_eq!(call.index, Field::Value(Int(0)));
        assert_eq!(call.id, Field::Value(Id("call_1".into())));
        let f = call.function.get().unwrap();
        assert_eq!(f.name, Field::Value(Text("echo".into())));
        assert_eq!(f.arguments, Field::Value(Arguments::Text("".into())));
        assert_eq!(choices[0].get().unwrap().finish_reason, Field::Null);
        assert_eq!(c.usage, Field::Null);
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let text = r#"{"choices":[{"delta":{"content":"hello"}}]}"#;
        let c = Chunk::from_json(text).unwrap();
        let choice = c.choices.get().unwrap()[0].get().unwrap().clone();
        match choice.delta.get().unwrap().content.get().unwrap() {
            Content::Text(Cow::Borrowed(s)) => assert_eq!(*s, "hello"),
            other => panic!("expected a borrowed string, got {other:?}"),
        }
    }

    #[test]
    fn wrong_types_are_recorded_not_fatal() {
        let c = Chunk::from_json(
            r#"{"choices":[{"delta":{"content":5,"tool_calls":[7,{"index":"1","id":42,
               "function":{"name":["x"],"arguments":5}}]}}],"usage":"lots"}"#,
        )
        .unwrap();
        let choice = c.choices.get().unwrap()[0].get().unwrap().clone();
        let delta = choice.delta.get().unwrap().clone();
        assert_eq!(delta.content, Field::Wrong(Kind::Integer));
        let calls = delta.tool_calls.get().unwrap();
        assert_eq!(calls[0], Field::Wrong(Kind::Integer));
        let call = calls[1].get().unwrap();
        assert_eq!(call.index, Field::Converted(Int(1), Kind::String));
        assert_eq!(call.id, Field::Converted(Id("42".into()), Kind::Integer));
        let f = call.function.get().unwrap();
        assert_eq!(f.name, Field::Wrong(Kind::Array));
        assert_eq!(f.arguments, Field::Wrong(Kind::Integer));
        assert_eq!(c.usage, Field::Wrong(Kind::String));
    }

    #[test]
    fn duplicate_keys_last_wins() {
        let c = Chunk::from_json(r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#).unwrap();
        let choice = c.choices.get().unwrap()[0].get().unwrap().clone();
        assert_eq!(choice.delta.get().unwrap().content, Field::Value(Content::Text("b".into())));
    }

    #[test]
    fn arguments_may_be_an_object_and_content_parts() {
        let c = Chunk::from_json(
            r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[]},{"type":"text","text":"3"}],
               "tool_calls":[{"function":{"name":"f","arguments":{"a":[1,{"b":null}]}}}]}}]}"#,
        )
        .unwrap();
        let choice = c.choices.get().unwrap()[0].get().unwrap().clone();
        let delta = choice.delta.get().unwrap().clone();
        match delta.content.get().unwrap() {
            Content::Parts(parts) => {
                assert_eq!(parts.len(), 2);
                assert_eq!(parts[1].get().unwrap().text, Field::Value(Text("3".into())));
            }
            other => panic!("expected parts, got {other:?}"),
        }
        let call = delta.tool_calls.get().unwrap()[0].get().unwrap().clone();
        match call.function.get().unwrap().arguments.get().unwrap() {
            Arguments::Object(v) => assert_eq!(v.to_json(), r#"{"a":[1,{"b":null}]}"#),
            other => panic!("expected an object, got {other:?}"),
        }
    }

    #[test]
    fn a_non_object_chunk_is_empty() {
        let field: Field<Chunk> = serde_json::from_str("[1,2]").unwrap();
        assert_eq!(field, Field::Wrong(Kind::Array));
        assert_eq!(Chunk::from_field(field), Chunk::default());
    }

    #[test]
    fn syntax_errors_and_depth_are_serde_errors() {
        assert!(Chunk::from_json(r#"{"choices": [}"#).is_err());
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let err = Chunk::from_json(&format!(r#"{{"error": {deep}}}"#)).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
        // Under a key no struct reads too: JSON.parse refuses the line the
        // same way, wherever the nesting is.
        let err = Chunk::from_json(&format!(r#"{{"choices": [], "created": {deep}}}"#)).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }
}
