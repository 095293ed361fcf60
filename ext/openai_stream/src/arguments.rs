//! A tool call's final parameters from its raw arguments text.
//!
//! Strict JSON first; when that fails, the repairs real servers make
//! necessary (rules 20 to 23 of docs/stream-shapes.md; the repairs are
//! rule 22): a dropped leading `{` or `{"`, missing closing brackets of
//! truncated text, both, and arguments encoded twice (a JSON string holding
//! the object). Each repair is one more parse, at most three in all. Anything
//! else is an error that says what is wrong: bad arguments never silently
//! become `{}`.

use crate::json::{parse_complete, IncrementalParser, JsonValue, SyntaxError, SyntaxErrorKind};

/// A repair that made the arguments parse; its text says what was done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Repair {
    /// `{` (or `{"`, when the text starts with a key's name and its closing
    /// quote) was added at the start.
    #[error("added the missing opening brace")]
    MissingOpeningBrace,
    /// Closing brackets were added at the end.
    #[error("appended the missing closing brackets {appended:?}")]
    MissingClosingBrackets {
        /// The closers added, innermost first (e.g. `}]}`).
        appended: String,
    },
    /// Both: an opening brace at the start and closers at the end.
    #[error("added the missing opening brace and appended the missing closing brackets {appended:?}")]
    MissingOpeningAndClosing {
        /// The closers added, innermost first.
        appended: String,
    },
    /// The arguments were a JSON string whose content is the object.
    #[error("decoded arguments that were encoded twice (a JSON string)")]
    DoubleEncoded,
}

/// A tool call's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedArguments {
    /// Always a [`JsonValue::Object`].
    pub value: JsonValue,
    /// The repair that was needed, if any.
    pub repair: Option<Repair>,
}

/// Arguments that are not a JSON object, even after the repairs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ArgumentsError {
    /// What is wrong, e.g. `arguments are not valid JSON: expected ',' or
    /// '}', found 'x' at byte 17`.
    pub message: String,
    /// Byte offset in the raw arguments of a syntax error.
    pub offset: Option<usize>,
}

/// Whitespace trimmed around the arguments: what Ruby's `String#strip`
/// removes (JSON whitespace plus NUL, vertical tab and form feed).
fn is_trimmed(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}' | '\0')
}

/// The parameters that the whole raw arguments text stands for.
///
/// - Empty or whitespace-only text is `{}` (a tool without parameters).
/// - A JSON object is itself.
/// - Otherwise the first repair that gives an object, in this order: the
///   missing opening brace, missing closing brackets, both.
/// - A JSON string whose content is an object (or empty) is that object
///   (`{}`), reported as [`Repair::DoubleEncoded`].
/// - Anything else is an [`ArgumentsError`].
pub fn parse_arguments(raw: &str) -> Result<ParsedArguments, ArgumentsError> {
    let text = raw.trim_matches(is_trimmed);
    let lead = raw.len() - raw.trim_start_matches(is_trimmed).len();
    if text.is_empty() {
        return Ok(ParsedArguments { value: JsonValue::Object(Vec::new()), repair: None });
    }
    match parse_complete(text) {
        Ok(value) => from_value(value),
        Err(error) => match repair(text, &error) {
            Some(parsed) => Ok(parsed),
            None => Err(syntax_error(&error, lead)),
        },
    }
}

/// Final parameters in partial mode, where `parser` has already read all of
/// `raw`: its tree is taken as it is when it holds a complete object (no
/// second parse); anything else (incomplete, poisoned, not an object) goes
/// through [`parse_arguments`], so both paths give the same result.
pub fn finish_arguments(parser: IncrementalParser, raw: &str) -> Result<ParsedArguments, ArgumentsError> {
    if parser.is_complete() {
        if let Ok(value @ JsonValue::Object(_)) = parser.finish() {
            return Ok(ParsedArguments { value, repair: None });
        }
    }
    parse_arguments(raw)
}

