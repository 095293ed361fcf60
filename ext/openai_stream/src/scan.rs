//! The byte scanner both protocols read their usual events with: a strict,
//! single-pass reader of JSON text that gives up (`None`) on anything it
//! does not read exactly as serde_json would, so its caller can leave that
//! to serde_json. What each protocol reads with it is its own
//! (`chat/scan/`).

use std::borrow::Cow;

use crate::json::short_escape;
use crate::lenient::Field;

/// Deepest nesting of a skipped value the scanner follows (serde_json's
/// limit, 128, is far above; deeper values go to serde_json).
const MAX_SKIP_DEPTH: u32 = 32;

/// Digits of an integer the scanner reads or skips (fits an i64; longer
/// numbers go to serde_json, which knows when they overflow).
const MAX_DIGITS: usize = 18;

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
    pub(crate) src: &'a str,
    bytes: &'a [u8],
    pub(crate) pos: usize,
    /// The strings a template could vary (see [`Varying`]).
    pub(crate) varying: Varying,
}

/// Where the strings that change from event to event were read: each
/// `delta.content` (or `message.content`) and `function.arguments` string.
/// A template is made only when there was exactly one.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Varying {
    pub(crate) count: u32,
    /// The last one: its first byte after the opening quote, and the
    /// position of its closing quote.
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Scanner { src, bytes: src.as_bytes(), pos: 0, varying: Varying::default() }
    }

    /// Only whitespace is left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.ws();
        self.pos == self.bytes.len()
    }

    #[inline]
    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    pub(crate) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    #[inline]
    pub(crate) fn eat(&mut self, b: u8) -> Option<()> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    /// `word`, when the bytes at the current position are that.
    #[inline]
    pub(crate) fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        self.bytes.get(self.pos..end).filter(|b| same(b, word))?;
        self.pos = end;
        Some(())
    }

    // ---- strings ----------------------------------------------------------

    /// The string whose JSON text, quotes included, is `quoted` (a string
    /// without escapes), when the text at the current position is that.
    #[inline(always)]
    pub(crate) fn same_string(&mut self, quoted: &str) -> Option<&'a str> {
        let start = self.pos;
        self.literal(quoted.as_bytes())?;
        self.src.get(start + 1..self.pos - 1)
    }

    /// A string at the current position, borrowed when it has no escapes.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        self.string_body()
    }

    /// A string that a template may vary: read as `string`, where it was
    /// is recorded.
    pub(crate) fn varying_string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.pos;
        let text = self.string_body()?;
        self.varying = Varying { count: self.varying.count + 1, start, end: self.pos - 1 };
        Some(text)
    }

    /// The rest of a string whose opening quote was read, up to and
    /// including its closing quote.
    #[inline]
    pub(crate) fn string_body(&mut self) -> Option<Cow<'a, str>> {
        let start = self.pos;
        let stop = self.stop()?;
        if self.bytes[stop] == b'"' {
            self.pos = stop + 1;
            return Some(Cow::Borrowed(&self.src[start..stop]));
        }
        self.escaped(start, stop)
    }

    /// The rest of a string from `start`, whose text up to `stop` (a
    /// backslash or a control character) has no escape. Apart from
    /// `string_body`, which is inlined where strings are read: most strings
    /// have no escape.
    #[inline(never)]
    fn escaped(&mut self, start: usize, stop: usize) -> Option<Cow<'a, str>> {
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
    pub(crate) fn stop(&self) -> Option<usize> {
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
    pub(crate) fn skip_string(&mut self) -> Option<()> {
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
    pub(crate) fn escape(&mut self) -> Option<char> {
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
    pub(crate) fn integer(&mut self) -> Option<i64> {
        let start = self.pos;
        self.integer_digits()?;
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        // At most 18 digits: no overflow.
        Some(self.bytes[start..self.pos].iter().fold(0, |n, &d| n * 10 + i64::from(d - b'0')))
    }

    /// One to [`MAX_DIGITS`] digits, without a leading zero (but `0`).
    pub(crate) fn integer_digits(&mut self) -> Option<()> {
        let start = self.pos;
        let digits = self.digits();
        ((1..=MAX_DIGITS).contains(&digits) && (digits == 1 || self.bytes[start] != b'0')).then_some(())
    }

    pub(crate) fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Skips a number: JSON's grammar, without an exponent (serde_json may
    /// find one out of range) and with short digit runs.
    pub(crate) fn skip_number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        self.integer_digits()?;
        if self.eat(b'.').is_some() && !(1..=MAX_DIGITS).contains(&self.digits()) {
            return None;
        }
        (!matches!(self.peek(), Some(b'e' | b'E'))).then_some(())
    }

    /// Skips any JSON value at the current position. (Strings and numbers,
    /// what most skipped values are, where it is inlined; the rest apart.)
    #[inline]
    pub(crate) fn skip(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => self.skip_other(depth),
        }
    }

    #[inline(never)]
    fn skip_other(&mut self, depth: u32) -> Option<()> {
        let inner = (depth < MAX_SKIP_DEPTH).then_some(depth + 1);
        match self.peek()? {
            b'{' => inner.and_then(|depth| self.object(|s, _| s.skip(depth))),
            b'[' => inner.and_then(|depth| self.array(|s| s.skip(depth))),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
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
    pub(crate) fn members(
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
    pub(crate) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
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
    pub(crate) fn open(&mut self, open: u8, close: u8) -> Option<bool> {
        self.eat(open)?;
        self.ws();
        Some(self.eat(close).is_none())
    }

    /// After an item of a container: whether another follows (a comma) or
    /// `close` ends it.
    #[inline(always)]
    pub(crate) fn next_item(&mut self, close: u8) -> Option<bool> {
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
    pub(crate) fn field<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Field<T>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(Field::Null);
        }
        read(self).map(Field::Value)
    }

    /// A field holding `null` or an object that `fill` reads into a
    /// default value, in place (these values are large; no moves).
    #[inline]
    pub(crate) fn object_field<T: Default>(
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
}

/// Longest text a template keeps around its holes.
const MAX_KEPT: usize = 4096;

/// The text of an event read with the values that change from event to
/// event cut out (its holes): the next event that has the same bytes around
/// other values is read by reading those values alone (see
/// [`Template::read`]). Each protocol decides what the holes are and what
/// reading one does: the chat processor cuts out a chunk's one text or
/// arguments string (`chat/scan/template.rs`), the Responses processor the
/// member values of a delta event that may vary (`responses/scan.rs`).
#[derive(Debug)]
pub(crate) struct Template<H> {
    /// The text before the first hole. (The parts are `String`s: each is
    /// valid UTF-8 on its own, which [`Template::read`] relies on.)
    prefix: String,
    /// Each hole, with the text after it up to the next hole (after the
    /// last, to the end: the suffix).
    holes: Vec<(H, String)>,
}

impl<H: Copy> Template<H> {
    /// `text` with `holes` cut out (each value's start and end, in order,
    /// and what it is); None when there is none, when they are not in
    /// order, or when the text kept is too long.
    pub(crate) fn cut(text: &str, holes: &[(usize, usize, H)]) -> Option<Template<H>> {
        let prefix = text.get(..holes.first()?.0)?.to_owned();
        let mut kept = prefix.len();
        let mut parts = Vec::with_capacity(holes.len());
        for (i, &(start, end, hole)) in holes.iter().enumerate() {
            let next = holes.get(i + 1).map_or(text.len(), |h| h.0);
            let after = text.get(end..next).filter(|_| start < end)?;
            kept += after.len();
            parts.push((hole, after.to_owned()));
        }
        (kept <= MAX_KEPT).then_some(Template { prefix, holes: parts })
    }

    /// The bytes as this template with other values in its holes: `read`
    /// reads each value at the scanner's position, as the text it was cut
    /// from had it read (None: it cannot). The bytes as text when they are.
    /// A JSON reader reaches each value in the same state as in that text,
    /// reads it, and goes on over the same bytes: the event is that text's
    /// with these values. Only the bytes between prefix and suffix are
    /// checked for UTF-8: the prefix and suffix are text, so the whole is
    /// text when they are (the standard check of a whole payload was a
    /// tenth of an event).
    #[inline(always)]
    pub(crate) fn read<'a>(
        &self,
        bytes: &'a [u8],
        mut read: impl FnMut(&mut Scanner<'a>, H) -> Option<()>,
    ) -> Option<&'a str> {
        let (_, suffix) = self.holes.last()?;
        let value_end = bytes.len().checked_sub(suffix.len())?;
        if value_end < self.prefix.len()
            || !bytes.starts_with(self.prefix.as_bytes())
            || !bytes.ends_with(suffix.as_bytes())
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
        // (`read` is called in one place, where it is inlined.)
        let last = self.holes.len() - 1;
        for (i, (hole, after)) in self.holes.iter().enumerate() {
            read(&mut s, *hole)?;
            if i == last {
                break;
            }
            match bytes.get(s.pos..s.pos + after.len()) {
                Some(b) if same(b, after.as_bytes()) => s.pos += after.len(),
                _ => return None,
            }
        }
        // The last value must end where the suffix starts, not earlier.
        (s.pos == value_end).then_some(text)
    }
}

/// Whether two texts are equal: those of up to 16 bytes (the keys between
/// a template's holes, item ids) by two overlapping words, without a call
/// of `memcmp` (whose calls took a tenth of a Responses arguments event's
/// time, perf on the core alone); longer ones (a prefix, a suffix) by it.
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word =
        |t: &[u8], at: usize| t.get(at..at + 8).and_then(|w| w.try_into().ok()).map(u64::from_le_bytes);
    match n {
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        0..=7 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}
