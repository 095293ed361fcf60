//! An incremental JSON parser for tool-call arguments that arrive in
//! arbitrary fragments.
//!
//! [`IncrementalParser::feed`] takes the next fragment, builds the
//! [`JsonValue`] tree as it goes (so [`IncrementalParser::finish`] needs no
//! second parse) and tells a [`ViewSink`] what became visible. All state
//! (inside an escape, half a `\u` sequence, a high surrogate waiting for its
//! low half, half a number or literal) survives a fragment boundary at any
//! byte. Work is linear in the input: string runs are copied in bulk, the
//! prefix is never read again.
//!
//! The grammar is strict RFC 8259, as serde_json and Ruby's `JSON.parse` with
//! defaults: any root value, no comments, no `NaN`, no trailing commas, no
//! control characters in strings, whitespace = space, tab, LF, CR.
//!
//! Nothing here recurses on the input's nesting: the open containers are an
//! explicit stack. Dropping a finished tree is recursive in its depth, which
//! the depth limit ([`DEFAULT_MAX_DEPTH`]) bounds.

mod error;
mod number;
mod string;
mod view;

pub use error::{SyntaxError, SyntaxErrorKind};
pub use view::{ContainerKind, ViewEvent, ViewEvents, ViewSink};

use error::found;
use number::{NumState, Step};
pub(crate) use string::short_escape;
use string::Escape;

use crate::json::{JsonValue, Number};