/// A parsed value as parameters: an object, or a string holding one.
fn from_value(value: JsonValue) -> Result<ParsedArguments, ArgumentsError> {
    match value {
        JsonValue::Object(_) => Ok(ParsedArguments { value, repair: None }),
        JsonValue::String(inner) => {
            let inner = inner.trim_matches(is_trimmed);
            let value = if inner.is_empty() {
                Some(JsonValue::Object(Vec::new()))
            } else {
                parse_complete(inner).ok().filter(JsonValue::is_object)
            };
            match value {
                Some(value) => Ok(ParsedArguments { value, repair: Some(Repair::DoubleEncoded) }),
                None => Err(not_an_object(&JsonValue::String(String::new()))),
            }
        }
        other => Err(not_an_object(&other)),
    }
}

fn not_an_object(value: &JsonValue) -> ArgumentsError {
    let what = match value {
        JsonValue::Null => "JSON null".to_owned(),
        other => format!("a JSON {}", other.kind()),
    };
    ArgumentsError { message: format!("arguments are {what}, not an object"), offset: None }
}

fn syntax_error(error: &SyntaxError, lead: usize) -> ArgumentsError {
    let offset = error.offset + lead;
    let message = if error.kind == SyntaxErrorKind::TooDeep {
        format!("arguments are too deeply nested: {} at byte {offset}", error.message)
    } else {
        format!("arguments are not valid JSON: {} at byte {offset}", error.message)
    };
    ArgumentsError { message, offset: Some(offset) }
}

/// Tries the repairs on trimmed `text` that failed to parse with `error`.
fn repair(text: &str, error: &SyntaxError) -> Option<ParsedArguments> {
    if error.kind == SyntaxErrorKind::TooDeep {
        return None;
    }
    if text.starts_with('{') {
        let appended = missing_closers(text)?;
        let value = parse_object(&[text, &appended])?;
        return Some(ParsedArguments { value, repair: Some(Repair::MissingClosingBrackets { appended }) });
    }
    let opening = missing_opening(text)?;
    if let Some(value) = parse_object(&[opening, text]) {
        return Some(ParsedArguments { value, repair: Some(Repair::MissingOpeningBrace) });
    }
    let mut repaired = String::with_capacity(opening.len() + text.len() + 8);
    repaired.push_str(opening);
    repaired.push_str(text);
    let appended = missing_closers(&repaired)?;
    let value = parse_object(&[&repaired, &appended])?;
    Some(ParsedArguments { value, repair: Some(Repair::MissingOpeningAndClosing { appended }) })
}

/// Parses the concatenation of `parts` (fed one after the other, no copy);
/// `Some` only for an object.
fn parse_object(parts: &[&str]) -> Option<JsonValue> {
    let mut parser = IncrementalParser::new();
    for part in parts {
        parser.feed(part, &mut ()).ok()?;
    }
    parser.finish().ok().filter(JsonValue::is_object)
}

/// What a text that lost its opening brace needs in front: `{` when it
/// starts with a key's quote, `{"` when it starts with a key's name and its
/// closing quote (`location": "Paris"}`). Only for text with a `:`.
fn missing_opening(text: &str) -> Option<&'static str> {
    if text.starts_with('{') || !text.contains(':') {
        return None;
    }
    if text.starts_with('"') {
        return Some("{");
    }
    let mut chars = text.chars();
    let first = chars.next()?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    let name_len = text.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))?;
    let after_name = text.get(name_len..)?.strip_prefix('"')?;
    after_name.trim_start_matches([' ', '\t', '\n', '\r']).starts_with(':').then_some("{\"")
}

/// The closers that the `{`/`[` still open at the end of `text` need,
/// innermost first. `None` when the text ends inside a string (a closing
/// quote is never invented), nothing is open, or a closer does not match.
fn missing_closers(text: &str) -> Option<String> {
    let mut open = Vec::new();
    let mut strings = Strings::default();
    for b in text.bytes().filter_map(|b| strings.outside(b)) {
        match b {
            b'{' => open.push(b'}'),
            b'[' => open.push(b']'),
            b'}' | b']' if open.pop() != Some(b) => return None,
            _ => {}
        }
    }
    if strings.in_string || open.is_empty() {
        return None;
    }
    Some(open.iter().rev().map(|&b| char::from(b)).collect())
}

/// Where JSON text scanned byte by byte is: inside a string or not.
#[derive(Debug, Default)]
pub(crate) struct Strings {
    pub(crate) in_string: bool,
    escaped: bool,
}

