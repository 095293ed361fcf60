//! A serde `Deserializer` over Ruby values, so a Hash from `JSON.parse` goes
//! through the very same lenient chunk types as raw JSON bytes do.
//!
//! Symbols and Strings read as strings, Integers and Floats as numbers, Arrays
//! as sequences, Hashes as maps (any key type). Values of other classes have no
//! JSON meaning: they read as null and their class is recorded, so the caller
//! can report an anomaly. Nesting is bounded like serde_json's recursion limit.
//! Values under keys no chunk struct reads are not looked at.
//!
//! The usual shapes are read first by [`crate::hash_walk`], many times
//! cheaper; this reads what the walker leaves (its module docs say why both
//! are kept, with the figures).

use std::cell::RefCell;
use std::fmt;

use magnus::prelude::*;
use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::value::ReprValue;
use magnus::IntoValue;
use magnus::{Float, Integer, RArray, RHash, RString, Ruby, Symbol, Value};
use openai_stream::anomaly::{Anomaly, AnomalyKind};
use openai_stream::chunk::lenient::UNREAD;
use openai_stream::chunk::{Chunk, Field};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::hash_walk;

/// The deepest nesting accepted, as in serde_json.
pub const MAX_DEPTH: usize = 128;

/// Why a Ruby value could not be read.
#[derive(Debug)]
pub struct DeError(pub String);

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

/// What reading found that JSON has no exact reading for, as anomalies for
/// the processor to record: values of other classes (read as null) and Hash
/// keys that are not text (read as their `to_s`).
pub type Unsupported = RefCell<Vec<Anomaly>>;

fn unsupported_value(class: &str) -> Anomaly {
    Anomaly::new(
        AnomalyKind::UnsupportedValue,
        format!("a value of class {class} has no JSON meaning; read as nil"),
    )
}

/// Reads a chunk Hash (or any value given where one is expected) into `out`
/// (a default chunk): with the fast walker of `hash_walk` when it knows the
/// shape, else with serde.
/// Both build the same chunk; only serde records `unsupported` values or
/// fails.
///
/// The chunk may borrow the texts of the Hash's Strings (hence the borrow
/// of `value`, which keeps the Hash alive on the caller's stack): it must be
/// dropped before any Ruby code runs.
pub fn read_chunk<'v>(
    ruby: &Ruby,
    value: &'v Value,
    unsupported: &Unsupported,
    out: &mut Chunk<'v>,
    seen: &mut hash_walk::Seen,
) -> Result<(), DeError> {
    if RHash::from_value(*value).is_some() {
        // SAFETY: a Hash, alive while `value` is borrowed; the contract on
        // the chunk's lifetime is the caller's (above).
        if unsafe { hash_walk::read(value.as_raw(), out, seen) } {
            return Ok(());
        }
    }
    *seen = hash_walk::Seen::default();
    *out = serde_chunk(ruby, *value, unsupported)?;
    Ok(())
}

/// Reads a chunk with serde only (the path `read_chunk` falls back on).
pub fn serde_chunk(ruby: &Ruby, value: Value, unsupported: &Unsupported) -> Result<Chunk<'static>, DeError> {
    Field::<Chunk<'static>>::deserialize(RubyDe::new(ruby, value, unsupported)).map(Chunk::from_field)
}

/// `DiscourseAiStream::Native.hash_readers_for_tests(value)`: the chunk the
/// fast walker reads (nil when it leaves the value to serde) and what serde
/// reads (the chunk, or its error), both as debug text, the messages of
/// the anomalies serde found, whether the walker's chunk may be
/// forgotten instead of dropped (`Seen::borrowed_only`), and the text the
/// text-delta reader took from it (nil when it is not a bare text delta);
/// the specs compare them.
pub fn hash_readers_for_tests(ruby: &Ruby, value: Value) -> Result<RArray, magnus::Error> {
    crate::guard::guard(ruby, || {
        let mut seen = hash_walk::Seen::default();
        let fast = match RHash::from_value(value) {
            // SAFETY: a Hash; the chunk is formatted before Ruby code runs.
            Some(_) => {
                let mut chunk = Chunk::default();
                unsafe { hash_walk::read(value.as_raw(), &mut chunk, &mut seen) }
                    .then(|| format!("{chunk:?}"))
            }
            None => None,
        };
        let unsupported = Unsupported::default();
        let serde = match serde_chunk(ruby, value, &unsupported) {
            Ok(c) => format!("{c:?}"),
            Err(e) => format!("error: {e}"),
        };
        // SAFETY: a Hash; the text is copied before Ruby code runs.
        let text = match RHash::from_value(value) {
            Some(_) => unsafe { hash_walk::read_text(value.as_raw()) }.map(|(text, _)| text.to_owned()),
            None => None,
        };
        let classes = ruby.ary_new();
        for anomaly in unsupported.into_inner() {
            classes.push(anomaly.message)?;
        }
        Ok(ruby.ary_new_from_values(&[
            fast.into_value_with(ruby),
            serde.into_value_with(ruby),
            classes.as_value(),
            seen.borrowed_only.into_value_with(ruby),
            text.into_value_with(ruby),
        ]))
    })
}

