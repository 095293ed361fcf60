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
use crate::lenient::{Any, Field, Id, Int, List, Text};
use crate::usage::Tokens;

/// The shared scanner (the chunk model's readers below are its methods).
pub(crate) use crate::scan::Scanner;
use crate::scan::Varying;

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

impl<'a> Scanner<'a> {
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
