//! The fast path of the Hash path: a chunk Hash from
//! `JSON.parse(line, symbolize_names: true)` read straight into the core's
//! [`Chunk`], for the shapes servers send on every event.
//!
//! It builds exactly the `Chunk` the serde path ([`crate::ruby_de`]) builds,
//! and gives up (returns false) on anything it does not read the same way: a key
//! that is not a Symbol, a Symbol that is not one of ours but has the name of
//! a field, a field of an unexpected type (the lenient model records those
//! as `Converted` or `Wrong`), content parts, object arguments, error and
//! usage payloads, a String that is not UTF-8, a Bignum, or a value of a
//! class with no JSON meaning, in a field it reads. Values under keys no
//! struct reads are not looked at, by either path. The
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
//! Each Hash is iterated once by a small callback that only notes the values
//! of the keys its struct reads ([`Found`]); those are read afterwards, in
//! one plain function per struct.
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

/// The keys the walker knows.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum K {
    Choices,
    Usage,
    XGroq,
    Error,
    Object,
    Message,
    Delta,
    FinishReason,
    Content,
    ToolCalls,
    Index,
    Id,
    Function,
    Name,
    Arguments,
    /// A key servers send that no struct reads.
    Skipped,
}

const KNOWN: &[(&str, K)] = &[
    ("choices", K::Choices),
    ("usage", K::Usage),
    ("x_groq", K::XGroq),
    ("error", K::Error),
    ("object", K::Object),
    ("message", K::Message),
    ("delta", K::Delta),
    ("finish_reason", K::FinishReason),
    ("content", K::Content),
    ("tool_calls", K::ToolCalls),
    ("index", K::Index),
    ("id", K::Id),
    ("function", K::Function),
    ("name", K::Name),
    ("arguments", K::Arguments),
];

/// Slots of the Symbol table (a power of two, well above the keys in it).
const SLOTS: usize = 64;

/// The Symbols of the known keys, interned once, in a small open-addressed
/// table: a key is matched by identity (a Symbol is unique per name) with
/// a multiplication and, nearly always, one comparison.
struct Keys {
    table: [Option<(VALUE, K)>; SLOTS],
    /// `rb_hash_stlike_foreach`, when this Ruby exports it.
    foreach: Option<StlikeForeach>,
}

impl Keys {
    fn slot(key: VALUE) -> usize {
        ((key >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SLOTS
    }

    fn insert(&mut self, key: VALUE, k: K) {
        let mut at = Keys::slot(key);
        for _ in 0..SLOTS {
            match self.table[at] {
                Some((present, _)) if present == key => return,
                Some(_) => at = (at + 1) % SLOTS,
                None => {
                    self.table[at] = Some((key, k));
                    return;
                }
            }
        }
    }

    /// What `key` is, when it is one of the interned Symbols.
    fn code(&self, key: VALUE) -> Option<K> {
        let mut at = Keys::slot(key);
        for _ in 0..SLOTS {
            match self.table[at] {
                Some((present, k)) if present == key => return Some(k),
                Some(_) => at = (at + 1) % SLOTS,
                None => return None,
            }
        }
        None
    }
}

type PairCallback = unsafe extern "C" fn(VALUE, VALUE, VALUE) -> c_int;
type StlikeForeach = unsafe extern "C" fn(VALUE, Option<PairCallback>, VALUE) -> c_int;

/// Ruby's `rb_hash_stlike_foreach`, looked up at run time: the iteration
/// `rb_hash_foreach` wraps in `rb_ensure` (and a modification check per
/// pair) for the sake of Ruby code that might change the Hash meanwhile.
/// The walker runs no Ruby code, so the bare iteration is enough, and the
/// wrapper cost more than reading the pairs. It is not part of Ruby's
/// public API (Ruby 3.1 and 3.2 export it for their JITs): where it is
/// missing, `rb_hash_foreach` is used.
fn fast_foreach() -> Option<StlikeForeach> {
    #[cfg(unix)]
    {
        extern "C" {
            fn dlsym(
                handle: *mut std::ffi::c_void,
                symbol: *const std::os::raw::c_char,
            ) -> *mut std::ffi::c_void;
        }
        // RTLD_DEFAULT: null on Linux, -2 on the BSDs and macOS.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let default = std::ptr::null_mut();
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let default = -2isize as *mut std::ffi::c_void;
        // SAFETY: a NUL-terminated name; dlsym only looks it up.
        let found = unsafe { dlsym(default, c"rb_hash_stlike_foreach".as_ptr()) };
        if found.is_null() {
            return None;
        }
        // SAFETY: Ruby's `int rb_hash_stlike_foreach(VALUE,
        // st_foreach_callback_func *, st_data_t)`, which calls the
        // callback with (key, value, arg) like rb_hash_foreach does.
        Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, StlikeForeach>(found) })
    }
    #[cfg(not(unix))]
    None
}

