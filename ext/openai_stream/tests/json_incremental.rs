//! The incremental parser against serde_json and against an independent
//! definition of "the visible view" of a prefix, for every split of a corpus
//! and for random values cut into random fragments.

mod common;

use common::to_serde;
use openai_stream::json::{parse_complete, IncrementalParser, JsonValue, SyntaxError, ViewEvent, ViewEvents};
use proptest::prelude::*;

/// The events applied to an empty tree: the view the Ruby side holds, keys
/// kept in event order (a key given twice appears twice, as in a JsonValue
/// object; Ruby's Hash would replace in place).
#[derive(Debug, Default)]
struct Model {
    root: Option<JsonValue>,
    /// Open containers and strings; each is the last child of the one before.
    depth: usize,
}

impl Model {
    fn innermost(&mut self) -> &mut JsonValue {
        let mut node = self.root.as_mut().expect("an open container");
        for _ in 1..self.depth {
            node = match node {
                JsonValue::Array(items) => items.last_mut().expect("open child"),
                JsonValue::Object(pairs) => &mut pairs.last_mut().expect("open child").1,
                other => panic!("{other:?} cannot hold an open child"),
            };
        }
        node
    }

    fn insert(&mut self, key: Option<&str>, node: JsonValue) {
        if self.depth == 0 {
            assert!(self.root.is_none(), "a second root value");
            self.root = Some(node);
            return;
        }
        match (self.innermost(), key) {
            (JsonValue::Array(items), None) => items.push(node),
            (JsonValue::Object(pairs), Some(key)) => pairs.push((key.to_owned(), node)),
            (parent, key) => panic!("value with key {key:?} inserted into {parent:?}"),
        }
    }

    fn apply(&mut self, events: &ViewEvents) {
        for event in events.iter() {
            match event {
                ViewEvent::Open { key, kind } => {
                    let node = match kind {
                        openai_stream::json::ContainerKind::Object => JsonValue::Object(Vec::new()),
                        openai_stream::json::ContainerKind::Array => JsonValue::Array(Vec::new()),
                        openai_stream::json::ContainerKind::String => JsonValue::String(String::new()),
                    };
                    self.insert(key, node);
                    self.depth += 1;
                }
                ViewEvent::Append(text) => {
                    assert!(!text.is_empty(), "empty append");
                    match self.innermost() {
                        JsonValue::String(s) => s.push_str(text),
                        other => panic!("append to {other:?}"),
                    }
                }
                ViewEvent::Scalar { key, value } => {
                    assert!(
                        !matches!(value, JsonValue::String(_) | JsonValue::Array(_) | JsonValue::Object(_)),
                        "scalar event with {value:?}"
                    );
                    self.insert(key, value.clone());
                }
                ViewEvent::Close => {
                    assert!(self.depth > 0, "close without open");
                    self.depth -= 1;
                }
            }
        }
    }
}

/// The visible view of a prefix of valid JSON, defined independently of the
/// parser: containers and strings appear when they start, strings hold
/// what is decoded (an incomplete escape or a high surrogate without its
/// low half not yet), numbers appear once something ends them, literals
/// once complete. Returns the view and how many nodes are still open.
fn visible(prefix: &str) -> (Option<JsonValue>, usize) {
    let mut r = Reference { s: prefix, i: 0 };
    let v = r.value();
    (v.node, v.open)
}

struct Vis {
    node: Option<JsonValue>,
    complete: bool,
    open: usize,
}

impl Vis {
    const NOTHING: Vis = Vis { node: None, complete: false, open: 0 };

    /// `node` as far as the prefix goes: complete, or with `open` nodes
    /// (itself and the ones it holds) still open.
    fn of(node: JsonValue, open: usize) -> Vis {
        Vis { node: Some(node), complete: open == 0, open }
    }
}

struct Reference<'a> {
    s: &'a str,
    i: usize,
}