/// The nesting limit of [`IncrementalParser::new`]: at most this many arrays
/// and objects open at once (serde_json's default allows 127).
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// Where in the grammar the text read so far ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value must come: at the root, after `:`, after `,` in an array.
    Value,
    /// After `[`: a value or `]`.
    ArrayFirst,
    /// After `{`: a key or `}`.
    ObjectFirst,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value inside a container: `,` or the closer.
    AfterValue,
    /// The root value is complete; only whitespace may follow.
    End,
    /// Inside a string (a key when `IncrementalParser::in_key`).
    Str(Escape),
    /// Inside a number; its text so far is in `IncrementalParser::number`.
    Num(NumState),
    /// Inside `true`, `false` or `null`, `matched` bytes read.
    Lit { literal: Literal, matched: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Literal {
    True,
    False,
    Null,
}

impl Literal {
    /// Its text, its value, and what an error says was expected.
    fn parts(self) -> (&'static [u8], JsonValue, &'static str) {
        match self {
            Literal::True => (b"true", JsonValue::Bool(true), "expected 'true'"),
            Literal::False => (b"false", JsonValue::Bool(false), "expected 'false'"),
            Literal::Null => (b"null", JsonValue::Null, "expected 'null'"),
        }
    }
}

/// An open container of the tree being built.
#[derive(Debug)]
enum Frame {
    Array(Vec<JsonValue>),
    /// `key` is the key whose value is being read (set after its closing quote).
    Object {
        pairs: Vec<(String, JsonValue)>,
        key: Option<String>,
    },
}

/// Parses one JSON value fed in fragments. One per tool call.
#[derive(Debug)]
pub struct IncrementalParser {
    state: State,
    /// Open containers, outermost first.
    stack: Vec<Frame>,
    /// The complete root value.
    root: Option<JsonValue>,
    /// The string being read: a key, or a value that becomes the tree's String.
    text: String,
    in_key: bool,
    /// How much of `text` (a value string) the sink has been given.
    flushed: usize,
    /// The number being read.
    number: String,
    /// Bytes of all successful feeds (error offsets count from the start).
    consumed: usize,
    max_depth: usize,
    /// The first error; once set, the parser is poisoned.
    error: Option<SyntaxError>,
}

impl Default for IncrementalParser {
    fn default() -> Self {
        Self::new()
    }
}

impl IncrementalParser {
    /// A parser with the [`DEFAULT_MAX_DEPTH`] nesting limit.
    pub fn new() -> Self {
        Self::with_max_depth(DEFAULT_MAX_DEPTH)
    }

    /// A parser that allows at most `depth` arrays and objects open at once
    /// (0: only a scalar or string root). Keep it modest: dropping a tree is
    /// recursive in its depth.
    pub fn with_max_depth(depth: usize) -> Self {
        IncrementalParser {
            state: State::Value,
            stack: Vec::new(),
            root: None,
            text: String::new(),
            in_key: false,
            flushed: 0,
            number: String::new(),
            consumed: 0,
            max_depth: depth,
            error: None,
        }
    }

    /// Feeds the next fragment of JSON text and tells `sink` what became
    /// visible (nothing at all when nothing did). String content read in
    /// this call is appended in one piece per contiguous run.
    ///
    /// After an error the parser is poisoned: every later call returns the
    /// same error at once, and so does [`IncrementalParser::finish`]. Events
    /// for the part of the fragment before the error may have been emitted.
    pub fn feed<S: ViewSink>(&mut self, text: &str, sink: &mut S) -> Result<(), SyntaxError> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        #[cfg(test)]
        tests::count(text.len());
        match self.run(text, sink) {
            Ok(()) => {
                self.flush(sink);
                self.consumed += text.len();
                Ok(())
            }
            Err(error) => {
                self.error = Some(error.clone());
                Err(error)
            }
        }
    }

    /// True when one complete JSON value has been read and only whitespace
    /// followed. A number at the root counts only once something ended it
    /// (more digits could still come); [`IncrementalParser::finish`] accepts
    /// it either way.
    pub fn is_complete(&self) -> bool {
        self.error.is_none() && self.state == State::End
    }

    /// End of input: the complete value, or the error (the one a feed
    /// returned, [`SyntaxErrorKind::UnexpectedEnd`] for an incomplete value).
    /// Does not call any sink: a number still open at the root is completed
    /// here and only appears in the returned value.
    pub fn finish(mut self) -> Result<JsonValue, SyntaxError> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        let expected = match self.state {
            State::End => return Ok(self.root.take().unwrap_or_default()),
            State::Num(num) if num.is_accepting() && self.stack.is_empty() => {
                return Ok(JsonValue::Number(Number::from_validated(&self.number)));
            }
            State::Value if self.stack.is_empty() => "expected a JSON value",
            State::Value | State::ArrayFirst => "expected a value",
            State::ObjectFirst | State::Key => "expected a string key",
            State::Colon => "expected ':'",
            State::AfterValue => self.after_value_expected(),
            State::Str(Escape::None) => "expected '\"' to end the string",
            State::Str(_) => "expected the rest of an escape sequence",
            State::Num(_) => "expected the rest of a number",
            State::Lit { literal, .. } => literal.parts().2,
        };
        Err(SyntaxError::new(
            SyntaxErrorKind::UnexpectedEnd,
            self.consumed,
            format!("{expected}, found end of input"),
        ))
    }

    fn run<S: ViewSink>(&mut self, text: &str, sink: &mut S) -> Result<(), SyntaxError> {
        let bytes = text.as_bytes();
        let mut pos = 0;
        while let Some(&b) = bytes.get(pos) {
            match self.state {
                State::Str(mut esc) => {
                    match string::scan(text, pos, &mut esc, &mut self.text, self.consumed)? {
                        Some(next) => {
                            pos = next;
                            self.end_string(sink);
                        }
                        None => {
                            self.state = State::Str(esc);
                            return Ok(());
                        }
                    }
                }
                State::Num(num) => pos = self.read_number(num, text, pos, sink)?,
                State::Lit { literal, matched } => {
                    pos = self.read_literal(literal, matched, text, pos, sink)?
                }
                _ if matches!(b, b' ' | b'\t' | b'\n' | b'\r') => pos += 1,
                _ => {
                    self.structural(b, text, pos, sink)?;
                    pos += 1;
                }
            }
        }
        Ok(())
    }

    /// One byte outside strings, numbers and literals (not whitespace).
    fn structural<S: ViewSink>(
        &mut self,
        b: u8,
        text: &str,
        pos: usize,
        sink: &mut S,
    ) -> Result<(), SyntaxError> {
        match self.state {
            State::ArrayFirst if b == b']' => self.close_container(sink),
            State::Value | State::ArrayFirst => match b {
                b'{' => self.open_container(ContainerKind::Object, pos, sink)?,
                b'[' => self.open_container(ContainerKind::Array, pos, sink)?,
                b'"' => {
                    sink.open(self.slot_key(), ContainerKind::String);
                    self.begin_string(false);
                }
                b't' => self.state = State::Lit { literal: Literal::True, matched: 1 },
                b'f' => self.state = State::Lit { literal: Literal::False, matched: 1 },
                b'n' => self.state = State::Lit { literal: Literal::Null, matched: 1 },
                _ => match NumState::start(b) {
                    Some(num) => {
                        self.number.clear();
                        self.number.push(char::from(b));
                        self.state = State::Num(num);
                    }
                    None if self.state == State::ArrayFirst => {
                        return Err(self.unexpected("expected a value or ']'", text, pos))
                    }
                    None => return Err(self.unexpected("expected a value", text, pos)),
                },
            },
            State::ObjectFirst | State::Key if b == b'"' => self.begin_string(true),
            State::ObjectFirst if b == b'}' => self.close_container(sink),
            State::ObjectFirst => return Err(self.unexpected("expected a string key or '}'", text, pos)),
            State::Key => return Err(self.unexpected("expected a string key", text, pos)),
            State::Colon if b == b':' => self.state = State::Value,
            State::Colon => return Err(self.unexpected("expected ':'", text, pos)),
            State::AfterValue => match (self.stack.last(), b) {
                (Some(Frame::Array(_)), b',') => self.state = State::Value,
                (Some(Frame::Object { .. }), b',') => self.state = State::Key,
                (Some(Frame::Array(_)), b']') | (Some(Frame::Object { .. }), b'}') => {
                    self.close_container(sink)
                }
                _ => return Err(self.unexpected(self.after_value_expected(), text, pos)),
            },
            State::End => {
                let message = format!("trailing characters after the JSON value: {}", found(text, pos));
                return Err(SyntaxError::new(SyntaxErrorKind::TrailingData, self.consumed + pos, message));
            }
            State::Str(_) | State::Num(_) | State::Lit { .. } => {}
        }
        Ok(())
    }

    fn begin_string(&mut self, in_key: bool) {
        self.text.clear();
        self.flushed = 0;
        self.in_key = in_key;
        self.state = State::Str(Escape::None);
    }

    /// The closing quote of a string was read.
    fn end_string<S: ViewSink>(&mut self, sink: &mut S) {
        let text = std::mem::take(&mut self.text);
        if self.in_key {
            if let Some(Frame::Object { key, .. }) = self.stack.last_mut() {
                *key = Some(text);
            }
            self.state = State::Colon;
        } else {
            if let Some(rest) = text.get(self.flushed..).filter(|rest| !rest.is_empty()) {
                sink.append(rest);
            }
            self.flushed = 0;
            sink.close();
            self.attach(JsonValue::String(text));
        }
    }

    /// Gives the sink the part of a value string it has not seen yet.
    fn flush<S: ViewSink>(&mut self, sink: &mut S) {
        if self.in_key || !matches!(self.state, State::Str(_)) {
            return;
        }
        if let Some(rest) = self.text.get(self.flushed..).filter(|rest| !rest.is_empty()) {
            sink.append(rest);
            self.flushed = self.text.len();
        }
    }

    /// Reads number bytes from `pos`; returns where reading goes on.
    fn read_number<S: ViewSink>(
        &mut self,
        mut num: NumState,
        text: &str,
        pos: usize,
        sink: &mut S,
    ) -> Result<usize, SyntaxError> {
        let bytes = text.as_bytes();
        let mut end = pos;
        loop {
            let Some(&b) = bytes.get(end) else {
                self.number.push_str(text.get(pos..end).unwrap_or_default());
                self.state = State::Num(num);
                return Ok(end);
            };
            match num.step(b) {
                Step::Next(next) => {
                    num = next;
                    end += 1;
                }
                Step::End if num.is_accepting() => break,
                Step::End | Step::Invalid => {
                    let message = format!("{}, found {}", num.problem(), found(text, end));
                    return Err(SyntaxError::new(
                        SyntaxErrorKind::InvalidNumber,
                        self.consumed + end,
                        message,
                    ));
                }
            }
        }
        // Number bytes are ASCII: `pos..end` is on char boundaries.
        self.number.push_str(text.get(pos..end).unwrap_or_default());
        let value = JsonValue::Number(Number::from_validated(&self.number));
        self.number.clear();
        self.complete_scalar(value, sink);
        // The byte that ended the number is read again in the new state.
        Ok(end)
    }

    fn read_literal<S: ViewSink>(
        &mut self,
        literal: Literal,
        mut matched: u8,
        text: &str,
        mut pos: usize,
        sink: &mut S,
    ) -> Result<usize, SyntaxError> {
        let (expected, value, problem) = literal.parts();
        while let Some(&want) = expected.get(usize::from(matched)) {
            match text.as_bytes().get(pos) {
                None => {
                    self.state = State::Lit { literal, matched };
                    return Ok(pos);
                }
                Some(&b) if b == want => {
                    pos += 1;
                    matched += 1;
                }
                Some(_) => return Err(self.unexpected(problem, text, pos)),
            }
        }
        self.complete_scalar(value, sink);
        Ok(pos)
    }

    fn open_container<S: ViewSink>(
        &mut self,
        kind: ContainerKind,
        pos: usize,
        sink: &mut S,
    ) -> Result<(), SyntaxError> {
        if self.stack.len() >= self.max_depth {
            let message = format!("arrays and objects nested deeper than {} levels", self.max_depth);
            return Err(SyntaxError::new(SyntaxErrorKind::TooDeep, self.consumed + pos, message));
        }
        sink.open(self.slot_key(), kind);
        let (frame, state) = match kind {
            ContainerKind::Object => (Frame::Object { pairs: Vec::new(), key: None }, State::ObjectFirst),
            _ => (Frame::Array(Vec::new()), State::ArrayFirst),
        };
        self.stack.push(frame);
        self.state = state;
        Ok(())
    }

    fn close_container<S: ViewSink>(&mut self, sink: &mut S) {
        let value = match self.stack.pop() {
            Some(Frame::Array(items)) => JsonValue::Array(items),
            Some(Frame::Object { pairs, .. }) => JsonValue::Object(pairs),
            None => return,
        };
        sink.close();
        self.attach(value);
    }

    fn complete_scalar<S: ViewSink>(&mut self, value: JsonValue, sink: &mut S) {
        sink.scalar(self.slot_key(), &value);
        self.attach(value);
    }

    /// Puts a complete value into its slot.
    fn attach(&mut self, value: JsonValue) {
        match self.stack.last_mut() {
            None => {
                self.root = Some(value);
                self.state = State::End;
            }
            Some(Frame::Array(items)) => {
                items.push(value);
                self.state = State::AfterValue;
            }
            Some(Frame::Object { pairs, key }) => {
                pairs.push((key.take().unwrap_or_default(), value));
                self.state = State::AfterValue;
            }
        }
    }

    /// The key of the slot a value starting now goes to.
    fn slot_key(&self) -> Option<&str> {
        match self.stack.last() {
            Some(Frame::Object { key, .. }) => key.as_deref(),
            _ => None,
        }
    }

    fn after_value_expected(&self) -> &'static str {
        match self.stack.last() {
            Some(Frame::Object { .. }) => "expected ',' or '}'",
            _ => "expected ',' or ']'",
        }
    }

    fn unexpected(&self, expected: &str, text: &str, pos: usize) -> SyntaxError {
        let message = format!("{expected}, found {}", found(text, pos));
        SyntaxError::new(SyntaxErrorKind::Unexpected, self.consumed + pos, message)
    }
}

