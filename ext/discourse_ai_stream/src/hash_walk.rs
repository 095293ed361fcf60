//! The fast path of the Hash path: a chunk Hash from
//! `JSON.parse(line, symbolize_names: true)` read straight into the core's
//! [`Chunk`], for the shapes servers send on every event.
//!
//! It builds exactly the `Chunk` the other reader builds (the Hash
//! converted by [`crate::ruby_json`], then read by the core's lenient chunk
//! reader), and gives up (returns false) on anything it does not read the
//! same way: a key that is not a Symbol, a Symbol that is not one of ours but
//! has the name of a field, a field of an unexpected type (the lenient model
//! records those as `Converted` or `Wrong`), content parts, object
//! arguments, error and usage payloads, a String that is not UTF-8, a
//! Bignum, or a value of a class with no JSON meaning, in a field it reads.
//! The caller then reads the Hash with the other reader, which decides. So
//! anomalies, conversions and errors stay exactly those of the other reader
//! (spec/hash_walk_spec.rb compares both on every fixture and on odd
//! shapes). One difference: values under keys no struct reads are skipped
//! unseen here, as the stock processor skips them, where the conversion
//! looks at the whole Hash, as the raw path parses the whole line.
//!
//! Why there are two readers: the other one reads every shape (content
//! parts, object arguments, error payloads, keys of any class, other
//! encodings), and alone it would miss issue 8's Hash-path target (the
//! processor's own cost at most a third of the stock processor's) by far:
//! it visits every value and builds an owned copy of the whole Hash. (The
//! serde Deserializer over Ruby values the conversion replaced cost, in instructions per
//! event beyond the floor (`bench/count`, Ruby 3.4 with YJIT), 8.62k on
//! text_2k where this walker costs 1.16k and the stock processor 2.22k;
//! tools_4k 11.6k, 2.65k and 13.7k.) Teaching the walker every shape would
//! make it a second general reader.
//!
//! Here keys are matched by identity against Symbols interned once (a Symbol
//! is unique per name), types are read from the object header, nil, true and
//! false are compared as constants, and Strings are borrowed, not copied.
//! Each Hash is iterated once, noting the values of the known keys
//! ([`Found`]); those are read afterwards, in one plain function per
//! struct.
//!
//! Nothing here calls Ruby code or allocates Ruby objects, so no collection
//! can run while it reads, and no Ruby exception can unwind through it.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::sync::OnceLock;

use openai_stream::calls::Arguments;
use openai_stream::chat::{Choice, Chunk, Content, Delta, Function, ToolCallDelta};
use openai_stream::lenient::{Field, Id, Int, List, Text};
use rb_sys::{ruby_special_consts, ruby_value_type, VALUE};

/// The keys the walker knows, as `K` and in `KNOWN` by name; `K::Skipped`
/// stands for a key servers send that no struct reads.
macro_rules! known_keys {
    ($($k:ident = $name:literal,)*) => {
        #[derive(Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        enum K { $($k,)* Skipped }

        const KNOWN: &[(&str, K)] = &[$(($name, K::$k)),*];
    };
}

known_keys! {
    Choices = "choices",
    Usage = "usage",
    XGroq = "x_groq",
    Error = "error",
    Object = "object",
    Message = "message",
    Delta = "delta",
    FinishReason = "finish_reason",
    Content = "content",
    ToolCalls = "tool_calls",
    Index = "index",
    Id = "id",
    Function = "function",
    Name = "name",
    Arguments = "arguments",
    NativeFinishReason = "native_finish_reason",
}

/// Slots of the Symbol table (a power of two, well above the keys in it).
const SLOTS: usize = 128;

/// The Symbols of the known keys, interned once, in a table without
/// collisions: a key is matched by identity (a Symbol is unique per name)
/// with a multiplication, a load and a comparison.
struct Keys {
    /// The Symbol of each slot; 0 (never a Symbol) where there is none.
    symbols: [VALUE; SLOTS],
    codes: [K; SLOTS],
    /// A multiplier under which no two known Symbols share a slot, found
    /// when the table is built.
    multiplier: u64,
    /// `rb_hash_stlike_foreach`, when this Ruby exports it.
    foreach: Option<StlikeForeach>,
    /// Ruby's index of UTF-8, as the flags of a String hold it (see
    /// [`content_string`]).
    utf8: c_int,
}

