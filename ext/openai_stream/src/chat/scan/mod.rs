//! The fast path for reading a chunk from JSON text: a strict, single-pass
//! byte scanner for the shapes servers send on every event.
//!
//! It builds exactly the [`Chunk`] the serde path ([`Chunk::from_json`])
//! builds, and gives up (`None`) on anything it does not handle the same
//! way: a syntax error or truncated JSON, a field of an unexpected type
//! (the lenient model records those as `Converted` or `Wrong`), content
//! parts, object arguments, error payloads, surrogate escapes, numbers that
//! are not plain integers where an integer is read, unusually deep values.
//! The caller then reads the text with serde_json, which decides. So the
//! scanner never accepts what serde_json rejects, and when it accepts, the
//! result is the same (tests/scan.rs checks both on every fixture, the
//! benchmark workloads and mutations of them).
//!
//! Why it exists: serde's visitor layers, the lenient wrappers and the moves
//! of the large `Chunk` value between them cost several times the scanning
//! itself, on every event of every stream. Without it the raw path misses
//! its targets (docs/decisions.md).

use std::borrow::Cow;

use super::{Chunk, Content};
use crate::calls::Arguments;
use crate::json::short_escape;
use crate::lenient::{Any, Field, Id, Int, List, Text};
use crate::usage::Tokens;

/// Deepest nesting of a skipped value the scanner follows (serde_json's
/// limit, 128, is far above; deeper values go to serde_json).
const MAX_SKIP_DEPTH: u32 = 32;

/// Digits of an integer the scanner reads or skips (fits an i64; longer
/// numbers go to serde_json, which knows when they overflow).
const MAX_DIGITS: usize = 18;

mod template;

use template::{CallAt, Template};

/// What a stream's scanner remembers of the last chunk it read, so that the
/// next one, which nearly always repeats most of its bytes, costs less: a
/// cache of a pure function, where only equal bytes are reused. Each
/// processor keeps its own.
///
/// - The envelope (id, object, created, model, ...): the bytes before the
///   first `choices` value and what they held. A chunk that starts with the
///   same bytes takes those fields from here instead of scanning them.
/// - The template: when the last chunk was nothing but a text or arguments
///   delta, everything but the one string that changes from event to
///   event. A chunk with the same bytes before and after that string is the
///   same delta with a new string, applied without a chunk (see [`plain`]).
#[derive(Debug, Default)]
pub struct ScanMemo {
    envelope: Envelope,
    template: Option<Template>,
}

/// Reads one chunk into `out` (a default chunk), or returns false when
/// serde_json must decide (see the module documentation); `out` then holds
/// a part of the chunk and is to be thrown away.
pub fn read<'a>(text: &'a str, out: &mut Chunk<'a>, memo: &mut ScanMemo) -> bool {
    let last = &mut memo.envelope;
    let mut s = Scanner::new(text);
    let ok = if !last.prefix.is_empty() && text.as_bytes().starts_with(&last.prefix) {
        // The same bytes as last time up to the first `choices` value: the
        // same fields, read from this text at the same offsets.
        last.fields.apply(text, out);
        s.pos = last.prefix.len();
        let choices = Some(Cow::Borrowed("choices"));
        s.chunk_members(out, choices, &mut None).is_some() && s.at_end()
    } else {
        let mut recorded = None;
        s.ws();
        let ok = s
            .open(b'{', b'}')
            .is_some_and(|more| !more || s.chunk_members(out, None, &mut Some(&mut recorded)).is_some())
            && s.at_end();
        if let (true, Some((end, fields))) = (ok, recorded) {
            last.prefix.clear();
            last.prefix.extend_from_slice(&text.as_bytes()[..end]);
            last.fields = fields;
        }
        ok
    };
    if ok {
        memo.template = Template::of(text, out, s.varying);
    }
    ok
}

/// A chunk that is nothing but one delta (see [`plain`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Plain<'a> {
    /// `choices[0].delta.content`, a string.
    Text(Cow<'a, str>),
    /// `choices[0].delta.tool_calls`, one element.
    Call(PlainCall<'a>),
}

/// The one element of a plain delta's `tool_calls`: its arguments string
/// and where its other fields are (see [`PlainCall::with_delta`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PlainCall<'a> {
    text: &'a str,
    arguments: Cow<'a, str>,
    call: CallAt,
}

