//! Exact events, errors and their offsets. The view against serde_json over
//! every split of a corpus and random values is in `tests/json_incremental.rs`.

use super::*;

/// Records events as text without merging anything, to see exactly what
/// the parser emits.
#[derive(Default)]
struct Log(Vec<String>);

impl ViewSink for Log {
    fn open(&mut self, key: Option<&str>, kind: ContainerKind) {
        self.0.push(format!("open {key:?} {kind:?}"));
    }
    fn append(&mut self, text: &str) {
        assert!(!text.is_empty());
        self.0.push(format!("append {text:?}"));
    }
    fn scalar(&mut self, key: Option<&str>, value: &JsonValue) {
        self.0.push(format!("scalar {key:?} {value:?}"));
    }
    fn close(&mut self) {
        self.0.push("close".to_owned());
    }
}

/// Feeds the fragments; the events of each feed.
fn events(fragments: &[&str]) -> Vec<Vec<String>> {
    let mut parser = IncrementalParser::new();
    fragments
        .iter()
        .map(|fragment| {
            let mut log = Log::default();
            parser.feed(fragment, &mut log).unwrap();
            log.0
        })
        .collect()
}

fn error(text: &str) -> SyntaxError {
    match parse_complete(text) {
        Ok(value) => panic!("{text:?} parsed as {value:?}"),
        Err(e) => e,
    }
}

fn assert_error(text: &str, kind: SyntaxErrorKind, offset: usize) {
    let e = error(text);
    let shown: String = text.chars().take(60).collect();
    assert_eq!((e.kind, e.offset), (kind, offset), "{shown:?}: {e}");
}

fn value(json: &str) -> JsonValue {
    serde_json::from_str(json).unwrap()
}