/// Slots of [`Found`]: one per key code.
const CODES: usize = K::Skipped as usize + 1;

const fn bit(k: K) -> u32 {
    1 << k as u32
}

/// The keys one struct reads: as codes (a bit each) and as names (what
/// `lenient_struct!` declares in the core's chunk module).
struct Level {
    reads: u32,
    names: &'static [&'static str],
}

const CHUNK: Level = Level {
    reads: bit(K::Choices) | bit(K::Usage) | bit(K::XGroq) | bit(K::Error) | bit(K::Object) | bit(K::Message),
    names: &["choices", "usage", "x_groq", "error", "object", "message"],
};
const CHOICE: Level = Level {
    reads: bit(K::Delta) | bit(K::Message) | bit(K::FinishReason) | bit(K::Error),
    names: &["delta", "message", "finish_reason", "error"],
};
const DELTA: Level = Level { reads: bit(K::Content) | bit(K::ToolCalls), names: &["content", "tool_calls"] };
const TOOL_CALL: Level =
    Level { reads: bit(K::Index) | bit(K::Id) | bit(K::Function), names: &["index", "id", "function"] };
const FUNCTION: Level =
    Level { reads: bit(K::Name) | bit(K::Arguments) | bit(K::Id), names: &["name", "arguments", "id"] };

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
/// returns for that key. A Symbol that `JSON.parse` created before this
/// ran is a heap object: it is registered with the GC, which keeps it alive
/// and in place, so the table's VALUE stays that Symbol's.
fn intern(name: &str) -> VALUE {
    // SAFETY: called with the GVL held (from a method call); the name is
    // valid for its length.
    unsafe {
        let sym = rb_sys::rb_id2sym(rb_sys::rb_intern2(name.as_ptr().cast(), name.len() as _));
        if !rb_sys::SPECIAL_CONST_P(sym) {
            rb_sys::rb_gc_register_mark_object(sym);
        }
        sym
    }
}

fn keys() -> &'static Keys {
    KEYS.get_or_init(|| {
        let mut keys = Keys { table: [None; SLOTS], foreach: fast_foreach() };
        for &(name, k) in KNOWN {
            keys.insert(intern(name), k);
        }
        for name in SKIPPED_NAMES {
            keys.insert(intern(name), K::Skipped);
        }
        keys
    })
}

const NIL: VALUE = ruby_special_consts::RUBY_Qnil as VALUE;

/// Reads a chunk Hash into `out` (a default chunk); false when the serde
/// path must read it (`out` then holds a part of it, to be thrown away).
///
/// # Safety
///
/// `hash` must be a Hash, and the chunk must be dropped (or forgotten, see
/// [`Seen::borrowed_only`]) before any Ruby code runs: its texts borrow the
/// bytes of the Hash's Strings, which the caller keeps alive (the Hash is an
/// argument on its stack) and which nothing can change or move (a
/// compaction) while no Ruby code runs.
pub unsafe fn read<'a>(hash: VALUE, out: &mut Chunk<'a>, seen: &mut Seen) -> bool {
    let keys = keys();
    let mut cx = Cx { keys, content: None, contents: 0, allocated: false };
    let ok = unsafe { chunk(&mut cx, hash, out) };
    seen.content = if cx.contents == 1 { cx.content } else { None };
    seen.borrowed_only = ok && !cx.allocated;
    ok
}