impl Keys {
    fn slot(&self, key: VALUE) -> usize {
        ((key >> 3).wrapping_mul(self.multiplier) >> 57) as usize & (SLOTS - 1)
    }

    /// A table of `entries`: None when no multiplier tried spreads them
    /// over distinct slots (then the walker stands aside).
    fn new(entries: &[(VALUE, K)], foreach: Option<StlikeForeach>, utf8: c_int) -> Option<Keys> {
        let mut keys = Keys { symbols: [0; SLOTS], codes: [K::Skipped; SLOTS], multiplier: 0, foreach, utf8 };
        // Odd multipliers, from the golden ratio's: with 27 keys in 128
        // slots, about one in fifteen spreads them all.
        'try_next: for attempt in 0..4096u64 {
            keys.multiplier =
                0x9E37_79B9_7F4A_7C15u64.wrapping_add(attempt.wrapping_mul(0x2545_F491_4F6C_DD1E)) | 1;
            keys.symbols = [0; SLOTS];
            for &(key, k) in entries {
                let at = keys.slot(key);
                if keys.symbols[at] != 0 && keys.symbols[at] != key {
                    continue 'try_next;
                }
                keys.symbols[at] = key;
                keys.codes[at] = k;
            }
            return Some(keys);
        }
        None
    }

    /// What `key` is, when it is one of the interned Symbols.
    #[inline(always)]
    fn code(&self, key: VALUE) -> Option<K> {
        let at = self.slot(key);
        (self.symbols[at] == key).then_some(self.codes[at])
    }
}

type PairCallback = unsafe extern "C" fn(VALUE, VALUE, VALUE) -> c_int;
type StlikeForeach = unsafe extern "C" fn(VALUE, Option<PairCallback>, VALUE) -> c_int;

/// Ruby's `rb_hash_stlike_foreach`, looked up at run time: the iteration
/// `rb_hash_foreach` wraps in `rb_ensure` (and a modification check per
/// pair) for the sake of Ruby code that might change the Hash meanwhile.
/// The walker runs no Ruby code, so the bare iteration is enough. It is not
/// part of Ruby's public API: it is looked up only on the Rubies of the
/// matrix (3.1, 3.3 and 3.4, which export it with the signature below; the
/// extension only loads into the Ruby it was built for), elsewhere
/// `rb_hash_foreach` is used.
///
/// What it saves, in instructions per event of the Hash path beyond the
/// floor (`bench/count`, YJIT on): on 3.4, text_2k 1.16k instead of 2.05k and
/// tools_4k 2.65k instead of 3.93k, where the stock processor's are 2.22k
/// and 13.7k; on 3.3, 1.20k instead of 2.10k and 2.90k instead of 4.24k,
/// stock 3.30k and 14.5k.
fn fast_foreach() -> Option<StlikeForeach> {
    if !(rb_sys::RUBY_API_VERSION_MAJOR == 3 && matches!(rb_sys::RUBY_API_VERSION_MINOR, 1 | 3 | 4)) {
        return None;
    }
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

/// The keys one struct reads (`FIELDS`, declared by `lenient_struct!` in
/// the core's chunk module): a Symbol of one of these names that is not
/// the interned one is left to the other reader.
type Names = &'static [&'static str];

/// The structs the walker reads, by their keys: each must be in [`KNOWN`],
/// or the walker stands aside (a field added to the core and not here is
/// read by the other reader, never skipped).
const READ: [Names; 5] =
    [Chunk::FIELDS, Choice::FIELDS, Delta::FIELDS, ToolCallDelta::FIELDS, Function::FIELDS];

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
    "provider",
];

static KEYS: OnceLock<Option<Keys>> = OnceLock::new();

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