/// Reads one Ruby value.
pub struct RubyDe<'r> {
    ruby: &'r Ruby,
    value: Value,
    depth: usize,
    unsupported: &'r Unsupported,
}

impl<'r> RubyDe<'r> {
    pub fn new(ruby: &'r Ruby, value: Value, unsupported: &'r Unsupported) -> Self {
        RubyDe { ruby, value, depth: 0, unsupported }
    }

    fn child(&self, value: Value) -> RubyDe<'r> {
        RubyDe { ruby: self.ruby, value, depth: self.depth + 1, unsupported: self.unsupported }
    }

    fn enter(&self) -> Result<(), DeError> {
        if self.depth >= MAX_DEPTH {
            return Err(DeError(format!("the chunk is nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }
}

/// A Ruby String that is not valid UTF-8 as it is: text in another
/// encoding is transcoded, anything else is an error.
fn transcoded_text(ruby: &Ruby, s: RString) -> Result<String, DeError> {
    // SAFETY: read before any Ruby code runs.
    let bytes = unsafe { s.as_slice() };
    if !s.is_utf8_compatible_encoding() && s.enc_get() != ruby.ascii8bit_encindex() {
        // UTF-16 and friends: let Ruby transcode.
        let utf8: Result<RString, _> = s.funcall("encode", ("UTF-8",));
        if let Ok(utf8) = utf8 {
            // SAFETY: as above.
            let bytes = unsafe { utf8.as_slice() };
            if let Ok(text) = std::str::from_utf8(bytes) {
                return Ok(text.to_owned());
            }
        }
    }
    let valid = std::str::from_utf8(bytes).map_err(|e| e.valid_up_to()).err().unwrap_or(0);
    Err(DeError(format!(
        "invalid UTF-8 in a String at byte {valid}: {}",
        openai_stream::anomaly::excerpt_bytes(bytes)
    )))
}

impl<'de> Deserializer<'de> for RubyDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let ruby = self.ruby;
        let v = self.value;
        if v.is_nil() {
            return visitor.visit_unit();
        }
        if let Some(s) = RString::from_value(v) {
            // SAFETY: the visitors copy or ignore the text and never call
            // into Ruby, so the String cannot change while it is borrowed.
            // SAFETY: the visitors copy or ignore the text and never call
            // into Ruby, so the String cannot change while it is borrowed.
            if let Ok(text) = std::str::from_utf8(unsafe { s.as_slice() }) {
                return visitor.visit_str(text);
            }
            return visitor.visit_string(transcoded_text(ruby, s)?);
        }
        if let Some(h) = RHash::from_value(v) {
            self.enter()?;
            let mut pairs = Pairs::new(ruby, h);
            // SAFETY: the callback only copies the pairs (it cannot raise,
            // panic or allocate), and nothing changes the Hash while it
            // runs. magnus's `foreach` would add an rb_protect per Hash.
            unsafe {
                rb_sys::rb_hash_foreach(
                    h.as_raw(),
                    Some(collect_pair),
                    &mut pairs as *mut Pairs as rb_sys::VALUE,
                )
            };
            return visitor.visit_map(HashAccess { de: &self, pairs: &pairs, next: 0, value: None });
        }
        if let Some(a) = RArray::from_value(v) {
            self.enter()?;
            return visitor.visit_seq(ArrayAccess { de: &self, array: a, next: 0 });
        }
        if let Some(sym) = Symbol::from_value(v) {
            // The Symbol's name without copying it (symbolize_names makes
            // every key a Symbol; they are read on every event).
            // SAFETY: rb_sym2str returns the Symbol's frozen name String,
            // which lives as long as the Symbol; the visitors copy or
            // compare the text without calling into Ruby.
            if let Some(text) = symbol_text(sym) {
                return visitor.visit_str(text);
            }
            let name = sym.name().map_err(|e| DeError(format!("unreadable Symbol: {e}")))?;
            return visitor.visit_string(name.into_owned());
        }
        if v.is_kind_of(ruby.class_true_class()) {
            return visitor.visit_bool(true);
        }
        if v.is_kind_of(ruby.class_false_class()) {
            return visitor.visit_bool(false);
        }
        if let Some(i) = Integer::from_value(v) {
            if let Ok(n) = i.to_i64() {
                return visitor.visit_i64(n);
            }
            if let Ok(n) = i.to_u64() {
                return visitor.visit_u64(n);
            }
            // Beyond 64 bits: a Float, as serde_json reads the same digits
            // on the raw path (huge ones are Infinity, as `JSON.parse` reads
            // 1e400), so both paths agree. As text it became content or an
            // id that the server never sent as a string.
            let f: f64 = v.funcall("to_f", ()).map_err(|e| DeError(e.to_string()))?;
            return visitor.visit_f64(f);
        }
        if let Some(f) = Float::from_value(v) {
            return visitor.visit_f64(f.to_f64());
        }
        let class = unsafe { v.classname() };
        self.unsupported.borrow_mut().push(unsupported_value(&class));
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str
        bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct enum
    }

    /// The keys of a JSON value's objects (object arguments, error
    /// payloads), the only Strings the chunk model reads. A Ruby Hash may
    /// have keys of any class: one that is neither a String nor a Symbol
    /// is read as its `to_s` (what `JSON.generate` writes for it), with an
    /// anomaly, instead of failing the whole chunk.
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let v = self.value;
        if RString::from_value(v).is_some() || Symbol::from_value(v).is_some() {
            return self.deserialize_any(visitor);
        }
        let text = v.to_r_string().map_err(|e| DeError(format!("a Hash key could not be read: {e}")))?;
        // SAFETY: read before any Ruby code runs again.
        let text =
            text.to_string().unwrap_or_else(|_| String::from_utf8_lossy(unsafe { text.as_slice() }).into());
        let class = unsafe { v.classname() };
        self.unsupported.borrow_mut().push(Anomaly::new(
            AnomalyKind::ConvertedField,
            format!("a Hash key of class {class} is neither a String nor a Symbol; read as {text:?}"),
        ));
        visitor.visit_string(text)
    }

    /// Object keys: a Symbol is tried first (it is one nearly always), then
    /// anything else as `deserialize_any` reads it.
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if let Some(sym) = Symbol::from_value(self.value) {
            if let Some(text) = symbol_text(sym) {
                return visitor.visit_str(text);
            }
        }
        self.deserialize_any(visitor)
    }

    /// The value of a key no chunk struct reads ([`UNREAD`]) is not looked
    /// at: whatever it is (a `Time`, a binary String, deep nesting), the
    /// stock processor would not have looked either.
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == UNREAD {
            return visitor.visit_unit();
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // Skipped fields cost nothing: they are never looked at.
        visitor.visit_unit()
    }
}

