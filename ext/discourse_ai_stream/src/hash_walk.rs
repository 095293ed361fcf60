//! The fast path of the Hash path: a chunk Hash from
//! `JSON.parse(line, symbolize_names: true)` read straight into the core's
//! [`Chunk`], for the shapes servers send on every event.
//!
//! It builds exactly the `Chunk` the serde path ([`crate::ruby_de`]) builds,
//! and gives up (`None`) on anything it does not read the same way: a key
//! that is not a Symbol, a Symbol that is not one of ours but has the name of
//! a field, a field of an unexpected type (the lenient model records those
//! as `Converted` or `Wrong`), content parts, object arguments, error and
//! usage payloads, a String that is not UTF-8, a Bignum, a value of a class
//! with no JSON meaning, or a deeply nested value under a key it skips. The
//! caller then reads the Hash with the serde path, which decides. So
//! anomalies, conversions and errors stay exactly those of the serde path
//! (spec/hash_walk_spec.rb compares both on every fixture and on odd shapes).
//!
//! Why it exists: on a text event the serde path (a visitor per value, the
//! name of every Symbol key read as text, a `kind_of?` check per value)
//! cost more than the stock Ruby processor's whole `process_streamed_message`.
//! Here keys are matched by identity against Symbols interned once (a Symbol
//! is unique per name), types are read from the object header, nil, true and
//! false are compared as constants, and Strings are borrowed, not copied.
//!
//! Nothing here calls Ruby code or allocates Ruby objects, so no collection
//! can run while it reads, and no Ruby exception can unwind through it.

use std::borrow::Cow;
use std::os::raw::c_int;
use std::sync::OnceLock;

use openai_stream::chunk::{
    Arguments, Choice, Chunk, Content, Delta, Field, Function, Id, Int, List, Text, ToolCallDelta,
};
use rb_sys::{ruby_special_consts, ruby_value_type, VALUE};

/// Deepest nesting of a skipped value followed here; deeper ones go to the
/// serde path (which allows 128, as serde_json does).
const MAX_SKIP_DEPTH: usize = 16;

/// The Symbols of the keys the walker knows, interned once.
struct Keys {
    choices: VALUE,
    usage: VALUE,
    x_groq: VALUE,
    error: VALUE,
    object: VALUE,
    message: VALUE,
    delta: VALUE,
    finish_reason: VALUE,
    content: VALUE,
    tool_calls: VALUE,
    index: VALUE,
    id: VALUE,
    function: VALUE,
    name: VALUE,
    arguments: VALUE,
    /// Every Symbol above and the keys servers send that no struct reads,
    /// most frequent first: a key found here and not matched by the
    /// struct reading it is an unknown key of that struct.
    all: Vec<VALUE>,
}

/// Names of the keys each struct reads (what `lenient_struct!` declares in
/// the core's chunk module).
const CHUNK_NAMES: &[&str] = &["choices", "usage", "x_groq", "error", "object", "message"];
const CHOICE_NAMES: &[&str] = &["delta", "message", "finish_reason", "error"];
const DELTA_NAMES: &[&str] = &["content", "tool_calls"];
const TOOL_CALL_NAMES: &[&str] = &["index", "id", "function"];
const FUNCTION_NAMES: &[&str] = &["name", "arguments", "id"];

/// Keys no struct reads that servers send on every event, interned so that
/// skipping them costs a comparison.
const SKIPPED_NAMES: &[&str] = &[
    "created",
    "model",
    "system_fingerprint",
    "logprobs",
    "role",
    "type",
    "refusal",
    "service_tier",
    "obfuscation",
    "reasoning_content",
    "native_finish_reason",
    "provider",
];

static KEYS: OnceLock<Keys> = OnceLock::new();

/// Interns `name`: the Symbol `JSON.parse(..., symbolize_names: true)`
/// returns for that key. Interned Symbols are never collected or moved.
fn intern(name: &str) -> VALUE {
    // SAFETY: called with the GVL held (from a method call); the name is
    // valid for its length.
    unsafe { rb_sys::rb_id2sym(rb_sys::rb_intern2(name.as_ptr().cast(), name.len() as _)) }
}

fn keys() -> &'static Keys {
    KEYS.get_or_init(|| {
        let mut keys = Keys {
            choices: intern("choices"),
            usage: intern("usage"),
            x_groq: intern("x_groq"),
            error: intern("error"),
            object: intern("object"),
            message: intern("message"),
            delta: intern("delta"),
            finish_reason: intern("finish_reason"),
            content: intern("content"),
            tool_calls: intern("tool_calls"),
            index: intern("index"),
            id: intern("id"),
            function: intern("function"),
            name: intern("name"),
            arguments: intern("arguments"),
            all: Vec::new(),
        };
        keys.all = vec![
            keys.id,
            keys.index,
            keys.object,
            keys.choices,
            keys.delta,
            keys.finish_reason,
            keys.content,
            keys.tool_calls,
            keys.function,
            keys.name,
            keys.arguments,
            keys.usage,
            keys.message,
            keys.error,
            keys.x_groq,
        ];
        keys.all.extend(SKIPPED_NAMES.iter().map(|name| intern(name)));
        keys
    })
}