/// The bytes of a payload when they are the stream's last plain text or
/// arguments delta with another string, and that chunk is nothing but its
/// delta (see `Template::plain`): what the processor reads of it, without
/// the chunk being built. None: [`read`] the text (the UTF-8 check
/// included) as usual.
#[inline]
pub fn plain<'a>(bytes: &'a [u8], memo: &ScanMemo) -> Option<Plain<'a>> {
    memo.template.as_ref()?.plain(bytes)
}

/// Longest envelope remembered.
const MAX_ENVELOPE: usize = 1024;

/// What the top-level members before the first `choices` key leave in a
/// chunk, with the bytes they were read from (up to the `choices` value).
/// Only plain cases are remembered: unknown members (skipped) and `object`,
/// `message` (absent, null or unescaped text), `error`, `usage`, `x_groq`
/// (absent or null).
#[derive(Debug, Default)]
struct Envelope {
    /// Empty: nothing remembered.
    prefix: Vec<u8>,
    fields: EnvelopeFields,
}

#[derive(Debug, Default, Clone, Copy)]
struct EnvelopeFields {
    object: TextAt,
    message: TextAt,
    error: Absent,
    usage: Absent,
    x_groq: Absent,
}

/// A field that is absent or null.
#[derive(Debug, Default, Clone, Copy)]
enum Absent {
    #[default]
    Missing,
    Null,
}

/// A text field as absent, null, or the byte range of its unescaped text.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum TextAt {
    #[default]
    Missing,
    Null,
    At(usize, usize),
}

impl EnvelopeFields {
    /// The envelope of the chunk being read, when the scanner is at the
    /// value of its first `choices`: where it ends and what it holds (None
    /// when it is not a plain one).
    fn of(s: &Scanner<'_>, c: &Chunk<'_>) -> Option<(usize, EnvelopeFields)> {
        if s.pos > MAX_ENVELOPE || c.choices != Field::Missing {
            return None;
        }
        Some((s.pos, EnvelopeFields::before(s.src, s.src.len(), c)?))
    }

    /// The top-level fields of `c`, read from `src` before `limit`, when
    /// they are plain ones.
    fn before(src: &str, limit: usize, c: &Chunk<'_>) -> Option<EnvelopeFields> {
        Some(EnvelopeFields {
            object: TextAt::of(src, limit, &c.object, |t| &t.0)?,
            message: TextAt::of(src, limit, &c.message, |t| &t.0)?,
            error: Absent::of(&c.error)?,
            usage: Absent::of(&c.usage)?,
            x_groq: Absent::of(&c.x_groq)?,
        })
    }

    #[inline]
    fn apply<'a>(self, text: &'a str, c: &mut Chunk<'a>) {
        c.object = self.object.get(text, Text);
        c.message = self.message.get(text, Text);
        c.error = self.error.get();
        c.usage = self.usage.get();
        c.x_groq = self.x_groq.get();
    }
}

impl Absent {
    fn of<T>(field: &Field<T>) -> Option<Absent> {
        match field {
            Field::Missing => Some(Absent::Missing),
            Field::Null => Some(Absent::Null),
            _ => None,
        }
    }

    fn get<T>(self) -> Field<T> {
        match self {
            Absent::Missing => Field::Missing,
            Absent::Null => Field::Null,
        }
    }
}

impl TextAt {
    /// A text field as its place in `src` (before `limit`), when it is
    /// absent, null, or text borrowed from there (a text with escapes was
    /// decoded into a String of its own: no place to remember).
    fn of<T>(src: &str, limit: usize, field: &Field<T>, text: impl Fn(&T) -> &str) -> Option<TextAt> {
        match field {
            Field::Missing => Some(TextAt::Missing),
            Field::Null => Some(TextAt::Null),
            Field::Value(value) => {
                let t = text(value);
                let start = (t.as_ptr() as usize).checked_sub(src.as_ptr() as usize)?;
                (start + t.len() <= limit.min(src.len())).then_some(TextAt::At(start, start + t.len()))
            }
            Field::Converted(..) | Field::Wrong(_) => None,
        }
    }