impl Reference<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Vis {
        self.ws();
        let Some(b) = self.peek() else {
            return Vis::NOTHING;
        };
        match b {
            b'"' => {
                let (s, done) = self.string();
                Vis::of(JsonValue::String(s), usize::from(!done))
            }
            b'{' | b'[' => self.container(b == b'{'),
            b't' | b'f' | b'n' => {
                let (word, node) = match b {
                    b't' => ("true", JsonValue::Bool(true)),
                    b'f' => ("false", JsonValue::Bool(false)),
                    _ => ("null", JsonValue::Null),
                };
                if self.s.len() >= self.i + word.len() {
                    assert_eq!(&self.s[self.i..self.i + word.len()], word);
                    self.i += word.len();
                    Vis::of(node, 0)
                } else {
                    self.i = self.s.len();
                    Vis::NOTHING
                }
            }
            _ => {
                let start = self.i;
                while matches!(self.peek(), Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')) {
                    self.i += 1;
                }
                if self.peek().is_none() {
                    Vis::NOTHING
                } else {
                    Vis::of(parse_complete(&self.s[start..self.i]).expect("a whole number"), 0)
                }
            }
        }
    }

    /// An object or an array from its opening bracket: the members read so
    /// far (an object's once its key and colon are read).
    fn container(&mut self, object: bool) -> Vis {
        let close = if object { b'}' } else { b']' };
        let node = |members: Vec<(String, JsonValue)>| {
            if object {
                JsonValue::Object(members)
            } else {
                JsonValue::Array(members.into_iter().map(|(_, item)| item).collect())
            }
        };
        self.i += 1;
        let mut members = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                Some(c) if c == close => {
                    self.i += 1;
                    return Vis::of(node(members), 0);
                }
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                _ => {}
            }
            let mut key = String::new();
            if object {
                if self.peek().is_none() {
                    return Vis::of(node(members), 1);
                }
                let (name, done) = self.string();
                self.ws();
                if !done || self.peek().is_none() {
                    return Vis::of(node(members), 1);
                }
                assert_eq!(self.peek(), Some(b':'));
                self.i += 1;
                key = name;
            }
            let v = self.value();
            if let Some(member) = v.node {
                members.push((key, member));
            }
            if !v.complete {
                return Vis::of(node(members), 1 + v.open);
            }
        }
    }

    /// A string from its opening quote: what is decoded so far, and whether
    /// the closing quote was read.
    fn string(&mut self) -> (String, bool) {
        assert_eq!(self.peek(), Some(b'"'));
        self.i += 1;
        let mut out = String::new();
        loop {
            let rest = &self.s[self.i..];
            let Some(c) = rest.chars().next() else {
                return (out, false);
            };
            match c {
                '"' => {
                    self.i += 1;
                    return (out, true);
                }
                '\\' => {
                    let Some(e) = rest.as_bytes().get(1) else {
                        self.i = self.s.len();
                        return (out, false);
                    };
                    if *e != b'u' {
                        out.push(match e {
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            other => char::from(*other),
                        });
                        self.i += 2;
                        continue;
                    }
                    let Some(hex) = rest.get(2..6) else {
                        self.i = self.s.len();
                        return (out, false);
                    };
                    let unit = u32::from_str_radix(hex, 16).unwrap();
                    if (0xD800..0xDC00).contains(&unit) {
                        let Some(low) = rest.get(8..12) else {
                            self.i = self.s.len();
                            return (out, false);
                        };
                        let low = u32::from_str_radix(low, 16).unwrap();
                        out.push(char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)).unwrap());
                        self.i += 12;
                    } else {
                        out.push(char::from_u32(unit).unwrap());
                        self.i += 6;
                    }
                }
                c => {
                    out.push(c);
                    self.i += c.len_utf8();
                }
            }
        }
    }
}

/// The spec's consistency rule between a view and the final value: strings
/// are prefixes, earlier siblings are complete and equal, nothing is visible
/// that the final value does not have (in the same position).
fn consistent(view: &JsonValue, fin: &JsonValue) -> bool {
    /// The earlier siblings equal, the last one as `last` says.
    fn siblings<T: PartialEq>(view: &[T], fin: &[T], last: impl Fn(&T, &T) -> bool) -> bool {
        match view.split_last() {
            None => true,
            Some((tail, done)) => {
                done.len() < fin.len() && done == &fin[..done.len()] && last(tail, &fin[done.len()])
            }
        }
    }
    match (view, fin) {
        (JsonValue::String(v), JsonValue::String(f)) => f.starts_with(v.as_str()),
        (JsonValue::Array(v), JsonValue::Array(f)) => siblings(v, f, consistent),
        (JsonValue::Object(v), JsonValue::Object(f)) => {
            siblings(v, f, |(ka, a), (kb, b)| ka == kb && consistent(a, b))
        }
        (v, f) => v == f,
    }
}