const NIL: VALUE = ruby_special_consts::RUBY_Qnil as VALUE;

/// Reads a chunk Hash, or None when the serde path must read it.
///
/// # Safety
///
/// `hash` must be a Hash, and the chunk must be dropped before any Ruby code
/// runs: its texts borrow the bytes of the Hash's Strings, which the caller
/// keeps alive (the Hash is an argument on its stack) and which nothing can
/// change or move (a compaction) while no Ruby code runs.
pub unsafe fn read<'a>(hash: VALUE) -> Option<Chunk<'a>> {
    let keys = keys();
    let mut chunk = ChunkMembers { keys, out: Chunk::default() };
    members(hash, &mut chunk).then_some(chunk.out)
}

/// Reads the members of a struct from the pairs of a Hash.
trait Members {
    /// One pair; false: the serde path must read the whole chunk.
    ///
    /// # Safety
    ///
    /// `key` and `value` are live Ruby values.
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool;
}

/// Feeds every pair of `hash` to `m`; false when one was refused.
///
/// # Safety
///
/// `hash` is a Hash that no Ruby code changes while this runs.
unsafe fn members<M: Members>(hash: VALUE, m: &mut M) -> bool {
    let mut walk = Walk { members: m, ok: true };
    // SAFETY: the callback only reads the pairs (no Ruby call, no
    // allocation, no exception, no panic), and `walk` outlives the call.
    unsafe { rb_sys::rb_hash_foreach(hash, Some(each_pair::<M>), &mut walk as *mut Walk<M> as VALUE) };
    walk.ok
}

struct Walk<'m, M> {
    members: &'m mut M,
    ok: bool,
}

/// `rb_hash_foreach` callback: one pair to the `Walk` in `arg`.
unsafe extern "C" fn each_pair<M: Members>(key: VALUE, value: VALUE, arg: VALUE) -> c_int {
    // SAFETY: `arg` is the `&mut Walk<M>` given to rb_hash_foreach, alive
    // and not otherwise borrowed while the iteration runs.
    let walk = unsafe { &mut *(arg as *mut Walk<M>) };
    if unsafe { walk.members.member(key, value) } {
        rb_sys::st_retval::ST_CONTINUE as c_int
    } else {
        walk.ok = false;
        rb_sys::st_retval::ST_STOP as c_int
    }
}

/// The Ruby type of a value (immediates included).
///
/// # Safety
///
/// `v` is a live Ruby value.
unsafe fn ty(v: VALUE) -> ruby_value_type {
    unsafe { rb_sys::RB_TYPE(v) }
}

/// The text of a String when it is UTF-8 (whatever its encoding says, as the
/// serde path reads it), borrowed.
///
/// # Safety
///
/// `v` is a String; the text must not be used once Ruby code has run.
unsafe fn str_of<'a>(v: VALUE) -> Option<&'a str> {
    let len = usize::try_from(unsafe { rb_sys::RSTRING_LEN(v) }).ok()?;
    if len == 0 {
        return Some("");
    }
    // SAFETY: a String's pointer is valid for its length.
    let bytes: &'a [u8] = unsafe { std::slice::from_raw_parts(rb_sys::RSTRING_PTR(v).cast(), len) };
    std::str::from_utf8(bytes).ok()
}

/// A text field: a UTF-8 String or nil.
unsafe fn text<'a>(v: VALUE) -> Option<Field<Text<'a>>> {
    if v == NIL {
        return Some(Field::Null);
    }
    if unsafe { ty(v) } != ruby_value_type::RUBY_T_STRING {
        return None;
    }
    Some(Field::Value(Text(Cow::Borrowed(unsafe { str_of(v) }?))))
}

/// An id field: a UTF-8 String or nil (Integer ids, converted, are left to
/// the serde path).
unsafe fn id<'a>(v: VALUE) -> Option<Field<Id<'a>>> {
    Some(match unsafe { text(v) }? {
        Field::Value(Text(t)) => Field::Value(Id(t)),
        _ => Field::Null,
    })
}

/// A field absent from the fast path but for nil.
fn null<T>(v: VALUE) -> Option<Field<T>> {
    (v == NIL).then_some(Field::Null)
}