    /// The field read from `text`, its text wrapped as `T` (`Text`, `Id`).
    #[inline(always)]
    fn get<'a, T>(self, text: &'a str, wrap: fn(Cow<'a, str>) -> T) -> Field<T> {
        match self {
            TextAt::Missing => Field::Missing,
            TextAt::Null => Field::Null,
            TextAt::At(start, end) => Field::Value(wrap(Cow::Borrowed(&text[start..end]))),
        }
    }
}

/// Bytes that end the fast part of a string: the quote, a backslash, and
/// control characters (which JSON forbids unescaped).
static STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

pub(crate) struct Scanner<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// The strings a template could vary (see [`Varying`]).
    varying: Varying,
}

/// Where the strings that change from event to event were read: each
/// `delta.content` (or `message.content`) and `function.arguments` string.
/// A template is made only when there was exactly one.
#[derive(Debug, Default, Clone, Copy)]
struct Varying {
    count: u32,
    /// The last one: its first byte after the opening quote, and the
    /// position of its closing quote.
    start: usize,
    end: usize,
}

impl<'a> Scanner<'a> {
    fn new(src: &'a str) -> Self {
        Scanner { src, bytes: src.as_bytes(), pos: 0, varying: Varying::default() }
    }

    /// Only whitespace is left.
    fn at_end(&mut self) -> bool {
        self.ws();
        self.pos == self.bytes.len()
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    #[inline]
    fn eat(&mut self, b: u8) -> Option<()> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    // ---- strings ----------------------------------------------------------

    /// A string at the current position, borrowed when it has no escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        self.string_body()
    }

