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
#[cfg(test)]
mod tests;
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
    /// Bytes of all successful feeds.
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
        crate::work::count(text.len());
        match self.run(text, sink) {
            Ok(()) => {
                self.flush(sink);
                self.consumed += text.len();
                Ok(())
            }
            Err(error) => {
                self.consumed = error.offset;
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

    /// True once the parser returned an error.
    pub fn is_poisoned(&self) -> bool {
        self.error.is_some()
    }

    /// Total bytes fed; for a poisoned parser, the offset of the error.
    pub fn bytes_consumed(&self) -> usize {
        self.consumed
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