/// Parses a whole JSON text at once (a feed with a no-op sink, then finish).
pub fn parse_complete(text: &str) -> Result<JsonValue, SyntaxError> {
    let mut parser = IncrementalParser::new();
    parser.feed(text, &mut ())?;
    parser.finish()
}

#[cfg(test)]
mod tests {
    // Exact events, errors and their offsets. The view against serde_json over
    // every split of a corpus and random values is in `tests/json_incremental.rs`.
    // And the parser's work, counted: bytes handed to the parser, bytes its
    // string scanner copies, and bytes stored as view events. It guards
    // "linear in the argument bytes" without timing anything (`bin/bench`'s
    // scaling pairs measure the time).

    use super::*;
    use crate::chat::{ChatProcessor, Options};
    use crate::output::Item;

    thread_local! {
        static WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Counts `bytes` of parser work on this thread.
    pub(super) fn count(bytes: usize) {
        WORK.with(|b| b.set(b.get().saturating_add(bytes as u64)));
    }

    /// The work counted on this thread since the last call.
    fn take() -> u64 {
        WORK.with(|b| b.replace(0))
    }

    /// Arguments of about `size` bytes: one long string with escapes and
    /// multibyte characters, and an array of small objects.
    fn arguments(size: usize) -> String {
        let mut content = String::new();
        let mut items = Vec::new();
        let mut n = 0;
        while content.len() + items.len() * 36 < size {
            content.push_str("Line with \"quotes\", a tab\t, héllo 😀 and a path C:\\dir\n");
            items.push(serde_json::json!({"id": n, "name": format!("item {n}"), "ok": n % 2 == 0}));
            n += 1;
        }
        serde_json::to_string(&serde_json::json!({"content": content, "items": items})).unwrap_or_default()
    }

    /// One SSE event per argument fragment of about `size` bytes.
    fn sse(arguments: &str, size: usize) -> String {
        let event = |delta: serde_json::Value| {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]});
            format!("data: {chunk}\n\n")
        };
        let mut out =
            event(serde_json::json!({"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}));
        let mut start = 0;
        while start < arguments.len() {
            let mut end = (start + size).min(arguments.len());
            while !arguments.is_char_boundary(end) {
                end += 1;
            }
            out.push_str(&event(
                serde_json::json!({"index": 0, "function": {"arguments": &arguments[start..end]}}),
            ));
            start = end;
        }
        out.push_str("data: [DONE]\n\n");
        out
    }

    /// The work to stream `arguments` in 5-byte fragments with partial tool
    /// calls, checking that the call comes out with the right parameters.
    fn work_for(arguments: &str) -> u64 {
        let bytes = sse(arguments, 5);
        let mut processor = ChatProcessor::new(Options { partial_tool_calls: true, ..Options::default() });
        take();
        // Reads of 4 KiB, as from an HTTP body.
        for read in bytes.as_bytes().chunks(4096) {
            assert!(processor.decode(read).is_ok());
        }
        let out = processor.finish();
        let work = take();
        let expected: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
        let completed: Vec<JsonValue> = out
            .map(|o| {
                o.items()
                    .filter_map(|i| match i {
                        Item::Completed(_, params) => Some(params.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(completed.len(), 1);
        let got = completed.first().map(JsonValue::to_json).unwrap_or_default();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&got).ok(), Some(expected));
        work
    }

    #[test]
    fn partial_parsing_work_is_linear_in_the_argument_bytes() {
        let small = arguments(40_000);
        let big = arguments(400_000);
        let (small_work, big_work) = (work_for(&small), work_for(&big));
        let ratio = big_work as f64 / small_work as f64;
        let size_ratio = big.len() as f64 / small.len() as f64;
        // Linear: ten times the bytes, about ten times the work. Re-reading
        // the prefix on each fragment would make it about a hundred.
        assert!(
            ratio <= size_ratio * 1.2,
            "{} bytes: work {big_work}; {} bytes: work {small_work}; {ratio:.1}x the work for {size_ratio:.1}x the bytes",
            big.len(),
            small.len(),
        );
        // And a few passes over the arguments at most, whatever their size.
        assert!(big_work <= 4 * big.len() as u64, "work {big_work} for {} argument bytes", big.len());
    }

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
        assert_eq!(view.iter().count(), 4);
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
        for text in [
            r#""abc"#,
            r#""a\"#,
            r#""\u12"#,
            r#""\ud83d"#,
            r#""\ud83d\"#,
            r#""\ud83d\u"#,
            "tr",
            "-",
            "1.",
            "1e+",
        ] {
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
        assert_eq!(parser.finish().map_err(|e| e.offset), Err(14));
    }

    #[test]
    fn a_parser_that_failed_stays_failed() {
        let mut parser = IncrementalParser::new();
        let mut log = Log::default();
        parser.feed(r#"{"a": "x"#, &mut log).unwrap();
        let e = parser.feed("\u{1}", &mut log).unwrap_err();
        assert_eq!(e.kind, SyntaxErrorKind::ControlCharacter);
        assert!(!parser.is_complete());
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
}