/// A list: an Array of Hashes (or nils), each read by `item`, or nil.
unsafe fn list<T>(v: VALUE, item: impl Fn(VALUE) -> Option<T>) -> Option<Field<List<T>>> {
    if v == NIL {
        return Some(Field::Null);
    }
    if unsafe { ty(v) } != ruby_value_type::RUBY_T_ARRAY {
        return None;
    }
    let len = usize::try_from(unsafe { rb_sys::RARRAY_LEN(v) }).ok()?;
    let mut items = Vec::with_capacity(len.min(16));
    for i in 0..len {
        // SAFETY: `i` is below the length; nothing changes the Array.
        let e = unsafe { rb_sys::RARRAY_AREF(v, i as isize) };
        if e == NIL {
            items.push(Field::Null);
        } else if unsafe { ty(e) } == ruby_value_type::RUBY_T_HASH {
            items.push(Field::Value(item(e)?));
        } else {
            return None;
        }
    }
    Some(Field::Value(List(items)))
}

/// A struct field: a Hash read by `read`, or nil.
unsafe fn object<T>(v: VALUE, read: impl FnOnce(VALUE) -> Option<T>) -> Option<Field<T>> {
    if v == NIL {
        return Some(Field::Null);
    }
    if unsafe { ty(v) } != ruby_value_type::RUBY_T_HASH {
        return None;
    }
    read(v).map(Field::Value)
}

/// A Symbol's name when it is UTF-8 (as `ruby_de::symbol_text` reads it).
unsafe fn symbol_name<'s>(sym: VALUE) -> Option<&'s str> {
    // SAFETY: rb_sym2str returns the Symbol's frozen name String, which
    // lives as long as the Symbol (held by the Hash being read).
    let name = unsafe { rb_sys::rb_sym2str(sym) };
    unsafe { str_of(name) }
}

/// A key the struct did not match: skipped like the serde path skips it, or
/// false when the serde path must decide (a key that is not a Symbol, or a
/// Symbol whose name is one of `names` without being the interned one).
unsafe fn unknown(keys: &Keys, names: &[&str], key: VALUE, value: VALUE, depth: usize) -> bool {
    if !keys.all.contains(&key) {
        if !unsafe { rb_sys::RB_SYMBOL_P(key) } {
            return false;
        }
        match unsafe { symbol_name(key) } {
            Some(name) if !names.contains(&name) => {}
            _ => return false,
        }
    }
    unsafe { skippable(value, depth) }
}

/// True when the serde path skips `v` (at nesting `depth`) without an error,
/// an anomaly or a Ruby call: JSON-like values with UTF-8 texts.
unsafe fn skippable(v: VALUE, depth: usize) -> bool {
    use ruby_value_type::*;
    match unsafe { ty(v) } {
        RUBY_T_NIL | RUBY_T_TRUE | RUBY_T_FALSE | RUBY_T_FIXNUM | RUBY_T_FLOAT => true,
        RUBY_T_STRING => unsafe { str_of(v) }.is_some(),
        RUBY_T_SYMBOL => unsafe { symbol_name(v) }.is_some(),
        RUBY_T_ARRAY if depth < MAX_SKIP_DEPTH => {
            let Ok(len) = usize::try_from(unsafe { rb_sys::RARRAY_LEN(v) }) else { return false };
            (0..len).all(|i| unsafe { skippable(rb_sys::RARRAY_AREF(v, i as isize), depth + 1) })
        }
        RUBY_T_HASH if depth < MAX_SKIP_DEPTH => {
            let mut skip = Skip { depth: depth + 1 };
            unsafe { members(v, &mut skip) }
        }
        _ => false,
    }
}

struct Skip {
    depth: usize,
}

impl Members for Skip {
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool {
        unsafe { skippable(key, self.depth) && skippable(value, self.depth) }
    }
}

struct ChunkMembers<'a> {
    keys: &'static Keys,
    out: Chunk<'a>,
}

impl<'a> Members for ChunkMembers<'a> {
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool {
        let k = self.keys;
        let done = if key == k.choices {
            unsafe { list(value, |h| choice(k, h)) }.map(|f| self.out.choices = f)
        } else if key == k.object {
            unsafe { text(value) }.map(|f| self.out.object = f)
        } else if key == k.message {
            unsafe { text(value) }.map(|f| self.out.message = f)
        } else if key == k.usage {
            null(value).map(|f| self.out.usage = f)
        } else if key == k.x_groq {
            null(value).map(|f| self.out.x_groq = f)
        } else if key == k.error {
            null(value).map(|f| self.out.error = f)
        } else {
            return unsafe { unknown(k, CHUNK_NAMES, key, value, 1) };
        };
        done.is_some()
    }
}