/// Feeds `text` cut at `cuts` (sorted char boundaries), checking the view
/// after every fragment; returns the parser's result.
fn feed_checked(text: &str, cuts: &[usize]) -> Result<JsonValue, SyntaxError> {
    let mut parser = IncrementalParser::new();
    let mut events = ViewEvents::default();
    let mut model = Model::default();
    let final_node = parse_complete(text).ok();
    let mut start = 0;
    let mut before = visible("");
    for &cut in cuts.iter().chain([text.len()].iter()) {
        if cut < start {
            continue;
        }
        events.clear();
        parser.feed(&text[start..cut], &mut events)?;
        model.apply(&events);
        let now = visible(&text[..cut]);
        assert_eq!((&model.root, model.depth), (&now.0, now.1), "view after {:?}", &text[..cut]);
        if now == before {
            assert!(events.is_empty(), "events for {:?} though nothing became visible", &text[start..cut]);
        }
        if let (Some(view), Some(fin)) = (&model.root, &final_node) {
            assert!(consistent(view, fin), "view {view:?} not consistent with {fin:?}");
        }
        before = now;
        start = cut;
    }
    let value = parser.finish()?;
    // All events together give the final value (a root number is only in
    // finish's result: nothing ended it).
    if !matches!(value, JsonValue::Number(_)) || text.ends_with(char::is_whitespace) {
        assert_eq!(model.root.as_ref(), Some(&value), "final view of {text:?}");
        assert_eq!(model.depth, 0);
    }
    Ok(value)
}

fn assert_same_as_serde(text: &str, value: &JsonValue) {
    let expected: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(to_serde(value), expected, "{text}");
}

const CORPUS: &[&str] = &[
    r#"{"location": "Paris", "unit": "celsius"}"#,
    r#"{"a": {"b": {"c": "deep"}, "d": []}, "e": {}}"#,
    r#"["x", "y", 1, 2.5, {"k": "v"}, [], [[]], {}, [{"a": [1, [2, {"b": null}]]}]]"#,
    r#"{"esc": "\"\\\/\b\f\n\r\t", "u": "\u00e9\u0041\ud83d\ude00", "mixed": "a\u00e9b\uD83D\uDE00c\n"}"#,
    r#"{"n": [-0, 0, 1.5e-3, -12.5E+10, 12345678901234567890123, 0.0, 1E5, 7]}"#,
    r#"[true, false, null, {"t": true, "f": false, "n": null}]"#,
    r#"{"": "", "e": [], "o": {}, "s": ""}"#,
    " \t\n\r{ \"a\" \t:\n [ 1 , \"b\" , { } ] \r\n, \"c\" : null ,\"d\":-1 } \n ",
    r#"{"text": "héllo 😀 wörld ✓", "ключ": "значение", "😀": "\u2713"}"#,
    r#"{"a": 1, "b": "x", "a": "second", "b": {"deep": [1]}, "a": [true]}"#,
    r#""just a string \u00e9 😀""#,
    "42",
    "-1.5e3 ",
    "true",
    "null",
    "[]",
    "{}",
    r#""""#,
    r#"{"k": "\\\\\\\""}"#,
    r#"{"code": "def f():\n    return \"x\"\n", "path": "C:\\dir\\file"}"#,
    r#"[1,2,3,[4,5,[6]],"seven",{"eight":8}]"#,
];

#[test]
fn corpus_split_at_every_char_boundary() {
    for text in CORPUS {
        let whole = feed_checked(text, &[]).unwrap();
        assert_same_as_serde(text, &whole);
        for (cut, _) in text.char_indices().skip(1) {
            let value = feed_checked(text, &[cut]).unwrap_or_else(|e| panic!("{text} cut at {cut}: {e}"));
            assert_eq!(value, whole, "{text} cut at {cut}");
        }
    }
}

#[test]
fn corpus_fed_one_char_at_a_time() {
    for text in CORPUS {
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        let value = feed_checked(text, &cuts).unwrap();
        assert_same_as_serde(text, &value);
    }
}