fn keys() -> Option<&'static Keys> {
    KEYS.get_or_init(|| {
        let known = |name: &&str| KNOWN.iter().any(|(k, _)| k == name);
        if !READ.iter().all(|names| names.iter().all(known)) {
            return None;
        }
        let entries: Vec<(VALUE, K)> = KNOWN
            .iter()
            .map(|&(name, k)| (intern(name), k))
            .chain(SKIPPED_NAMES.iter().map(|name| (intern(name), K::Skipped)))
            .collect();
        // SAFETY: a plain getter, called with the GVL held.
        let utf8 = unsafe { rb_sys::rb_utf8_encindex() };
        // -1 (matching no String) were UTF-8's index ever kept out of the
        // flags: then no String is reused, which costs only an allocation.
        let inline_max = rb_sys::ruby_encoding_consts::RUBY_ENCODING_INLINE_MAX as c_int;
        Keys::new(&entries, fast_foreach(), if utf8 < inline_max { utf8 } else { -1 })
    })
    .as_ref()
}

const NIL: VALUE = ruby_special_consts::RUBY_Qnil as VALUE;

/// Reads a chunk Hash into `out` (a default chunk); false when the other
/// reader must read it (`out` then holds a part of it, to be thrown away).
///
/// # Safety
///
/// `hash` must be a Hash, and the chunk must be dropped (or forgotten, see
/// [`Seen::borrowed_only`]) before any Ruby code runs: its texts borrow the
/// bytes of the Hash's Strings, which the caller keeps alive (the Hash is an
/// argument on its stack) and which nothing can change or move (a
/// compaction) while no Ruby code runs.
pub unsafe fn read<'a>(hash: VALUE, out: &mut Chunk<'a>, seen: &mut Seen) -> bool {
    let Some(keys) = keys() else { return false };
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
///
/// The encoding is read from the index Ruby keeps in the header's flags
/// (`RB_ENCODING_GET_INLINED`, with the constants of Ruby's public
/// encoding.h), without `rb_enc_get_index`: an index too large for the
/// flags is kept elsewhere, and UTF-8's (one of the first encodings) is
/// never one of those. The compiler then needs no call here, nor the saving
/// of registers around it.
unsafe fn content_string(keys: &Keys, v: VALUE, text: &str) -> Option<ContentString> {
    use rb_sys::ruby_encoding_consts::{RUBY_ENCODING_MASK, RUBY_ENCODING_SHIFT};
    // SAFETY: `v` is a live String (its header is read only).
    unsafe {
        let basic = &*(v as *const rb_sys::RBasic);
        let encoding = (basic.flags & RUBY_ENCODING_MASK as VALUE) >> RUBY_ENCODING_SHIFT as u32;
        let plain = basic.klass == rb_sys::rb_cString
            && basic.flags & rb_sys::ruby_fl_type::RUBY_FL_FREEZE as VALUE == 0
            && encoding == keys.utf8 as VALUE;
        plain.then_some(ContentString { string: v, text })
    }
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

/// The values of the known keys of a Hash, collected in one iteration and
/// read afterwards by the function of its struct: noting a pair costs a
/// table probe, and the keys no struct reads (most of them) cost nothing
/// more. A Hash holds each Symbol once, so a key is found at most once.
struct Found {
    present: u32,
    /// `values[k]` is written before `present` gets `k`'s bit, and read only
    /// with it: the array is not cleared for each Hash.
    values: [MaybeUninit<VALUE>; CODES],
}

impl Found {
    fn new() -> Found {
        Found { present: 0, values: [MaybeUninit::uninit(); CODES] }
    }

    fn get(&self, k: K) -> Option<VALUE> {
        // SAFETY: the bit is set only once the value is written (`note`).
        (self.present & bit(k) != 0).then(|| unsafe { self.values[k as usize].assume_init() })
    }

    /// Runs `read` on the value of `k` if it was there; true when it was not.
    fn with(&self, k: K, read: impl FnOnce(VALUE) -> bool) -> bool {
        self.get(k).is_none_or(read)
    }

    /// Sets `field` from the value of `k` read by `read`, if it was there
    /// (None from `read`: the other reader decides).
    fn set<T>(&self, k: K, field: &mut Field<T>, read: impl FnOnce(VALUE) -> Option<Field<T>>) -> bool {
        self.with(k, |v| match read(v) {
            Some(value) => {
                put(field, value);
                true
            }
            None => false,
        })
    }

    /// Notes the value of an interned key.
    #[inline(always)]
    fn note(&mut self, k: K, value: VALUE) {
        self.values[k as usize] = MaybeUninit::new(value);
        self.present |= bit(k);
    }
}

/// The values of the known keys of `hash`; None when a key must be left to
/// the other reader. `names`: the keys of the struct the Hash is read into.
///
/// # Safety
///
/// `hash` is a Hash that no Ruby code changes while this runs.
#[inline(always)]
unsafe fn collect(keys: &Keys, hash: VALUE, names: Names) -> Option<Found> {
    let mut found = Found::new();
    let mut c = Collect { keys, names, found: &mut found, ok: true };
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
    c.ok.then_some(found)
}

/// The state of an iteration by Ruby.
struct Collect<'k, 'f> {
    keys: &'k Keys,
    names: Names,
    found: &'f mut Found,
    ok: bool,
}

/// Hash iteration callback: notes the pair in the `Collect` in `arg`.
unsafe extern "C" fn collect_pair(key: VALUE, value: VALUE, arg: VALUE) -> c_int {
    // SAFETY: `arg` is the `&mut Collect` given to the iteration, alive and
    // not otherwise borrowed while it runs.
    let c = unsafe { &mut *(arg as *mut Collect) };
    match c.keys.code(key) {
        Some(k) => {
            c.found.note(k, value);
            rb_sys::st_retval::ST_CONTINUE as c_int
        }
        // A call in tail position: the common path saves no register for it.
        None => unsafe { other_key(c, key) },
    }
}

/// [`collect_pair`] for a key the walker did not intern: skipped, or the
/// iteration stops (see [`unread_symbol`]).
#[cold]
#[inline(never)]
unsafe fn other_key(c: &mut Collect, key: VALUE) -> c_int {
    if unsafe { unread_symbol(key, c.names) } {
        rb_sys::st_retval::ST_CONTINUE as c_int
    } else {
        c.ok = false;
        rb_sys::st_retval::ST_STOP as c_int
    }
}

/// True for a key the walker did not intern that is a Symbol no struct of
/// `names` reads: its value is skipped unseen, as the stock processor skips
/// it. False when the other reader must decide: a key that is not a Symbol (a
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

/// The text of a String when it is UTF-8 (whatever its encoding says, as the
/// other reader reads it), borrowed.
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
    openai_stream::utf8::text(bytes)
}

/// Puts `value` in a field of a new struct. The field held its default,
/// absent (each key is read once), which owns nothing: it is forgotten
/// rather than dropped, which saves a call of the drop glue per field.
fn put<T>(field: &mut T, value: T) {
    std::mem::forget(std::mem::replace(field, value));
}

/// A field read from a text, `wrap`ped: a UTF-8 String or nil. What reads
/// other types (Integer ids, content parts, object arguments) is left to the
/// other reader.
unsafe fn text_as<'a, T>(v: VALUE, wrap: impl FnOnce(Cow<'a, str>) -> T) -> Option<Field<T>> {
    if v == NIL {
        return Some(Field::Null);
    }
    Some(Field::Value(wrap(Cow::Borrowed(unsafe { string_text(v) }?))))
}