/// What the walk saw besides the chunk.
#[derive(Default)]
pub struct Seen {
    /// The only text `content` of a delta or message, when there was
    /// exactly one and its String may stand for a new one (see
    /// [`ContentString`]).
    pub content: Option<ContentString>,
    /// The walker read the chunk, and it owns no memory: every text borrows
    /// the Hash's Strings and every list holds at most one element (kept
    /// inline). Such a chunk may be forgotten instead of dropped: that
    /// leaks nothing, and its drop glue (a check of every field of every
    /// level) was a twentieth of a text event. A list of more elements is
    /// the one thing the walker allocates; it clears this.
    pub borrowed_only: bool,
}

/// A `content` String of the chunk Hash that the caller may return as it
/// is when the core's output is exactly its text, as the stock processor
/// returns `delta[:content]` itself: a plain String (not a subclass), not
/// frozen, tagged UTF-8, so that a new String of the same text would equal
/// it in every way a caller can see. The core keeps its own copy of the
/// text, so whatever the caller does to the String changes nothing inside.
#[derive(Clone, Copy)]
pub struct ContentString {
    pub string: VALUE,
    text: *const str,
}

impl ContentString {
    /// True when the String holds exactly `text`.
    ///
    /// # Safety
    ///
    /// The Hash read is alive and no Ruby code ran since the walk.
    pub unsafe fn holds(&self, text: &str) -> bool {
        // SAFETY: the String's bytes, unchanged since the walk (above).
        unsafe { &*self.text == text }
    }
}

/// The `ContentString` of `v` (a String whose text is `text`), if it is one.
unsafe fn content_string(v: VALUE, text: &str) -> Option<ContentString> {
    // SAFETY: `v` is a live String (its header is read only).
    unsafe {
        let basic = &*(v as *const rb_sys::RBasic);
        let plain = basic.klass == rb_sys::rb_cString
            && basic.flags & rb_sys::ruby_fl_type::RUBY_FL_FREEZE as VALUE == 0
            && rb_sys::ENCODING_GET(v) == utf8_encindex();
        plain.then_some(ContentString { string: v, text })
    }
}

/// Ruby's index of UTF-8, asked once.
fn utf8_encindex() -> std::os::raw::c_int {
    static INDEX: OnceLock<std::os::raw::c_int> = OnceLock::new();
    // SAFETY: a plain getter, called with the GVL held.
    *INDEX.get_or_init(|| unsafe { rb_sys::rb_utf8_encindex() })
}

/// State of one walk.
struct Cx {
    keys: &'static Keys,
    content: Option<ContentString>,
    /// Text contents seen.
    contents: u32,
    /// A list of more than one element was read (its elements are on the
    /// heap).
    allocated: bool,
}

impl Cx {
    fn note_list<T>(&mut self, field: &Field<List<T>>) {
        if matches!(field, Field::Value(list) if list.len() > 1) {
            self.allocated = true;
        }
    }
}

/// The values of the keys a struct reads, collected from a Hash in one
/// iteration and read afterwards: the iteration callback stays a leaf that
/// costs a table probe per pair, and the keys no struct reads (most of
/// them) cost nothing more. A Hash holds each Symbol once, so a key is
/// found at most once.
struct Found {
    present: u32,
    values: [VALUE; CODES],
}

impl Found {
    fn get(&self, k: K) -> Option<VALUE> {
        (self.present & bit(k) != 0).then(|| self.values[k as usize])
    }
}

struct Collect<'k> {
    keys: &'k Keys,
    level: &'static Level,
    found: Found,
    ok: bool,
}

/// The pairs of `hash` whose keys `level` reads; None when a key must be
/// left to the serde path (see [`unread_symbol`]).
///
/// # Safety
///
/// `hash` is a Hash that no Ruby code changes while this runs.
unsafe fn collect(keys: &Keys, hash: VALUE, level: &'static Level) -> Option<Found> {
    let mut c = Collect { keys, level, found: Found { present: 0, values: [0; CODES] }, ok: true };
    let arg = &mut c as *mut Collect as VALUE;
    // SAFETY: the callback only reads the pairs (no Ruby call, no
    // allocation, no exception, no panic), and `c` outlives the call.
    unsafe {
        match keys.foreach {
            Some(foreach) => {
                foreach(hash, Some(collect_pair), arg);
            }
            None => rb_sys::rb_hash_foreach(hash, Some(collect_pair), arg),
        }
    }
    c.ok.then_some(c.found)
}