    /// A string that a template may vary: read as `string`, where it was
    /// is recorded.
    fn varying_string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.pos;
        let text = self.string_body()?;
        self.varying = Varying { count: self.varying.count + 1, start, end: self.pos - 1 };
        Some(text)
    }

    /// The rest of a string whose opening quote was read, up to and
    /// including its closing quote.
    fn string_body(&mut self) -> Option<Cow<'a, str>> {
        let start = self.pos;
        let stop = self.stop()?;
        if self.bytes[stop] == b'"' {
            self.pos = stop + 1;
            return Some(Cow::Borrowed(&self.src[start..stop]));
        }
        let mut owned = String::with_capacity(stop - start + 16);
        owned.push_str(&self.src[start..stop]);
        self.pos = stop;
        loop {
            // At a backslash (a control character fails in `escape`).
            owned.push(self.escape()?);
            let from = self.pos;
            let stop = self.stop()?;
            owned.push_str(&self.src[from..stop]);
            self.pos = stop;
            if self.bytes[stop] == b'"' {
                self.pos += 1;
                return Some(Cow::Owned(owned));
            }
        }
    }

    /// The position of the next quote, backslash or control character:
    /// eight bytes at a time, then byte by byte.
    #[inline]
    fn stop(&self) -> Option<usize> {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let mut at = self.pos;
        while let Some(chunk) = self.bytes.get(at..at + 8) {
            let word = u64::from_le_bytes(chunk.try_into().ok()?);
            let quote = word ^ (ONES * b'"' as u64);
            let backslash = word ^ (ONES * b'\\' as u64);
            // The lowest flagged byte of each test is exact (borrows only
            // flag bytes above a real match), so the lowest of all is.
            let found = ((quote.wrapping_sub(ONES) & !quote)
                | (backslash.wrapping_sub(ONES) & !backslash)
                | (word.wrapping_sub(ONES * 0x20) & !word))
                & HIGH;
            if found != 0 {
                return Some(at + (found.trailing_zeros() / 8) as usize);
            }
            at += 8;
        }
        self.bytes[at..].iter().position(|&b| STRING_STOP[b as usize]).map(|i| at + i)
    }

    /// A string at the current position, checked as `string` checks it but
    /// not copied: a skipped value's escapes cost no allocation.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.pos = self.stop()?;
            if self.bytes[self.pos] == b'"' {
                self.pos += 1;
                return Some(());
            }
            self.escape()?;
        }
    }

    /// One escape sequence at the current position (a backslash), decoded.
    /// Surrogates (`\uD800`-`\uDFFF`) are left to serde_json.
    fn escape(&mut self) -> Option<char> {
        self.eat(b'\\')?;
        let b = self.peek()?;
        let c = match short_escape(b) {
            Some(c) => c,
            None if b == b'u' => {
                let hex = self.bytes.get(self.pos + 1..self.pos + 5)?;
                let mut code = 0u32;
                for &h in hex {
                    code = code * 16 + (h as char).to_digit(16)?;
                }
                self.pos += 4;
                char::from_u32(code)?
            }
            _ => return None,
        };
        self.pos += 1;
        Some(c)
    }

    // ---- numbers and skipped values ---------------------------------------

    /// A non-negative integer of at most [`MAX_DIGITS`] digits, no fraction
    /// or exponent (serde_json reads those as floats).
    fn integer(&mut self) -> Option<i64> {
        let start = self.pos;
        self.integer_digits()?;
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        self.src[start..self.pos].parse().ok()
    }

    /// One to [`MAX_DIGITS`] digits, without a leading zero (but `0`).
    fn integer_digits(&mut self) -> Option<()> {
        let start = self.pos;
        let digits = self.digits();
        ((1..=MAX_DIGITS).contains(&digits) && (digits == 1 || self.bytes[start] != b'0')).then_some(())
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Skips a number: JSON's grammar, without an exponent (serde_json may
    /// find one out of range) and with short digit runs.
    fn skip_number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        self.integer_digits()?;
        if self.eat(b'.').is_some() && !(1..=MAX_DIGITS).contains(&self.digits()) {
            return None;
        }
        (!matches!(self.peek(), Some(b'e' | b'E'))).then_some(())
    }

    /// Skips any JSON value at the current position.
    pub(crate) fn skip(&mut self, depth: u32) -> Option<()> {
        let inner = (depth < MAX_SKIP_DEPTH).then_some(depth + 1);
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => inner.and_then(|depth| self.object(|s, _| s.skip(depth))),
            b'[' => inner.and_then(|depth| self.array(|s| s.skip(depth))),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    // ---- containers -------------------------------------------------------

    /// An object at the current position; `member` reads each value (the
    /// position is at the value, after whitespace).
    pub(crate) fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>,
    ) -> Option<()> {
        match self.open(b'{', b'}')? {
            true => self.members(None, &mut member),
            false => Some(()),
        }
    }

    /// The members of an object, from a key; or, with `pending`, from the
    /// value of that key (the text is read up to its colon).
    fn members(
        &mut self,
        mut pending: Option<Cow<'a, str>>,
        member: &mut impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>,
    ) -> Option<()> {
        loop {
            let key = match pending.take() {
                Some(key) => {
                    // Whitespace the memo's bytes stopped before.
                    self.ws();
                    key
                }
                None => {
                    let key = self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    key
                }
            };
            member(self, key)?;
            if !self.next_item(b'}')? {
                return Some(());
            }
        }
    }

    /// An array at the current position; `element` reads each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        let mut more = self.open(b'[', b']')?;
        while more {
            element(self)?;
            more = self.next_item(b']')?;
        }
        Some(())
    }

    /// The opening `open` of a container: whether an item follows (or
    /// `close` ends it at once).
    #[inline(always)]
    fn open(&mut self, open: u8, close: u8) -> Option<bool> {
        self.eat(open)?;
        self.ws();
        Some(self.eat(close).is_none())
    }

    /// After an item of a container: whether another follows (a comma) or
    /// `close` ends it.
    #[inline(always)]
    fn next_item(&mut self, close: u8) -> Option<bool> {
        self.ws();
        let more = match self.peek()? {
            b',' => true,
            b if b == close => false,
            _ => return None,
        };
        self.pos += 1;
        if more {
            self.ws();
        }
        Some(more)
    }

    // ---- lenient fields ---------------------------------------------------

    /// A field whose value is `null` or what `read` accepts.
    #[inline]
    fn field<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Field<T>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(Field::Null);
        }
        read(self).map(Field::Value)
    }

    /// A field holding `null` or an object that `fill` reads into a
    /// default value, in place (these values are large; no moves).
    #[inline]
    fn object_field<T: Default>(
        &mut self,
        slot: &mut Field<T>,
        fill: impl FnOnce(&mut Self, &mut T) -> Option<()>,
    ) -> Option<()> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            *slot = Field::Null;
            return Some(());
        }
        *slot = Field::Value(T::default());
        match slot {
            Field::Value(value) => fill(self, value),
            _ => None,
        }
    }

    // ---- the chunk model --------------------------------------------------

    /// The members of the top-level object (see [`Scanner::members`]).
    /// `envelope`, when given, records what the members before the first
    /// `choices` left in the chunk (see [`Envelope`]).
    fn chunk_members(
        &mut self,
        c: &mut Chunk<'a>,
        pending: Option<Cow<'a, str>>,
        envelope: &mut Option<&mut Option<(usize, EnvelopeFields)>>,
    ) -> Option<()> {
        self.members(pending, &mut |s, key| match &*key {
            "choices" => {
                if let Some(slot) = envelope.take() {
                    *slot = EnvelopeFields::of(s, c);
                }
                ScanField::scan(&mut c.choices, s)
            }
            "usage" => ScanField::scan(&mut c.usage, s),
            "x_groq" => ScanField::scan(&mut c.x_groq, s),
            "error" => ScanField::scan(&mut c.error, s),
            "object" => ScanField::scan(&mut c.object, s),
            "message" => ScanField::scan(&mut c.message, s),
            _ => s.skip(0),
        })
    }
}