struct ArrayAccess<'a, 'r> {
    de: &'a RubyDe<'r>,
    array: RArray,
    next: usize,
}

impl<'de> SeqAccess<'de> for ArrayAccess<'_, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        if self.next >= self.array.len() {
            return Ok(None);
        }
        let item: Value = self
            .array
            .entry(self.next as isize)
            .map_err(|e| DeError(format!("could not read an Array: {e}")))?;
        self.next += 1;
        seed.deserialize(self.de.child(item)).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.array.len().saturating_sub(self.next))
    }
}

/// A Symbol's name, borrowed (symbolize_names makes every key a Symbol;
/// they are read on every event), when it is UTF-8. A name that is ASCII
/// (Ruby knows; the name is a frozen String it has scanned) is not
/// validated again.
fn symbol_text<'s>(sym: Symbol) -> Option<&'s str> {
    // SAFETY: rb_sym2str returns the Symbol's frozen name String, which
    // lives as long as the Symbol (held by the Hash being read); the
    // visitors copy or compare the text without calling into Ruby.
    let name = RString::from_value(unsafe { Value::from_raw(rb_sys::rb_sym2str(sym.as_raw())) })?;
    let bytes: &'s [u8] = unsafe { std::slice::from_raw_parts(name.as_slice().as_ptr(), name.len()) };
    // SAFETY: an ASCII-only String's bytes are all below 0x80: UTF-8.
    if unsafe { rb_sys::rb_enc_str_asciionly_p(name.as_raw()) } != 0 {
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
}

/// `rb_hash_foreach` callback: appends the pair to the `Pairs` in `arg`.
unsafe extern "C" fn collect_pair(
    key: rb_sys::VALUE,
    value: rb_sys::VALUE,
    arg: rb_sys::VALUE,
) -> std::os::raw::c_int {
    // SAFETY: `arg` is the `&mut Pairs` given to rb_hash_foreach, alive and
    // not otherwise borrowed while the iteration runs.
    let pairs = unsafe { &mut *(arg as *mut Pairs) };
    pairs.push((unsafe { Value::from_raw(key) }, unsafe { Value::from_raw(value) }));
    rb_sys::st_retval::ST_CONTINUE as std::os::raw::c_int
}

/// The pairs of a Hash, read before they are deserialized: on the stack
/// for the small Hashes of a chunk (no allocation per Hash, and the Values
/// stay visible to Ruby's conservative GC, which also pins them), in a Ruby
/// Array past that. Reading a pair may run Ruby code (a String to
/// transcode, a key's `to_s`), hence a collection, which may free or move
/// (compaction) objects it does not see: the Array is on the stack, so seen
/// and pinned, and it marks and updates the pairs it holds.
struct Pairs {
    inline: [(Value, Value); INLINE_PAIRS],
    len: usize,
    /// Keys and values after the first `INLINE_PAIRS` pairs, alternating.
    more: Option<RArray>,
}

const INLINE_PAIRS: usize = 16;

impl Pairs {
    /// Room for the pairs of `hash`; allocated before the iteration, so
    /// that `push` never allocates.
    fn new(ruby: &Ruby, hash: RHash) -> Self {
        let nil = ruby.qnil().as_value();
        let more = hash.len().checked_sub(INLINE_PAIRS).filter(|&n| n > 0).map(|n| ruby.ary_new_capa(2 * n));
        Pairs { inline: [(nil, nil); INLINE_PAIRS], len: 0, more }
    }

    fn push(&mut self, pair: (Value, Value)) {
        if self.len < INLINE_PAIRS {
            self.inline[self.len] = pair;
        } else if let Some(more) = self.more {
            // SAFETY: our own unfrozen Array with room for every pair of
            // the Hash (its size cannot change during the iteration), so
            // the push neither allocates nor raises.
            unsafe {
                rb_sys::rb_ary_push(more.as_raw(), pair.0.as_raw());
                rb_sys::rb_ary_push(more.as_raw(), pair.1.as_raw());
            }
        } else {
            // More pairs than the Hash had: not possible; they are not read.
            return;
        }
        self.len += 1;
    }

    fn get(&self, i: usize) -> Option<(Value, Value)> {
        if i < self.len.min(INLINE_PAIRS) {
            return Some(self.inline[i]);
        }
        let more = self.more?;
        let at = 2 * i.checked_sub(INLINE_PAIRS)?;
        if at + 1 >= more.len() {
            return None;
        }
        // Read from the Array each time: a compaction since the iteration
        // may have moved the pairs, and updated the Array.
        Some((more.entry(at as isize).ok()?, more.entry(at as isize + 1).ok()?))
    }
}

struct HashAccess<'a, 'r> {
    de: &'a RubyDe<'r>,
    pairs: &'a Pairs,
    next: usize,
    value: Option<Value>,
}

impl<'de> MapAccess<'de> for HashAccess<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        match self.pairs.get(self.next) {
            None => Ok(None),
            Some((k, v)) => {
                self.next += 1;
                self.value = Some(v);
                seed.deserialize(self.de.child(k)).map(Some)
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let v = self.value.take().ok_or_else(|| DeError("a Hash value was read before its key".into()))?;
        seed.deserialize(self.de.child(v))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.pairs.len - self.next)
    }
}