/// Hash iteration callback: notes the pair in the `Collect` in `arg` when
/// its key is one the level reads.
unsafe extern "C" fn collect_pair(key: VALUE, value: VALUE, arg: VALUE) -> c_int {
    // SAFETY: `arg` is the `&mut Collect` given to the iteration, alive and
    // not otherwise borrowed while it runs.
    let c = unsafe { &mut *(arg as *mut Collect) };
    match c.keys.code(key) {
        Some(k) => {
            if c.level.reads & bit(k) != 0 {
                c.found.present |= bit(k);
                c.found.values[k as usize] = value;
            }
        }
        None if unsafe { unread_symbol(key, c.level.names) } => {}
        None => {
            c.ok = false;
            return rb_sys::st_retval::ST_STOP as c_int;
        }
    }
    rb_sys::st_retval::ST_CONTINUE as c_int
}

/// True for a key the walker did not intern that is a Symbol no struct of
/// `names` reads: its value is skipped unseen, as the serde path skips it.
/// False when the serde path must decide: a key that is not a Symbol (a
/// String key may name a field), or a Symbol whose name is one of `names`
/// without being the interned one.
#[cold]
#[inline(never)]
unsafe fn unread_symbol(key: VALUE, names: &[&str]) -> bool {
    if !unsafe { rb_sys::RB_SYMBOL_P(key) } {
        return false;
    }
    matches!(unsafe { symbol_name(key) }, Some(name) if !names.contains(&name))
}

/// Runs `read` on the value of a key that was there; true when it was not.
fn each(value: Option<VALUE>, read: impl FnOnce(VALUE) -> bool) -> bool {
    value.is_none_or(read)
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
    if bytes.is_ascii() {
        // SAFETY: bytes below 0x80 are ASCII, which is UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
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

/// Sets a field from `value` read by `read` (None: the serde path decides).
fn set<T>(field: &mut Field<T>, value: Option<Field<T>>) -> bool {
    match value {
        Some(value) => {
            *field = value;
            true
        }
        None => false,
    }
}

/// A field read from a text, `wrap`ped: a UTF-8 String or nil. What reads
/// other types (Integer ids, content parts, object arguments) is left to the
/// serde path.
unsafe fn text_as<'a, T>(v: VALUE, wrap: impl FnOnce(Cow<'a, str>) -> T) -> Option<Field<T>> {
    Some(match unsafe { text(v) }? {
        Field::Value(Text(t)) => Field::Value(wrap(t)),
        _ => Field::Null,
    })
}

/// A field absent from the fast path but for nil.
fn null<T>(v: VALUE) -> Option<Field<T>> {
    (v == NIL).then_some(Field::Null)
}

/// A list: an Array of Hashes (or nils), each read in place by `fill`, or
/// nil.
unsafe fn list<T: Default>(
    v: VALUE,
    field: &mut Field<List<T>>,
    mut fill: impl FnMut(VALUE, &mut T) -> bool,
) -> bool {
    if v == NIL {
        *field = Field::Null;
        return true;
    }
    if unsafe { ty(v) } != ruby_value_type::RUBY_T_ARRAY {
        return false;
    }
    let Ok(len) = usize::try_from(unsafe { rb_sys::RARRAY_LEN(v) }) else { return false };
    // Built in place: a list of one keeps its element inline, and moving it
    // would copy a few hundred bytes.
    *field = Field::Value(List::new());
    let Field::Value(items) = field else { return false };
    for i in 0..len {
        // SAFETY: `i` is below the length; nothing changes the Array.
        let e = unsafe { rb_sys::RARRAY_AREF(v, i as isize) };
        if e == NIL {
            items.push(Field::Null);
        } else if unsafe { ty(e) } == ruby_value_type::RUBY_T_HASH {
            if !fill(e, items.push_default()) {
                return false;
            }
        } else {
            return false;
        }
    }
    true
}