/// A field absent from the fast path but for nil.
fn null<T>(v: VALUE) -> Option<Field<T>> {
    (v == NIL).then_some(Field::Null)
}

/// A field that holds an object of the Ruby type `t` (read by `fill` into
/// the value `empty` makes, in place), or nil.
#[inline(always)]
unsafe fn nil_or<T>(
    v: VALUE,
    t: ruby_value_type,
    field: &mut Field<T>,
    empty: impl FnOnce() -> T,
    fill: impl FnOnce(&mut T) -> bool,
) -> bool {
    if v == NIL {
        put(field, Field::Null);
        return true;
    }
    if !unsafe { is(v, t) } {
        return false;
    }
    // Built in place: a list of one keeps its element inline, and moving it
    // would copy a few hundred bytes.
    put(field, Field::Value(empty()));
    match field {
        Field::Value(value) => fill(value),
        _ => false,
    }
}

/// A list: an Array of Hashes (or nils), each read in place by `fill`, or
/// nil.
unsafe fn list<T: Default>(
    v: VALUE,
    field: &mut Field<List<T>>,
    mut fill: impl FnMut(VALUE, &mut T) -> bool,
) -> bool {
    unsafe {
        nil_or(v, ruby_value_type::RUBY_T_ARRAY, field, List::new, |items| {
            let Ok(len) = usize::try_from(rb_sys::RARRAY_LEN(v)) else { return false };
            (0..len).all(|i| {
                // SAFETY: `i` is below the length; nothing changes the Array.
                let e = rb_sys::RARRAY_AREF(v, i as isize);
                if e == NIL {
                    items.push(Field::Null);
                    return true;
                }
                is(e, ruby_value_type::RUBY_T_HASH) && fill(e, items.push_default())
            })
        })
    }
}