#[test]
fn a_string_value_opens_at_its_quote_and_keys_stay_hidden() {
    assert_eq!(
        events(&[r#"{"lo"#, r#"cation"#, r#"": "#, r#"""#, "B", "erlin\"", "}"]),
        vec![
            vec![r#"open None Object"#.to_owned()],
            vec![],
            vec![],
            vec![r#"open Some("location") String"#.to_owned()],
            vec![r#"append "B""#.to_owned()],
            vec![r#"append "erlin""#.to_owned(), "close".to_owned()],
            vec!["close".to_owned()],
        ]
    );
}

#[test]
fn one_append_per_run_within_a_feed() {
    assert_eq!(
        events(&[r#"{"a": "ab\ncd\u00e9\ud83d\ude00 \"q\"", "b": "x"#]),
        vec![vec![
            "open None Object".to_owned(),
            r#"open Some("a") String"#.to_owned(),
            "append \"ab\\ncdé😀 \\\"q\\\"\"".to_owned(),
            "close".to_owned(),
            r#"open Some("b") String"#.to_owned(),
            r#"append "x""#.to_owned(),
        ]]
    );
}

#[test]
fn an_escape_cut_by_a_fragment_is_appended_once_complete() {
    assert_eq!(
        events(&[r#"["a\"#, r#"nb"#]),
        vec![
            vec!["open None Array".to_owned(), "open None String".to_owned(), r#"append "a""#.to_owned()],
            vec![r#"append "\nb""#.to_owned()],
        ]
    );
    assert_eq!(
        events(&[r#"["\u00"#, r#"e9"#]),
        vec![
            vec!["open None Array".to_owned(), "open None String".to_owned()],
            vec![r#"append "é""#.to_owned()],
        ]
    );
}

#[test]
fn a_high_surrogate_waits_for_its_low_half() {
    assert_eq!(
        events(&[r#""x\ud83d"#, r#"\"#, r#"ude"#, r#"00y""#]),
        vec![
            vec!["open None String".to_owned(), r#"append "x""#.to_owned()],
            vec![],
            vec![],
            vec![r#"append "😀y""#.to_owned(), "close".to_owned()],
        ]
    );
}

#[test]
fn unicode_escapes_survive_a_cut_at_every_position() {
    for text in [r#"{"k": "a\u00e9b"}"#, r#"{"k": "a\ud83d\ude00b"}"#, r#"["\uD83D\uDE00\u0041"]"#] {
        let expected = value(text);
        for cut in 1..text.len() {
            let mut parser = IncrementalParser::new();
            let mut view = ViewEvents::default();
            parser.feed(&text[..cut], &mut view).unwrap();
            parser.feed(&text[cut..], &mut view).unwrap();
            let appended: String = view
                .iter()
                .filter_map(|e| match e {
                    ViewEvent::Append(t) => Some(t),
                    _ => None,
                })
                .collect();
            let JsonValue::String(s) = parser.finish().map(|v| value_at(v, 0)).unwrap() else { panic!() };
            assert_eq!(appended, s, "{text} cut at {cut}");
            assert_eq!(parse_complete(text).unwrap(), expected);
        }
    }
}

fn value_at(v: JsonValue, i: usize) -> JsonValue {
    match v {
        JsonValue::Object(mut pairs) => pairs.swap_remove(i).1,
        JsonValue::Array(mut items) => items.swap_remove(i),
        other => other,
    }
}

#[test]
fn numbers_appear_when_something_ends_them() {
    assert_eq!(
        events(&["[12", "3", "]"]),
        vec![
            vec!["open None Array".to_owned()],
            vec![],
            vec!["scalar None 123".to_owned(), "close".to_owned()]
        ]
    );
    assert_eq!(events(&[r#"{"n": -1.5e"#, "+3,"])[1], vec![r#"scalar Some("n") -1.5e+3"#.to_owned()]);
    // At the root, only finish knows the number ended.
    let mut parser = IncrementalParser::new();
    let mut log = Log::default();
    parser.feed("42", &mut log).unwrap();
    assert!(log.0.is_empty() && !parser.is_complete());
    assert_eq!(parser.finish().unwrap(), value("42"));
}

#[test]
fn literals_appear_when_complete() {
    assert_eq!(
        events(&["[tr", "ue", ", nul", "l, f", "alse]"]),
        vec![
            vec!["open None Array".to_owned()],
            vec!["scalar None true".to_owned()],
            vec![],
            vec!["scalar None null".to_owned()],
            vec!["scalar None false".to_owned(), "close".to_owned()],
        ]
    );
}

#[test]
fn feeds_that_show_nothing_new_emit_nothing() {
    let got = events(&["{", " \n", r#""ke"#, r#"y""#, " : ", "", "5", "0 ", ","]);
    assert_eq!(got[0], vec!["open None Object".to_owned()]);
    assert!(got[1..7].iter().all(Vec::is_empty), "{got:?}");
    assert_eq!(got[7], vec![r#"scalar Some("key") 50"#.to_owned()]);
    assert!(got[8].is_empty());
}

#[test]
fn duplicate_keys_are_kept_in_the_tree_and_name_their_slot_again() {
    let got = events(&[r#"{"a": "x", "a": [1]}"#]);
    assert_eq!(got[0][1], r#"open Some("a") String"#);
    assert_eq!(got[0][4], r#"open Some("a") Array"#);
    let tree = parse_complete(r#"{"a": "x", "a": [1]}"#).unwrap();
    assert_eq!(tree.to_json(), r#"{"a":"x","a":[1]}"#);
    assert_eq!(tree.get("a").map(JsonValue::to_json).as_deref(), Some("[1]"));
}

#[test]
fn view_events_merge_appends_and_reuse_their_storage() {
    let mut view = ViewEvents::default();
    view.open(Some("k"), ContainerKind::String);
    view.append("ab");
    view.append("cd");
    view.scalar(None, &JsonValue::Bool(true));
    view.close();
    let got: Vec<ViewEvent<'_>> = view.iter().collect();
    assert_eq!(
        got,
        vec![
            ViewEvent::Open { key: Some("k"), kind: ContainerKind::String },
            ViewEvent::Append("abcd"),
            ViewEvent::Scalar { key: None, value: &JsonValue::Bool(true) },
            ViewEvent::Close,
        ]
    );
    assert_eq!(view.len(), 4);
    view.clear();
    assert!(view.is_empty() && view.iter().next().is_none());
}

#[test]
fn root_values_of_every_kind() {
    for (text, json) in [
        ("5", "5"),
        (" -0.5e1 ", "-0.5e1"),
        ("true", "true"),
        ("null", "null"),
        (r#""s""#, r#""s""#),
        ("[]", "[]"),
        ("{}", "{}"),
        (" [ 1 ] ", "[1]"),
    ] {
        assert_eq!(parse_complete(text).unwrap().to_json(), json, "{text}");
    }
    // Kept as text, as Ruby's JSON.parse keeps it (Infinity), where serde_json
    // would refuse it.
    assert_eq!(parse_complete("[1e400]").unwrap().to_json(), "[1e400]");
}

#[test]
fn is_complete_after_one_value_and_whitespace() {
    let mut parser = IncrementalParser::new();
    parser.feed(r#" {"a": [1]"#, &mut ()).unwrap();
    assert!(!parser.is_complete());
    parser.feed("} \n", &mut ()).unwrap();
    assert!(parser.is_complete());
    assert_eq!(parser.bytes_consumed(), 13);
    assert_eq!(parser.finish().unwrap(), value(r#"{"a":[1]}"#));
}

#[test]
fn unexpected_characters() {
    assert_error(r#"{"a" 1}"#, SyntaxErrorKind::Unexpected, 5);
    assert_error(r#"{"a": 1 x"#, SyntaxErrorKind::Unexpected, 8);
    assert_error("[1, 2 3]", SyntaxErrorKind::Unexpected, 6);
    assert_error("[1,]", SyntaxErrorKind::Unexpected, 3);
    assert_error(r#"{"a": 1,}"#, SyntaxErrorKind::Unexpected, 8);
    assert_error("[,1]", SyntaxErrorKind::Unexpected, 1);
    assert_error("{,}", SyntaxErrorKind::Unexpected, 1);
    assert_error("{1: 2}", SyntaxErrorKind::Unexpected, 1);
    assert_error("{'a': 1}", SyntaxErrorKind::Unexpected, 1);
    assert_error("[1}", SyntaxErrorKind::Unexpected, 2);
    assert_error("[tru]", SyntaxErrorKind::Unexpected, 4);
    assert_error("nul1", SyntaxErrorKind::Unexpected, 3);
    assert_error("NaN", SyntaxErrorKind::Unexpected, 0);
    assert_error("[Infinity]", SyntaxErrorKind::Unexpected, 1);
    assert_error("// c\n{}", SyntaxErrorKind::Unexpected, 0);
    assert_error("\u{feff}{}", SyntaxErrorKind::Unexpected, 0);
    assert_error("[\u{a0}1]", SyntaxErrorKind::Unexpected, 1);
    assert_error("]", SyntaxErrorKind::Unexpected, 0);
    let e = error(r#"{"location": "Paris" "unit"}"#);
    assert_eq!(e.to_string(), r#"expected ',' or '}', found '"' at byte 21"#);
    assert_eq!(error("[1 x").to_string(), "expected ',' or ']', found 'x' at byte 3");
}

#[test]
fn unexpected_end() {
    for (text, offset) in
        [("", 0), ("  ", 2), ("{", 1), (r#"{"a""#, 4), (r#"{"a":"#, 5), ("[1", 2), ("[1,", 3)]
    {
        assert_error(text, SyntaxErrorKind::UnexpectedEnd, offset);
    }
    for text in
        [r#""abc"#, r#""a\"#, r#""\u12"#, r#""\ud83d"#, r#""\ud83d\"#, r#""\ud83d\u"#, "tr", "-", "1.", "1e+"]
    {
        assert_eq!(error(text).kind, SyntaxErrorKind::UnexpectedEnd, "{text}");
    }
    assert_eq!(error("").to_string(), "expected a JSON value, found end of input at byte 0");
    assert_eq!(
        error(r#"{"a": "x"#).to_string(),
        "expected '\"' to end the string, found end of input at byte 8"
    );
}

#[test]
fn trailing_data() {
    assert_error("{} x", SyntaxErrorKind::TrailingData, 3);
    assert_error("{}{}", SyntaxErrorKind::TrailingData, 2);
    assert_error(r#""a" "b""#, SyntaxErrorKind::TrailingData, 4);
    assert_error("1 2", SyntaxErrorKind::TrailingData, 2);
    assert_error("truex", SyntaxErrorKind::TrailingData, 4);
    assert_error("[1]]", SyntaxErrorKind::TrailingData, 3);
    assert_error("1x", SyntaxErrorKind::TrailingData, 1);
}

#[test]
fn too_deep_returns_quickly_without_recursion() {
    let deep = "[".repeat(10_000);
    assert_error(&deep, SyntaxErrorKind::TooDeep, DEFAULT_MAX_DEPTH);
    let nested = "{\"a\":".repeat(10_000);
    assert_error(&nested, SyntaxErrorKind::TooDeep, 5 * DEFAULT_MAX_DEPTH);
    // Char by char too.
    let mut parser = IncrementalParser::new();
    let mut result = Ok(());
    for _ in 0..10_000 {
        result = parser.feed("[", &mut ());
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result.map_err(|e| e.kind), Err(SyntaxErrorKind::TooDeep));
    // The limit itself is allowed.
    let ok = format!("{}{}", "[".repeat(DEFAULT_MAX_DEPTH), "]".repeat(DEFAULT_MAX_DEPTH));
    assert!(parse_complete(&ok).is_ok());
    let mut parser = IncrementalParser::with_max_depth(2);
    assert_eq!(
        parser.feed(r#"{"a": [[1]]}"#, &mut ()).map_err(|e| (e.kind, e.offset)),
        Err((SyntaxErrorKind::TooDeep, 7))
    );
    let mut parser = IncrementalParser::with_max_depth(0);
    parser.feed(r#""fine""#, &mut ()).unwrap();
    assert!(parser.finish().is_ok());
}

#[test]
fn invalid_numbers() {
    for (text, offset) in
        [("01", 1), ("-01", 2), ("-", 1), ("[-x]", 2), ("[1.]", 3), ("1.e5", 2), ("[1e]", 3), ("1e+x", 3)]
    {
        let e = error(text);
        if e.offset != offset
            || (e.kind != SyntaxErrorKind::InvalidNumber && e.kind != SyntaxErrorKind::UnexpectedEnd)
        {
            panic!("{text:?}: {e:?}");
        }
    }
    assert_error("[01]", SyntaxErrorKind::InvalidNumber, 2);
    assert_error("[1.5.2]", SyntaxErrorKind::InvalidNumber, 4);
    assert_error("[1-2]", SyntaxErrorKind::InvalidNumber, 2);
    assert_error("[--1]", SyntaxErrorKind::InvalidNumber, 2);
    assert_error("[+1]", SyntaxErrorKind::Unexpected, 1);
    assert_error("[.5]", SyntaxErrorKind::Unexpected, 1);
    assert_eq!(error("[-a]").to_string(), "expected a digit after '-', found 'a' at byte 2");
}

#[test]
fn invalid_escapes() {
    assert_error(r#""\x""#, SyntaxErrorKind::InvalidEscape, 2);
    assert_error(r#""\'""#, SyntaxErrorKind::InvalidEscape, 2);
    assert_error(r#""\U0041""#, SyntaxErrorKind::InvalidEscape, 2);
    assert_error(r#""\u12g4""#, SyntaxErrorKind::InvalidEscape, 5);
    assert_error(r#""\u004""#, SyntaxErrorKind::InvalidEscape, 6);
}

#[test]
fn lone_surrogates_are_errors_as_in_serde_json() {
    for text in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud800\u0041""#,
        r#""\ud800\ud800""#,
        r#""\ud800\n""#,
        r#""\ud800x""#,
        r#""\ude00\ud83d""#,
    ] {
        assert_eq!(error(text).kind, SyntaxErrorKind::InvalidUnicode, "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text).is_err(), "{text}");
    }
    assert_error(r#""\udc00""#, SyntaxErrorKind::InvalidUnicode, 6);
    assert_error(r#"["\ud83dx"]"#, SyntaxErrorKind::InvalidUnicode, 8);
    assert_error(r#""\ud83d\u0041""#, SyntaxErrorKind::InvalidUnicode, 12);
}

#[test]
fn control_characters_must_be_escaped() {
    for c in ['\0', '\n', '\t', '\r', '\u{1f}'] {
        let text = format!("[\"a{c}b\"]");
        assert_error(&text, SyntaxErrorKind::ControlCharacter, 3);
    }
    assert_eq!(parse_complete("\"\u{7f}\"").unwrap(), JsonValue::String("\u{7f}".into()));
    assert_eq!(error("\"\n\"").to_string(), "unescaped control character U+000A in a string at byte 1");
}

#[test]
fn offsets_count_earlier_fragments() {
    let mut parser = IncrementalParser::new();
    parser.feed(r#"{"abc": "#, &mut ()).unwrap();
    parser.feed("[1, 2", &mut ()).unwrap();
    let e = parser.feed(" 3]", &mut ()).unwrap_err();
    assert_eq!((e.kind, e.offset), (SyntaxErrorKind::Unexpected, 14));
    assert_eq!(parser.bytes_consumed(), 14);
}

#[test]
fn a_parser_that_failed_stays_failed() {
    let mut parser = IncrementalParser::new();
    let mut log = Log::default();
    parser.feed(r#"{"a": "x"#, &mut log).unwrap();
    let e = parser.feed("\u{1}", &mut log).unwrap_err();
    assert_eq!(e.kind, SyntaxErrorKind::ControlCharacter);
    assert!(parser.is_poisoned() && !parser.is_complete());
    let before = log.0.len();
    assert_eq!(parser.feed(r#"y"}"#, &mut log), Err(e.clone()));
    assert_eq!(log.0.len(), before, "no work after an error");
    assert_eq!(parser.finish(), Err(e));
}

#[test]
fn whitespace_is_json_whitespace_only() {
    assert_eq!(parse_complete(" \t\n\r[ \t\n\r1 \t\n\r] \t\n\r").unwrap(), value("[1]"));
    for ws in ['\u{b}', '\u{c}', '\u{a0}', '\u{2028}'] {
        assert_eq!(error(&format!("[{ws}1]")).kind, SyntaxErrorKind::Unexpected, "{ws:?}");
    }
}