/// A field type as the scanner reads it, in place: what it accepts of it
/// (anything else is left to serde_json).
pub(crate) trait ScanField<'a> {
    fn scan(slot: &mut Self, s: &mut Scanner<'a>) -> Option<()>;
}

/// A struct the scanner reads member by member (`lenient_struct!` writes
/// the impl from the struct's keys).
pub(crate) trait ScanObject<'a>: Default {
    fn scan_members(s: &mut Scanner<'a>, out: &mut Self) -> Option<()>;
}

/// Field types read as one scalar: `read` reads the value (`null` aside).
macro_rules! scan_scalar {
    ($($ty:ty => $read:expr),* $(,)?) => {
        $(impl<'a> ScanField<'a> for Field<$ty> {
            #[inline]
            fn scan(slot: &mut Self, s: &mut Scanner<'a>) -> Option<()> {
                // The last of duplicate keys wins, as in the serde path.
                *slot = s.field($read)?;
                Some(())
            }
        })*
    };
}

scan_scalar! {
    Text<'a> => |s| s.string().map(Text),
    Id<'a> => |s| s.string().map(Id),
    Int => |s| s.integer().map(Int),
    Tokens => |s| s.integer().map(Tokens::Count),
    Content<'a> => |s| s.varying_string().map(Content::Text),
    Arguments<'a> => |s| s.varying_string().map(Arguments::Text),
}

/// `error` fields: only an absent or null error is read here.
impl<'a> ScanField<'a> for Field<Any> {
    fn scan(slot: &mut Self, s: &mut Scanner<'a>) -> Option<()> {
        s.literal(b"null")?;
        *slot = Field::Null;
        Some(())
    }
}

impl<'a, T: ScanObject<'a>> ScanField<'a> for Field<T> {
    #[inline]
    fn scan(slot: &mut Self, s: &mut Scanner<'a>) -> Option<()> {
        s.object_field(slot, T::scan_members)
    }
}

/// A list of objects, each read in place (null elements are left to
/// serde_json).
impl<'a, T: ScanObject<'a>> ScanField<'a> for Field<List<T>> {
    #[inline]
    fn scan(slot: &mut Self, s: &mut Scanner<'a>) -> Option<()> {
        s.object_field(slot, |s, list| s.array(|s| T::scan_members(s, list.push_default())))
    }
}