/// Members of a choice (a Hash in `choices`, nesting 2).
fn choice<'a>(keys: &'static Keys, hash: VALUE) -> Option<Choice<'a>> {
    let mut m = ChoiceMembers { keys, out: Choice::default() };
    // SAFETY: `hash` is a Hash of the chunk being read.
    unsafe { members(hash, &mut m) }.then_some(m.out)
}

struct ChoiceMembers<'a> {
    keys: &'static Keys,
    out: Choice<'a>,
}

impl<'a> Members for ChoiceMembers<'a> {
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool {
        let k = self.keys;
        let done = if key == k.delta {
            unsafe { object(value, |h| delta(k, h)) }.map(|f| self.out.delta = f)
        } else if key == k.finish_reason {
            unsafe { text(value) }.map(|f| self.out.finish_reason = f)
        } else if key == k.message {
            unsafe { object(value, |h| delta(k, h)) }.map(|f| self.out.message = f)
        } else if key == k.error {
            null(value).map(|f| self.out.error = f)
        } else {
            return unsafe { unknown(k, CHOICE_NAMES, key, value, 3) };
        };
        done.is_some()
    }
}

/// Members of a delta or message (nesting 3).
fn delta<'a>(keys: &'static Keys, hash: VALUE) -> Option<Delta<'a>> {
    let mut m = DeltaMembers { keys, out: Delta::default() };
    // SAFETY: `hash` is a Hash of the chunk being read.
    unsafe { members(hash, &mut m) }.then_some(m.out)
}

struct DeltaMembers<'a> {
    keys: &'static Keys,
    out: Delta<'a>,
}

impl<'a> Members for DeltaMembers<'a> {
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool {
        let k = self.keys;
        let done = if key == k.content {
            // Content parts (an Array) are left to the serde path.
            match unsafe { text(value) } {
                Some(Field::Value(Text(t))) => Some(Field::Value(Content::Text(t))),
                Some(_) => Some(Field::Null),
                None => None,
            }
            .map(|f| self.out.content = f)
        } else if key == k.tool_calls {
            unsafe { list(value, |h| tool_call(k, h)) }.map(|f| self.out.tool_calls = f)
        } else {
            return unsafe { unknown(k, DELTA_NAMES, key, value, 4) };
        };
        done.is_some()
    }
}

/// Members of a tool call delta (a Hash in `tool_calls`, nesting 5).
fn tool_call<'a>(keys: &'static Keys, hash: VALUE) -> Option<ToolCallDelta<'a>> {
    let mut m = ToolCallMembers { keys, out: ToolCallDelta::default() };
    // SAFETY: `hash` is a Hash of the chunk being read.
    unsafe { members(hash, &mut m) }.then_some(m.out)
}

struct ToolCallMembers<'a> {
    keys: &'static Keys,
    out: ToolCallDelta<'a>,
}

impl<'a> Members for ToolCallMembers<'a> {
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool {
        let k = self.keys;
        let done = if key == k.function {
            unsafe { object(value, |h| function(k, h)) }.map(|f| self.out.function = f)
        } else if key == k.index {
            if value == NIL {
                Some(Field::Null)
            } else if rb_sys::FIXNUM_P(value) {
                // SAFETY: a Fixnum.
                Some(Field::Value(Int(unsafe { rb_sys::FIX2LONG(value) } as i64)))
            } else {
                None
            }
            .map(|f| self.out.index = f)
        } else if key == k.id {
            unsafe { id(value) }.map(|f| self.out.id = f)
        } else {
            return unsafe { unknown(k, TOOL_CALL_NAMES, key, value, 6) };
        };
        done.is_some()
    }
}

/// Members of a tool call's `function` (nesting 6).
fn function<'a>(keys: &'static Keys, hash: VALUE) -> Option<Function<'a>> {
    let mut m = FunctionMembers { keys, out: Function::default() };
    // SAFETY: `hash` is a Hash of the chunk being read.
    unsafe { members(hash, &mut m) }.then_some(m.out)
}

struct FunctionMembers<'a> {
    keys: &'static Keys,
    out: Function<'a>,
}

impl<'a> Members for FunctionMembers<'a> {
    unsafe fn member(&mut self, key: VALUE, value: VALUE) -> bool {
        let k = self.keys;
        let done = if key == k.arguments {
            // Object arguments are left to the serde path.
            match unsafe { text(value) } {
                Some(Field::Value(Text(t))) => Some(Field::Value(Arguments::Text(t))),
                Some(_) => Some(Field::Null),
                None => None,
            }
            .map(|f| self.out.arguments = f)
        } else if key == k.name {
            unsafe { text(value) }.map(|f| self.out.name = f)
        } else if key == k.id {
            unsafe { id(value) }.map(|f| self.out.id = f)
        } else {
            return unsafe { unknown(k, FUNCTION_NAMES, key, value, 7) };
        };
        done.is_some()
    }
}