impl Strings {
    /// `b` when it is outside every string and not a quote.
    pub(crate) fn outside(&mut self, b: u8) -> Option<u8> {
        if self.in_string {
            self.in_string = self.escaped || b != b'"';
            self.escaped = !self.escaped && b == b'\\';
            return None;
        }
        self.in_string = b == b'"';
        (!self.in_string).then_some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(json: &str) -> JsonValue {
        let value = parse_complete(json).unwrap();
        assert!(value.is_object());
        value
    }

    fn ok(raw: &str) -> ParsedArguments {
        parse_arguments(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}"))
    }

    fn err(raw: &str) -> ArgumentsError {
        match parse_arguments(raw) {
            Ok(parsed) => panic!("{raw:?} parsed as {parsed:?}"),
            Err(e) => e,
        }
    }

    /// Feeds `raw` in small fragments, as the processor does in partial mode.
    fn streamed(raw: &str) -> Result<ParsedArguments, ArgumentsError> {
        let mut parser = IncrementalParser::new();
        let mut start = 0;
        for (i, _) in raw.char_indices().chain([(raw.len(), ' ')]) {
            if i - start >= 3 || i == raw.len() {
                if parser.feed(&raw[start..i], &mut ()).is_err() {
                    break;
                }
                start = i;
            }
        }
        finish_arguments(parser, raw)
    }

    #[test]
    fn empty_and_whitespace_are_an_empty_object() {
        for raw in ["", "  ", "\n\t ", "\0"] {
            assert_eq!(
                ok(raw),
                ParsedArguments { value: JsonValue::Object(vec![]), repair: None },
                "{raw:?}"
            );
        }
    }

    #[test]
    fn an_object_is_itself() {
        assert_eq!(ok("{}"), ParsedArguments { value: object("{}"), repair: None });
        let parsed = ok(r#"{"location": "Paris", "days": [1, 2]}"#);
        assert_eq!(parsed.value, object(r#"{"location":"Paris","days":[1,2]}"#));
        assert_eq!(parsed.repair, None);
    }

    #[test]
    fn surrounding_whitespace_is_trimmed() {
        assert_eq!(ok(" \n {\"a\": 1} \r\n"), ParsedArguments { value: object(r#"{"a":1}"#), repair: None });
    }

    #[test]
    fn a_missing_opening_brace_is_added() {
        let parsed = ok(r#""location": "Paris"}"#);
        assert_eq!(parsed.value, object(r#"{"location":"Paris"}"#));
        assert_eq!(parsed.repair, Some(Repair::MissingOpeningBrace));
    }

    #[test]
    fn a_missing_opening_brace_and_quote_are_added() {
        let parsed = ok(r#"location": "Paris", "unit": "C"}"#);
        assert_eq!(parsed.value, object(r#"{"location":"Paris","unit":"C"}"#));
        assert_eq!(parsed.repair, Some(Repair::MissingOpeningBrace));
        assert_eq!(ok(r#"file_path"  : 1}"#).value, object(r#"{"file_path":1}"#));
    }

    #[test]
    fn missing_closing_brackets_are_appended_in_order() {
        let parsed = ok(r#"{"a": [1, {"b": 2"#);
        assert_eq!(parsed.value, object(r#"{"a":[1,{"b":2}]}"#));
        assert_eq!(parsed.repair, Some(Repair::MissingClosingBrackets { appended: "}]}".into() }));
        let parsed = ok(r#"{"q": "a } ] \" [ {""#);
        assert_eq!(parsed.value, object(r#"{"q":"a } ] \" [ {"}"#));
        assert_eq!(parsed.repair, Some(Repair::MissingClosingBrackets { appended: "}".into() }));
    }

    #[test]
    fn both_repairs_together() {
        let parsed = ok(r#""a": {"b": [true"#);
        assert_eq!(parsed.value, object(r#"{"a":{"b":[true]}}"#));
        assert_eq!(parsed.repair, Some(Repair::MissingOpeningAndClosing { appended: "]}}".into() }));
        let parsed = ok(r#"location": "Paris""#);
        assert_eq!(parsed.value, object(r#"{"location":"Paris"}"#));
        assert_eq!(parsed.repair, Some(Repair::MissingOpeningAndClosing { appended: "}".into() }));
    }

    #[test]
    fn double_encoded_arguments_are_decoded() {
        let parsed = ok(r#""{\"a\":1,\"b\":\"x\"}""#);
        assert_eq!(parsed.value, object(r#"{"a":1,"b":"x"}"#));
        assert_eq!(parsed.repair, Some(Repair::DoubleEncoded));
        assert_eq!(ok(r#""""#), ParsedArguments { value: object("{}"), repair: Some(Repair::DoubleEncoded) });
        let e = err(r#""[1]""#);
        assert_eq!(e.message, "arguments are a JSON string, not an object");
    }

    #[test]
    fn values_that_are_not_objects_are_errors() {
        assert_eq!(err("[1]").message, "arguments are a JSON array, not an object");
        assert_eq!(err("5").message, "arguments are a JSON number, not an object");
        assert_eq!(err("null").message, "arguments are JSON null, not an object");
        assert_eq!(err(" true ").message, "arguments are a JSON boolean, not an object");
        assert_eq!(err(r#""hello""#).message, "arguments are a JSON string, not an object");
        assert_eq!(err("[1]").offset, None);
    }

    #[test]
    fn text_beyond_repair_is_an_error_with_the_first_problem() {
        let e = err(r#"{"a": tru}"#);
        assert_eq!(e.message, "arguments are not valid JSON: expected 'true', found '}' at byte 9");
        assert_eq!(e.offset, Some(9));
        // Never a closing quote invented.
        let e = err(r#"{"a": "unterminated"#);
        assert_eq!(e.offset, Some(19));
        assert!(e.message.contains("end of input"), "{}", e.message);
        // Offsets count the trimmed whitespace.
        assert_eq!(err(r#"  {"a" 1}"#).offset, Some(7));
        assert_eq!(err(r#"{"a": 1,}"#).offset, Some(8));
        assert_eq!(err(r#"{"a": 1}}"#).offset, Some(8));
        assert_eq!(err(r#"{"a": 1} {"b": 2}"#).offset, Some(9));
        assert!(err("hello: world").message.starts_with("arguments are not valid JSON"));
        assert!(err(r#"{"a": [1}"#).message.starts_with("arguments are not valid JSON"));
        assert!(err(r#"{"a": 1,"#).message.starts_with("arguments are not valid JSON"));
    }

    #[test]
    fn too_deep_is_an_error_without_repair() {
        let raw = "{\"a\":".repeat(200);
        let e = err(&raw);
        assert!(e.message.starts_with("arguments are too deeply nested"), "{}", e.message);
    }

    #[test]
    fn streamed_and_one_shot_parses_agree() {
        let cases = [
            "",
            "   ",
            "{}",
            r#" {"a": "x\u00e9\ud83d\ude00", "b": [1, 2.5e3, null]} "#,
            r#""location": "Paris"}"#,
            r#"location": "Paris""#,
            r#"{"a": [1, {"b": 2"#,
            r#""{\"a\":1}""#,
            "[1]",
            "5",
            r#"{"a": tru}"#,
            r#"{"a": "unterminated"#,
            "{\"a\":1}\u{c}",
        ];
        for raw in cases {
            assert_eq!(streamed(raw), parse_arguments(raw), "{raw:?}");
        }
    }

    #[test]
    fn finish_arguments_takes_the_parsers_object() {
        let mut parser = IncrementalParser::new();
        parser.feed(r#"{"a": "#, &mut ()).unwrap();
        parser.feed(r#"[1, "two"]}"#, &mut ()).unwrap();
        // The raw text is not looked at when the parser holds a complete
        // object: that is the "no second parse" path.
        let parsed = finish_arguments(parser, "not looked at").unwrap();
        assert_eq!(parsed, ParsedArguments { value: object(r#"{"a":[1,"two"]}"#), repair: None });
    }

    #[test]
    fn repairs_display_what_they_did() {
        let r = Repair::MissingClosingBrackets { appended: "]}".into() };
        assert_eq!(r.to_string(), r#"appended the missing closing brackets "]}""#);
        assert_eq!(Repair::MissingOpeningBrace.to_string(), "added the missing opening brace");
    }
}