/// A struct field: a Hash read in place by `fill`, or nil.
unsafe fn object<T: Default>(
    v: VALUE,
    field: &mut Field<T>,
    fill: impl FnOnce(VALUE, &mut T) -> bool,
) -> bool {
    unsafe { nil_or(v, ruby_value_type::RUBY_T_HASH, field, T::default, |value| fill(v, value)) }
}

/// A Symbol's name when it is UTF-8 (as `ruby_json` reads it).
unsafe fn symbol_name<'s>(sym: VALUE) -> Option<&'s str> {
    // SAFETY: rb_sym2str returns the Symbol's frozen name String, which
    // lives as long as the Symbol (held by the Hash being read).
    let name = unsafe { rb_sys::rb_sym2str(sym) };
    unsafe { str_of(name) }
}

/// The content of a chunk that is nothing but a text delta, read without
/// building a chunk: `{choices: [{delta: {content: "..."}}]}`, with any
/// keys no struct reads, an `object` that is a UTF-8 String other than
/// `"error"` (or nil), and a `finish_reason` that is nil. The core's
/// [`openai_stream::chat::ChatProcessor::process_text`] does with it
/// exactly what it does with that chunk. None for anything else, which
/// [`read`] (or the other reader) reads as usual: a key of another field (`usage`,
/// `error`, `tool_calls`, ... even when nil), another type, a list of
/// other than one choice, content that is not a UTF-8 String.
///
/// This is the commonest event of a stream, and building and applying the
/// whole chunk was most of what the Hash path cost on it.
///
/// # Safety
///
/// As [`read`]: `hash` is a Hash, and the text must not be used once Ruby
/// code has run.
pub unsafe fn read_text<'a>(hash: VALUE) -> Option<(&'a str, Option<ContentString>)> {
    const OTHER_CHUNK_FIELDS: u32 = bit(K::Usage) | bit(K::XGroq) | bit(K::Error) | bit(K::Message);
    const OTHER_CHOICE_FIELDS: u32 = bit(K::Message) | bit(K::Error) | bit(K::Usage);
    let keys = keys()?;
    let top =
        unsafe { collect(keys, hash, Chunk::FIELDS) }.filter(|f| f.present & OTHER_CHUNK_FIELDS == 0)?;
    if let Some(object) = top.get(K::Object) {
        if object != NIL && !matches!(unsafe { string_text(object) }, Some(o) if o != "error") {
            return None;
        }
    }
    let choices = top.get(K::Choices)?;
    if !unsafe { is_array_of_one_hash(choices) } {
        return None;
    }
    // SAFETY: an Array of one element (above).
    let choice = unsafe { rb_sys::RARRAY_AREF(choices, 0) };
    let c =
        unsafe { collect(keys, choice, Choice::FIELDS) }.filter(|f| f.present & OTHER_CHOICE_FIELDS == 0)?;
    if c.get(K::FinishReason).is_some_and(|r| r != NIL) {
        return None;
    }
    let delta = c.get(K::Delta)?;
    if !unsafe { is(delta, ruby_value_type::RUBY_T_HASH) } {
        return None;
    }
    let d = unsafe { collect(keys, delta, Delta::FIELDS) }.filter(|f| f.present & bit(K::ToolCalls) == 0)?;
    let content = d.get(K::Content)?;
    let text = unsafe { string_text(content) }?;
    Some((text, unsafe { content_string(keys, content, text) }))
}

/// True when `v` is a heap object of the Ruby type `t` (nil, false and
/// immediates are not).
///
/// # Safety
///
/// `v` is a live Ruby value.
#[inline(always)]
unsafe fn is(v: VALUE, t: ruby_value_type) -> bool {
    // Not an immediate, nil or false: an object, whose header has its type.
    let object = v & ruby_special_consts::RUBY_IMMEDIATE_MASK as VALUE == 0 && v & !NIL != 0;
    // SAFETY: an object starts with its RBasic.
    object
        && unsafe { (*(v as *const rb_sys::RBasic)).flags } & ruby_value_type::RUBY_T_MASK as VALUE
            == t as VALUE
}