#[test]
fn corpus_cut_at_every_pair_of_boundaries() {
    // Three fragments: catches state that survives one boundary but not two
    // close together (an escape cut twice).
    for text in [CORPUS[3], CORPUS[4], CORPUS[8]] {
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        let whole = parse_complete(text).unwrap();
        for (n, &a) in bounds.iter().enumerate() {
            for &b in &bounds[n + 1..] {
                assert_eq!(feed_checked(text, &[a, b]).unwrap(), whole, "{text} cut at {a}, {b}");
            }
        }
    }
}

/// Writes JSON escaping every non-ASCII character as `\uXXXX` (surrogate
/// pairs above the BMP) and `/` as `\/`: the escapes serde_json never writes.
fn write_escaped(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '/' => out.push_str("\\/"),
                    '\n' => out.push_str("\\n"),
                    c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
                    c => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{unit:04X}"));
                        }
                    }
                }
            }
            out.push('"');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                write_escaped(item, out);
            }
            out.push(']');
        }
        serde_json::Value::Object(map) => {
            out.push_str("{ ");
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_escaped(&serde_json::Value::String(k.clone()), out);
                out.push_str(" :\t");
                write_escaped(v, out);
            }
            out.push_str("\n}");
        }
        other => out.push_str(&other.to_string()),
    }
}

fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z ]{0,10}", any::<String>(), "[\"\\\\/\n\t\u{0}-\u{1f}é😀✓ a]{0,16}",]
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        arb_string().prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::vec((arb_string(), inner), 0..8)
                .prop_map(|pairs| serde_json::Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// Random cut points, moved down to char boundaries.
fn cuts_for(text: &str, raw: &[usize]) -> Vec<usize> {
    let mut cuts: Vec<usize> = raw
        .iter()
        .map(|&c| {
            let mut c = c % (text.len() + 1);
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_values_in_random_fragments(
        value in arb_json(),
        form in 0..3u8,
        raw_cuts in prop::collection::vec(any::<usize>(), 0..24),
    ) {
        let text = match form {
            0 => serde_json::to_string(&value).unwrap(),
            1 => serde_json::to_string_pretty(&value).unwrap(),
            _ => {
                let mut out = String::new();
                write_escaped(&value, &mut out);
                out
            }
        };
        let cuts = cuts_for(&text, &raw_cuts);
        let parsed = feed_checked(&text, &cuts).unwrap();
        prop_assert_eq!(to_serde(&parsed), serde_json::from_str::<serde_json::Value>(&text).unwrap());
        prop_assert_eq!(parsed, parse_complete(&text).unwrap());
    }

    #[test]
    fn damaged_text_is_rejected_exactly_when_serde_rejects_it(
        value in arb_json(),
        at in any::<usize>(),
        edit in 0..3u8,
        insert in prop::sample::select(vec!['{', '}', '[', ']', ',', ':', '"', '\\', '0', '-', '.', 'e', 't', 'x', ' ', '\n', '\u{1}', 'é']),
        raw_cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut text = serde_json::to_string(&value).unwrap();
        let mut at = at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        match edit {
            0 if at < text.len() => { text.remove(at); }
            1 if at < text.len() => { text.remove(at); text.insert(at, insert); }
            _ => text.insert(at, insert),
        }
        let ours = parse_complete(&text);
        match serde_json::from_str::<serde_json::Value>(&text) {
            Err(e) if e.to_string().contains("out of range") => {}
            Err(e) => prop_assert!(ours.is_err(), "{:?}: serde says {}, we parsed {:?}", text, e, ours),
            Ok(expected) => match &ours {
                Ok(v) => prop_assert_eq!(to_serde(v), expected),
                Err(e) => prop_assert!(false, "{:?}: serde parsed it, we say {}", text, e),
            },
        }
        // Fragments change nothing, not even the error's kind and offset.
        let cuts = cuts_for(&text, &raw_cuts);
        let mut parser = IncrementalParser::new();
        let mut start = 0;
        let mut streamed = Ok(());
        for &cut in cuts.iter().chain([text.len()].iter()) {
            streamed = parser.feed(&text[start..cut], &mut ViewEvents::default());
            if streamed.is_err() {
                break;
            }
            start = cut;
        }
        let streamed = streamed.and_then(|()| parser.finish());
        prop_assert_eq!(streamed, ours);
    }
}