/// A struct field: a Hash read in place by `fill`, or nil.
unsafe fn object<T: Default>(
    v: VALUE,
    field: &mut Field<T>,
    fill: impl FnOnce(VALUE, &mut T) -> bool,
) -> bool {
    if v == NIL {
        *field = Field::Null;
        return true;
    }
    if unsafe { ty(v) } != ruby_value_type::RUBY_T_HASH {
        return false;
    }
    *field = Field::Value(T::default());
    match field {
        Field::Value(value) => fill(v, value),
        _ => false,
    }
}

/// A Symbol's name when it is UTF-8 (as `ruby_de::symbol_text` reads it).
unsafe fn symbol_name<'s>(sym: VALUE) -> Option<&'s str> {
    // SAFETY: rb_sym2str returns the Symbol's frozen name String, which
    // lives as long as the Symbol (held by the Hash being read).
    let name = unsafe { rb_sys::rb_sym2str(sym) };
    unsafe { str_of(name) }
}

/// A chunk (the top-level Hash).
unsafe fn chunk<'a>(cx: &mut Cx, hash: VALUE, out: &mut Chunk<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, &CHUNK) }) else { return false };
    unsafe {
        each(f.get(K::Choices), |v| {
            let ok = list(v, &mut out.choices, |h, c| choice(cx, h, c));
            cx.note_list(&out.choices);
            ok
        }) && each(f.get(K::Object), |v| set(&mut out.object, text(v)))
            && each(f.get(K::Message), |v| set(&mut out.message, text(v)))
            && each(f.get(K::Usage), |v| set(&mut out.usage, null(v)))
            && each(f.get(K::XGroq), |v| set(&mut out.x_groq, null(v)))
            && each(f.get(K::Error), |v| set(&mut out.error, null(v)))
    }
}

/// A choice (a Hash in `choices`).
unsafe fn choice<'a>(cx: &mut Cx, hash: VALUE, out: &mut Choice<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, &CHOICE) }) else { return false };
    unsafe {
        each(f.get(K::Delta), |v| object(v, &mut out.delta, |h, d| delta(cx, h, d)))
            && each(f.get(K::FinishReason), |v| set(&mut out.finish_reason, text(v)))
            && each(f.get(K::Message), |v| object(v, &mut out.message, |h, d| delta(cx, h, d)))
            && each(f.get(K::Error), |v| set(&mut out.error, null(v)))
    }
}

/// A delta or a message.
unsafe fn delta<'a>(cx: &mut Cx, hash: VALUE, out: &mut Delta<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, &DELTA) }) else { return false };
    unsafe {
        each(f.get(K::Content), |v| {
            let content = text_as(v, Content::Text);
            if let Some(Field::Value(Content::Text(t))) = &content {
                cx.content = content_string(v, t);
                cx.contents += 1;
            }
            set(&mut out.content, content)
        }) && each(f.get(K::ToolCalls), |v| {
            let ok = list(v, &mut out.tool_calls, |h, c| tool_call(cx, h, c));
            cx.note_list(&out.tool_calls);
            ok
        })
    }
}

/// A tool call delta (a Hash in `tool_calls`).
unsafe fn tool_call<'a>(cx: &mut Cx, hash: VALUE, out: &mut ToolCallDelta<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, &TOOL_CALL) }) else { return false };
    unsafe {
        each(f.get(K::Function), |v| object(v, &mut out.function, |h, d| function(cx, h, d)))
            && each(f.get(K::Index), |v| {
                let index = if v == NIL {
                    Some(Field::Null)
                } else if rb_sys::FIXNUM_P(v) {
                    Some(Field::Value(Int(rb_sys::FIX2LONG(v) as i64)))
                } else {
                    None
                };
                set(&mut out.index, index)
            })
            && each(f.get(K::Id), |v| set(&mut out.id, text_as(v, Id)))
    }
}

/// A tool call's `function`.
unsafe fn function<'a>(cx: &mut Cx, hash: VALUE, out: &mut Function<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, &FUNCTION) }) else { return false };
    unsafe {
        each(f.get(K::Arguments), |v| set(&mut out.arguments, text_as(v, Arguments::Text)))
            && each(f.get(K::Name), |v| set(&mut out.name, text(v)))
            && each(f.get(K::Id), |v| set(&mut out.id, text_as(v, Id)))
    }
}