/// An Array holding exactly one Hash.
unsafe fn is_array_of_one_hash(v: VALUE) -> bool {
    unsafe {
        is(v, ruby_value_type::RUBY_T_ARRAY)
            && rb_sys::RARRAY_LEN(v) == 1
            && is(rb_sys::RARRAY_AREF(v, 0), ruby_value_type::RUBY_T_HASH)
    }
}

/// The text of a String that is UTF-8 (see [`str_of`]).
unsafe fn string_text<'a>(v: VALUE) -> Option<&'a str> {
    if !unsafe { is(v, ruby_value_type::RUBY_T_STRING) } {
        return None;
    }
    unsafe { str_of(v) }
}

/// A chunk (the top-level Hash).
unsafe fn chunk<'a>(cx: &mut Cx, hash: VALUE, out: &mut Chunk<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, Chunk::FIELDS) }) else { return false };
    unsafe {
        f.with(K::Choices, |v| {
            let ok = list(v, &mut out.choices, |h, c| choice(cx, h, c));
            cx.note_list(&out.choices);
            ok
        }) && f.set(K::Object, &mut out.object, |v| text_as(v, Text))
            && f.set(K::Message, &mut out.message, |v| text_as(v, Text))
            && f.set(K::Usage, &mut out.usage, null)
            && f.set(K::XGroq, &mut out.x_groq, null)
            && f.set(K::Error, &mut out.error, null)
    }
}

/// A choice (a Hash in `choices`).
unsafe fn choice<'a>(cx: &mut Cx, hash: VALUE, out: &mut Choice<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, Choice::FIELDS) }) else { return false };
    unsafe {
        f.with(K::Delta, |v| object(v, &mut out.delta, |h, d| delta(cx, h, d)))
            && f.set(K::FinishReason, &mut out.finish_reason, |v| text_as(v, Text))
            && f.with(K::Message, |v| object(v, &mut out.message, |h, d| delta(cx, h, d)))
            && f.set(K::Error, &mut out.error, null)
            && f.set(K::Usage, &mut out.usage, null)
            && f.set(K::NativeFinishReason, &mut out.native_finish_reason, |v| text_as(v, Text))
    }
}

/// A delta or a message.
unsafe fn delta<'a>(cx: &mut Cx, hash: VALUE, out: &mut Delta<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, Delta::FIELDS) }) else { return false };
    unsafe {
        f.set(K::Content, &mut out.content, |v| {
            let content = text_as(v, Content::Text);
            if let Some(Field::Value(Content::Text(t))) = &content {
                cx.content = content_string(cx.keys, v, t);
                cx.contents += 1;
            }
            content
        }) && f.with(K::ToolCalls, |v| {
            let ok = list(v, &mut out.tool_calls, |h, c| tool_call(cx, h, c));
            cx.note_list(&out.tool_calls);
            ok
        })
    }
}

/// A tool call delta (a Hash in `tool_calls`).
unsafe fn tool_call<'a>(cx: &mut Cx, hash: VALUE, out: &mut ToolCallDelta<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, ToolCallDelta::FIELDS) }) else { return false };
    unsafe {
        f.with(K::Function, |v| object(v, &mut out.function, |h, d| function(cx, h, d)))
            && f.set(K::Index, &mut out.index, |v| match v {
                NIL => Some(Field::Null),
                v if rb_sys::FIXNUM_P(v) => Some(Field::Value(Int(rb_sys::FIX2LONG(v) as i64))),
                _ => None,
            })
            && f.set(K::Id, &mut out.id, |v| text_as(v, Id))
    }
}

/// A tool call's `function`.
unsafe fn function<'a>(cx: &Cx, hash: VALUE, out: &mut Function<'a>) -> bool {
    let Some(f) = (unsafe { collect(cx.keys, hash, Function::FIELDS) }) else { return false };
    unsafe {
        f.set(K::Arguments, &mut out.arguments, |v| text_as(v, Arguments::Text))
            && f.set(K::Name, &mut out.name, |v| text_as(v, Text))
            && f.set(K::Id, &mut out.id, |v| text_as(v, Id))
    }
}
