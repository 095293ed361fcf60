//! The Hash path's one reader, for both protocols: a parsed chunk or event
//! (a Ruby Hash from `JSON.parse`) written back as JSON text, which the
//! core reads as the raw path reads a payload, by the same rules.
//!
//! Of a chat chunk it writes only the keys the core's chunk model reads
//! ([`Reads`]): values under other keys are skipped unseen, as the stock
//! processor skips them. Symbol keys are matched by identity (a Symbol is
//! unique per name: one in an encoding that is not ASCII-compatible names
//! no field), other keys by their text. A Responses event is written whole.
//! A chat chunk that is nothing but a text delta, most of a stream, is not
//! written at all: [`bare_text`].
//!
//! Hashes become objects, Arrays arrays, Strings and Symbols strings,
//! Integers (of any size) and Floats numbers, true, false and nil
//! themselves. A String in UTF-8, US-ASCII or binary is read as its bytes,
//! which must be UTF-8; one in another encoding is transcoded by Ruby;
//! what is not text is an `InvalidChunk` StreamError naming the field. A
//! value of a class with no JSON meaning (or a NaN) reads as null, a Hash
//! key that is neither a String nor a Symbol as its `to_s`, each with an
//! anomaly. An infinite Float is written as a number beyond f64's range,
//! which the core reads as that infinity.
//!
//! A Hash's pairs are collected by one `rb_hash_foreach`, which runs no Ruby
//! code, then written: kept on the stack (past the first few, in a Ruby
//! Array), where the GC sees and pins them while Ruby code runs
//! (transcoding, a key's `to_s`). Nesting recurses through the reader's own
//! frames only, and every few levels it asks Ruby whether the stack has room
//! left (`ruby_stack_check`): a deep value on a small thread or fiber stack
//! is an error, never a crash.

use std::io::Write as _;
use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::sync::OnceLock;

use magnus::encoding::{EncodingCapable, RbEncoding};
use magnus::rb_sys::{protect, AsRawValue, FromRawValue};
use magnus::value::ReprValue;
use magnus::{Error, RString, Ruby, Value};
use openai_stream::anomaly::{excerpt_bytes, Anomaly, AnomalyKind};
use openai_stream::chat::Chunk;
use openai_stream::error::StreamErrorKind;
use openai_stream::lenient::{Reads, ReadsOf};
use rb_sys::{ruby_value_type as T, VALUE};

use crate::errors;

/// The deepest nesting accepted, as the core's parser accepts it.
const MAX_DEPTH: usize = openai_stream::json::DEFAULT_MAX_DEPTH;

/// The most keys of a [`Node`] (a struct of more is read whole).
const KEYS: usize = 8;

/// Pairs of a Hash kept on the stack; the rest go to a Ruby Array.
const STACK_PAIRS: usize = 8;

/// What is read of a Hash: the keys of a [`Reads`], with their Symbols.
pub struct Node {
    /// The keys' Symbols, then 0 (never a Symbol).
    symbols: [VALUE; KEYS],
    keys: Vec<Key>,
}

struct Key {
    name: &'static str,
    /// What is read of its value; None: all of it.
    node: Option<Node>,
}

/// What is read of a chat chunk.
pub fn chunk_keys() -> Option<&'static Node> {
    static CHUNK: OnceLock<Option<Node>> = OnceLock::new();
    CHUNK.get_or_init(|| node(&<Chunk as ReadsOf>::READS)).as_ref()
}

fn node(reads: &'static Reads) -> Option<Node> {
    let Reads::Keys(keys) = reads else { return None };
    let mut symbols = [0; KEYS];
    for (slot, (name, _)) in symbols.iter_mut().zip(keys.iter()) {
        *slot = intern(name);
    }
    let keys: Vec<_> = keys.iter().map(|(name, reads)| Key { name, node: node(reads) }).collect();
    (keys.len() <= KEYS).then_some(Node { symbols, keys })
}

/// The Symbol `JSON.parse(..., symbolize_names: true)` makes of `name`. One
/// made before as a heap object is registered with the GC, which then
/// keeps it alive and in place.
fn intern(name: &str) -> VALUE {
    // SAFETY: called with the GVL held (from a method call); the name is
    // valid for its length.
    unsafe {
        let symbol = rb_sys::rb_id2sym(rb_sys::rb_intern2(name.as_ptr().cast(), name.len() as _));
        if !rb_sys::SPECIAL_CONST_P(symbol) {
            rb_sys::rb_gc_register_mark_object(symbol);
        }
        symbol
    }
}

/// A value read as JSON text, with the anomalies of what had no exact JSON
/// reading.
pub struct Json {
    pub text: String,
    pub anomalies: Vec<Anomaly>,
}

/// `value` as JSON text, of what `keys` names (all of it when None).
pub fn read(ruby: &Ruby, value: Value, keys: Option<&Node>) -> Result<Json, Error> {
    let mut w = Writer { out: Vec::with_capacity(256), anomalies: Vec::new(), failure: None, raised: None };
    // A Ruby exception that escapes a step (one of no memory) leaves
    // through `protect`, not through the writer's frames.
    protect(|| {
        let _ = w.value(value.as_raw(), 0, keys);
        ruby.qnil().as_raw()
    })?;
    // An exception from Ruby code the reader ran (a key's `to_s`, a
    // String's `encode`) that is not that code failing (an `Interrupt`, a
    // `Timeout`, a kill) reaches the caller as it is.
    if let Some(e) = w.raised.filter(|e| errors::passes_through(ruby, e)) {
        return Err(e);
    }
    if let Some((kind, message, mut path)) = w.failure {
        path.reverse();
        let field = path.concat();
        let message =
            if field.is_empty() { message } else { format!("{}: {message}", field.trim_start_matches('.')) };
        return Err(errors::stream(ruby, kind, message));
    }
    // SAFETY: what is written is ASCII, or text from a `&str`.
    Ok(Json { text: unsafe { String::from_utf8_unchecked(w.out) }, anomalies: w.anomalies })
}

struct Writer {
    out: Vec<u8>,
    anomalies: Vec<Anomaly>,
    /// Why reading stopped, and where: the keys and indexes from the value
    /// up, added as the failure returns through each level.
    failure: Option<(StreamErrorKind, String, Vec<String>)>,
    /// The Ruby exception behind the failure, when Ruby code raised it.
    raised: Option<Error>,
}

/// Reading stopped: `Writer::failure` says why.
struct Stop;

type Step = Result<(), Stop>;

impl Writer {
    fn fail(&mut self, kind: StreamErrorKind, message: String) -> Step {
        self.failure = Some((kind, message, Vec::new()));
        Err(Stop)
    }

    /// Adds a step to the path of the failure.
    fn at(&mut self, step: String) -> Stop {
        if let Some((_, _, path)) = &mut self.failure {
            path.push(step);
        }
        Stop
    }

    fn push(&mut self, text: &str) -> Step {
        self.out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    fn push_fmt(&mut self, args: std::fmt::Arguments) -> Step {
        // Writing to a Vec cannot fail.
        let _ = self.out.write_fmt(args);
        Ok(())
    }

    fn value(&mut self, v: VALUE, depth: usize, keys: Option<&Node>) -> Step {
        // SAFETY: `v` is a live value (held by the value being read); the
        // macro reads its header only.
        match unsafe { rb_sys::RB_TYPE(v) } {
            T::RUBY_T_STRING => self.string(v),
            T::RUBY_T_HASH => self.hash(v, depth, keys),
            T::RUBY_T_ARRAY => self.array(v, depth, keys),
            _ => self.scalar(v),
        }
    }

    /// Anything but a String, a Hash or an Array. Apart from the others, so
    /// that the frames of a nesting level stay small.
    #[inline(never)]
    fn scalar(&mut self, v: VALUE) -> Step {
        // SAFETY: as in `value`; an Integer's digits are copied at once.
        match unsafe { rb_sys::RB_TYPE(v) } {
            T::RUBY_T_SYMBOL => self.string(unsafe { rb_sys::rb_sym2str(v) }),
            T::RUBY_T_NIL => self.push("null"),
            T::RUBY_T_TRUE => self.push("true"),
            T::RUBY_T_FALSE => self.push("false"),
            T::RUBY_T_FIXNUM => self.push_fmt(format_args!("{}", unsafe { rb_sys::FIX2LONG(v) })),
            T::RUBY_T_BIGNUM => {
                self.out.extend_from_slice(unsafe { bytes(rb_sys::rb_big2str(v, 10)) });
                Ok(())
            }
            T::RUBY_T_FLOAT => match unsafe { rb_sys::NUM2DBL(v) } {
                f if f.is_finite() => self.push_fmt(format_args!("{f:?}")),
                // Beyond f64's range: the core reads it as that infinity.
                f if f > 0.0 => self.push("1e400"),
                f if f < 0.0 => self.push("-1e400"),
                _ => self.unsupported("a Float NaN"),
            },
            // SAFETY: the class name is copied into the message at once.
            _ => self.unsupported(&format!("a value of class {}", unsafe { Value::from_raw(v).classname() })),
        }
    }

    /// `null`, with an anomaly saying what was there.
    fn unsupported(&mut self, what: &str) -> Step {
        let message = format!("{what} has no JSON meaning; read as nil");
        self.anomalies.push(Anomaly::new(AnomalyKind::UnsupportedValue, message));
        self.push("null")
    }

    /// Room for one more level. The stack is checked every few levels: that
    /// many take far less than the room Ruby keeps when it says there is
    /// enough (docs/reliability.md).
    fn enter(&mut self, depth: usize) -> Step {
        match depth {
            MAX_DEPTH.. => self.too_deep(None),
            _ if depth % 8 == 0 => {
                crate::convert::room().or_else(|m| self.too_deep(Some(format!("{m} ({depth} levels)"))))
            }
            _ => Ok(()),
        }
    }

    /// Fails with the message `no_room`, else that of nesting past `MAX_DEPTH`.
    #[cold]
    fn too_deep(&mut self, no_room: Option<String>) -> Step {
        let message = no_room.unwrap_or_else(|| format!("nested deeper than {MAX_DEPTH} levels"));
        self.fail(StreamErrorKind::TooDeep, message)
    }

    fn array(&mut self, a: VALUE, depth: usize, keys: Option<&Node>) -> Step {
        self.enter(depth)?;
        self.out.push(b'[');
        // By index, the length read again each time: Ruby code run while
        // an element is read may change the Array.
        let mut i = 0;
        // SAFETY: a live Array; rb_ary_entry checks the index.
        while i < unsafe { rb_sys::RARRAY_LEN(a) } {
            if i > 0 {
                self.out.push(b',');
            }
            let item = unsafe { rb_sys::rb_ary_entry(a, i) };
            if self.value(item, depth + 1, keys).is_err() {
                return Err(self.at_index(i));
            }
            i += 1;
        }
        self.push("]")
    }

    fn hash(&mut self, h: VALUE, depth: usize, keys: Option<&Node>) -> Step {
        self.enter(depth)?;
        let pairs = Pairs::of(h, keys);
        self.out.push(b'{');
        for (key, value, known) in pairs.kept() {
            self.pair(key, value, depth + 1, keys, known)?;
        }
        let mut i = 0;
        // SAFETY: the Array of the pairs past the first ones (see `Pairs`).
        while pairs.spill != 0 && i < unsafe { rb_sys::RARRAY_LEN(pairs.spill) } {
            let entry = |i| unsafe { rb_sys::rb_ary_entry(pairs.spill, i) };
            self.pair(entry(i), entry(i + 1), depth + 1, keys, None)?;
            i += 2;
        }
        if self.out.last() == Some(&b',') {
            self.out.pop();
        }
        self.push("}")
    }

    /// One pair and a comma, unless `keys` does not name its key. `known`:
    /// the key's [`Key`], when the key is its Symbol.
    fn pair(
        &mut self,
        key: VALUE,
        value: VALUE,
        depth: usize,
        keys: Option<&Node>,
        known: Option<&Key>,
    ) -> Step {
        let start = self.out.len();
        let inner = match known {
            Some(k) => {
                self.out.push(b'"');
                self.out.extend_from_slice(k.name.as_bytes());
                self.out.push(b'"');
                k.node.as_ref()
            }
            None => match self.key_of(key, keys)? {
                Some(inner) => inner,
                None => return Ok(()),
            },
        };
        let end = self.out.len();
        self.out.push(b':');
        if self.value(value, depth, inner).is_err() {
            return Err(self.at_key(start, end));
        }
        self.push(",")
    }

    /// A key that is not a [`Key`]'s Symbol, written; what is read of its
    /// value (`Some(None)`: all of it), or None when `keys` does not name
    /// it (then it is taken back).
    #[inline(never)]
    fn key_of<'n>(&mut self, key: VALUE, keys: Option<&'n Node>) -> Result<Option<Option<&'n Node>>, Stop> {
        let start = self.out.len();
        self.key(key).map_err(|_| self.at(".(a key)".to_owned()))?;
        let Some(node) = keys else { return Ok(Some(None)) };
        let name = String::from_utf8_lossy(self.out.get(start + 1..self.out.len() - 1).unwrap_or_default());
        match node.keys.iter().find(|k| k.name == name) {
            Some(k) => Ok(Some(k.node.as_ref())),
            None => {
                self.out.truncate(start);
                Ok(None)
            }
        }
    }

    #[cold]
    fn at_index(&mut self, i: std::os::raw::c_long) -> Stop {
        self.at(format!("[{i}]"))
    }

    /// [`Writer::at`] the key written at `start..end`.
    #[cold]
    fn at_key(&mut self, start: usize, end: usize) -> Stop {
        let name = String::from_utf8_lossy(self.out.get(start..end).unwrap_or_default()).into_owned();
        self.at(format!(".{}", name.trim_matches('"')))
    }

    /// A Hash key: a String or a Symbol as its text; anything else as its
    /// `to_s`, with an anomaly.
    fn key(&mut self, key: VALUE) -> Step {
        // SAFETY: as in `value`.
        match unsafe { rb_sys::RB_TYPE(key) } {
            T::RUBY_T_SYMBOL => self.string(unsafe { rb_sys::rb_sym2str(key) }),
            T::RUBY_T_STRING => self.string(key),
            _ => {
                let key = unsafe { Value::from_raw(key) };
                let text = match key.to_r_string() {
                    Ok(text) => text,
                    Err(e) => {
                        let message = format!("a Hash key could not be read: {e}");
                        self.raised = Some(e);
                        return self.fail(StreamErrorKind::InvalidChunk, message);
                    }
                };
                let start = self.out.len();
                self.string(text.as_raw())?;
                let text = String::from_utf8_lossy(&self.out[start..]);
                // SAFETY: the class name is copied into the message at once.
                let class = unsafe { key.classname() };
                let message =
                    format!("a Hash key of class {class} is neither a String nor a Symbol; read as {text}");
                self.anomalies.push(Anomaly::new(AnomalyKind::ConvertedField, message));
                Ok(())
            }
        }
    }

    /// A String as a JSON string (see the module documentation).
    fn string(&mut self, s: VALUE) -> Step {
        // SAFETY: a live String; its bytes are copied before Ruby code runs.
        let written = match unsafe { text(s) } {
            Some(text) => text.map(|t| serde_json::to_writer(&mut self.out, t)).map_err(|m| (m, None)),
            None => transcoded(s).map(|t| serde_json::to_writer(&mut self.out, &t)),
        };
        // Writing to a Vec cannot fail.
        written.map(|_| ()).or_else(|(message, raised)| {
            self.raised = raised;
            self.fail(StreamErrorKind::InvalidChunk, message)
        })
    }
}

/// The encodings whose Strings are read as their bytes: UTF-8, US-ASCII
/// and binary.
fn as_bytes() -> &'static [c_int; 3] {
    static INDEXES: OnceLock<[c_int; 3]> = OnceLock::new();
    // SAFETY: plain getters of Ruby's encoding table.
    INDEXES.get_or_init(|| unsafe {
        [rb_sys::rb_utf8_encindex(), rb_sys::rb_usascii_encindex(), rb_sys::rb_ascii8bit_encindex()]
    })
}

/// The bytes of a String.
///
/// # Safety
///
/// `s` is a live String; the bytes are used before Ruby code runs.
unsafe fn bytes<'a>(s: VALUE) -> &'a [u8] {
    let len = usize::try_from(unsafe { rb_sys::RSTRING_LEN(s) }).unwrap_or(0);
    if len == 0 {
        return &[];
    }
    // SAFETY: a String's pointer is valid for its length.
    unsafe { std::slice::from_raw_parts(rb_sys::RSTRING_PTR(s).cast::<u8>(), len) }
}

/// The text of a String in UTF-8, US-ASCII or binary (None in another
/// encoding); bytes that are not UTF-8 are an `Err` saying so.
///
/// # Safety
///
/// As [`bytes`].
unsafe fn text<'a>(s: VALUE) -> Option<Result<&'a str, String>> {
    // SAFETY: a live String.
    if !as_bytes().contains(&unsafe { rb_sys::ENCODING_GET(s) }) {
        return None;
    }
    let bytes = unsafe { bytes(s) };
    Some(std::str::from_utf8(bytes).map_err(|e| {
        format!("invalid UTF-8 in a String at byte {}: {}", e.valid_up_to(), excerpt_bytes(bytes))
    }))
}

/// The text of `v` when it is a String that [`text`] reads.
///
/// # Safety
///
/// As [`bytes`], for any live value.
unsafe fn utf8<'a>(v: VALUE) -> Option<&'a str> {
    // SAFETY: the macro reads the header only.
    unsafe { rb_sys::RB_TYPE_P(v, T::RUBY_T_STRING) }.then(|| unsafe { text(v) }?.ok()).flatten()
}

/// A String in another encoding, transcoded to UTF-8 by Ruby (which says
/// why when it cannot: the message, and what `encode` raised).
fn transcoded(s: VALUE) -> Result<String, (String, Option<Error>)> {
    // SAFETY: a live String.
    let s = unsafe { RString::from_value(Value::from_raw(s)) }.ok_or(("not a String".to_owned(), None))?;
    let utf8 = s.funcall::<_, _, RString>("encode", ("UTF-8",)).map_err(|e| {
        let encoding = RbEncoding::from(s.enc_get());
        (format!("a {} String that does not convert to UTF-8 ({e})", encoding.name()), Some(e))
    })?;
    // SAFETY: a live String, read at once.
    let not_utf8 = || {
        let encoding = RbEncoding::from(utf8.enc_get());
        Err(format!("String#encode(\"UTF-8\") returned a {} String", encoding.name()))
    };
    unsafe { text(utf8.as_raw()) }.unwrap_or_else(not_utf8).map(str::to_owned).map_err(|m| (m, None))
}

/// `s` itself for a new String of `text`, when it may stand for one, as the
/// stock processor returns `delta[:content]` itself: a String (not of a
/// subclass; one with singleton methods is, as the stock processor returns
/// it too), not frozen, UTF-8, with that text.
pub fn reusable(s: VALUE, text: &str) -> Option<Value> {
    // SAFETY: a live String of the Hash read, its bytes read at once.
    let same = unsafe {
        bytes(s) == text.as_bytes()
            && rb_sys::ENCODING_GET(s) == as_bytes()[0]
            && rb_sys::rb_obj_class(s) == rb_sys::rb_cString
            && rb_sys::rb_obj_frozen_p(s) == rb_sys::Qfalse as VALUE
    };
    // SAFETY: as above.
    same.then(|| unsafe { Value::from_raw(s) })
}

/// The pairs of one Hash to write, collected in one iteration and written
/// after it (see the module documentation).
struct Pairs<'k> {
    keys: Option<&'k Node>,
    stack: [MaybeUninit<(VALUE, VALUE)>; STACK_PAIRS],
    /// Of each pair on the stack, its key's index in `keys` when the key is
    /// its Symbol, else `KEYS`.
    known: [u8; STACK_PAIRS],
    len: usize,
    /// A Ruby Array of the pairs past the first ones, or 0.
    spill: VALUE,
}

impl<'k> Pairs<'k> {
    /// The pairs of the Hash `h`, but those under a Symbol `keys` does not
    /// name.
    fn of(h: VALUE, keys: Option<&'k Node>) -> Pairs<'k> {
        let stack = [MaybeUninit::uninit(); STACK_PAIRS];
        let mut pairs = Pairs { keys, stack, known: [KEYS as u8; STACK_PAIRS], len: 0, spill: 0 };
        // SAFETY: a live Hash; the callback gets `pairs`, alive for the call.
        unsafe { rb_sys::rb_hash_foreach(h, Some(collect), &mut pairs as *mut Pairs as VALUE) };
        pairs
    }

    /// The pairs kept on the stack, each with its [`Key`] when the key is
    /// its Symbol.
    fn kept(&self) -> impl Iterator<Item = (VALUE, VALUE, Option<&'k Key>)> + '_ {
        let keys = |i: u8| self.keys.and_then(|node| node.keys.get(usize::from(i)));
        // SAFETY: the first `len` are written (`collect`).
        let stack =
            unsafe { std::slice::from_raw_parts(self.stack.as_ptr().cast::<(VALUE, VALUE)>(), self.len) };
        stack.iter().zip(self.known).map(move |(&(key, value), i)| (key, value, keys(i)))
    }
}

/// `rb_hash_foreach`'s callback: keeps a pair, unless `keys` does not name
/// its key, a Symbol.
unsafe extern "C" fn collect(key: VALUE, value: VALUE, arg: VALUE) -> c_int {
    // SAFETY: `arg` is the `Pairs` of `Pairs::of`, alive and not otherwise
    // borrowed while the iteration runs.
    let pairs = unsafe { &mut *(arg as *mut Pairs) };
    let mut known = KEYS;
    if let Some(node) = pairs.keys {
        known = node.symbols.iter().position(|&s| s == key).unwrap_or(KEYS);
        // SAFETY: a live value; the macro reads its header only.
        if known == KEYS && unsafe { rb_sys::RB_SYMBOL_P(key) } {
            return rb_sys::st_retval::ST_CONTINUE as c_int;
        }
    }
    if let (Some(slot), Some(index)) = (pairs.stack.get_mut(pairs.len), pairs.known.get_mut(pairs.len)) {
        slot.write((key, value));
        *index = known as u8;
        pairs.len += 1;
    } else {
        // SAFETY: allocating runs no Ruby code; the Array is kept in `pairs`,
        // on the stack.
        unsafe {
            if pairs.spill == 0 {
                pairs.spill = rb_sys::rb_ary_new();
            }
            rb_sys::rb_ary_push(pairs.spill, key);
            rb_sys::rb_ary_push(pairs.spill, value);
        }
    }
    rb_sys::st_retval::ST_CONTINUE as c_int
}

/// How a Hash of a bare text delta may hold a key besides the one read.
#[derive(Clone, Copy, PartialEq)]
enum May {
    /// Hold anything: no rule reads the key.
    Hold,
    /// Hold nil only: a rule reads the key.
    BeNil,
    /// `object`: nil, or a String other than `"error"`.
    NotError,
}

/// The keys of one Hash of a bare text delta: the one read, and those it
/// may also hold.
struct Level {
    read: VALUE,
    others: Vec<(VALUE, May)>,
}

/// The levels of a bare text delta: chunk, choice, delta. A key a rule
/// reads is never one to hold, whatever the lists below say: a key left
/// out, or listed to hold, can only make the try fail. A key listed as one
/// that may be nil must be one whose rule reads nil as absent.
fn levels() -> &'static Option<[Level; 3]> {
    static LEVELS: OnceLock<Option<[Level; 3]>> = OnceLock::new();
    LEVELS.get_or_init(|| {
        let chunk = chunk_keys()?;
        let choice = chunk.keys.iter().find(|k| k.name == "choices")?.node.as_ref()?;
        let delta = choice.keys.iter().find(|k| k.name == "delta")?.node.as_ref()?;
        // The keys, each with what it may hold: `?` nil only, `!` an
        // `object`, else anything.
        let level = |node: &Node, read: &str, others: &'static str| {
            let read_by_a_rule = |name: &str| node.keys.iter().any(|k| k.name == name);
            let may = |key: &'static str| match key.split_at(key.len().saturating_sub(1)) {
                (name, "?") => (name, May::BeNil),
                (name, "!") => (name, May::NotError),
                _ => (key, May::Hold),
            };
            let kept = others
                .split_whitespace()
                .map(may)
                .filter(|&(name, may)| may != May::Hold || !read_by_a_rule(name));
            Level { read: intern(read), others: kept.map(|(name, may)| (intern(name), may)).collect() }
        };
        // The envelope, then rarer keys: OpenAI's, OpenRouter's, Azure's,
        // vLLM's.
        let chunk_others = "object! id created model system_fingerprint usage? service_tier obfuscation \
            provider prompt_filter_results";
        let choice_others =
            "index finish_reason? logprobs native_finish_reason? content_filter_results stop_reason";
        let delta_others = "role refusal? reasoning_content? reasoning? reasoning_details?";
        Some([
            level(chunk, "choices", chunk_others),
            level(choice, "delta", choice_others),
            level(delta, "content", delta_others),
        ])
    })
}

impl Level {
    /// The value under the key read, when `h` is a Hash that holds it and
    /// nothing but what it may hold: one `rb_hash_foreach`, each key
    /// matched by identity, which on Ruby 3.4 + YJIT costs less than
    /// looking each key up (`docs/decisions.md`).
    ///
    /// # Safety
    ///
    /// `h` is a live value; inside `protect`: `rb_hash_foreach` runs no
    /// Ruby code here, but may raise (a Hash iterated over 127 levels deep
    /// keeps its level in an instance variable, which allocates).
    unsafe fn only(&self, h: VALUE) -> Option<VALUE> {
        let mut seen = Seen { level: self, value: rb_sys::Qundef as VALUE };
        // SAFETY: a live value, read by Ruby's public API; the callback
        // gets `seen`, alive for the call.
        unsafe {
            if !rb_sys::RB_TYPE_P(h, T::RUBY_T_HASH) {
                return None;
            }
            rb_sys::rb_hash_foreach(h, Some(visit), &mut seen as *mut Seen as VALUE);
        }
        Some(seen.value).filter(|&v| v != rb_sys::Qundef as VALUE)
    }
}

/// What [`Level::only`]'s iteration has seen: the value read, or undef.
struct Seen<'a> {
    level: &'a Level,
    value: VALUE,
}

/// `rb_hash_foreach`'s callback for [`Level::only`]: keeps the value read,
/// and stops, with no value, at a key the level may not hold or a value it
/// may not hold there. Runs no Ruby code.
unsafe extern "C" fn visit(key: VALUE, value: VALUE, arg: VALUE) -> c_int {
    // SAFETY: `arg` is the `Seen` of `Level::only`, alive and not otherwise
    // borrowed while the iteration runs.
    let seen = unsafe { &mut *(arg as *mut Seen) };
    let nil = rb_sys::Qnil as VALUE;
    let fits = if key == seen.level.read {
        seen.value = value;
        true
    } else {
        match seen.level.others.iter().find(|&&(k, _)| k == key) {
            Some((_, May::Hold)) => true,
            Some((_, May::BeNil)) => value == nil,
            // SAFETY: a live value; its bytes are read at once.
            Some((_, May::NotError)) => value == nil || unsafe { utf8(value) }.is_some_and(|t| t != "error"),
            None => false,
        }
    };
    if fits {
        return rb_sys::st_retval::ST_CONTINUE as c_int;
    }
    seen.value = rb_sys::Qundef as VALUE;
    rb_sys::st_retval::ST_STOP as c_int
}

/// The text of a chat chunk that is nothing but a text delta, and its
/// String: `{choices: [{delta: {content: "..."}}]}`, besides which each
/// level may hold the keys [`levels`] lists: keys no rule reads, nil under
/// some that one does (`usage`, `finish_reason`), and an `object` that is
/// not `"error"`. The core reads that text alone (`process_text`) as it
/// would read the whole chunk.
pub fn bare_text<'a>(chunk: Value) -> Result<Option<(&'a str, VALUE)>, Error> {
    let Some([chunk_level, choice, delta]) = levels() else { return Ok(None) };
    let no = rb_sys::Qfalse as VALUE;
    let content = protect(|| {
        // SAFETY: live values, inside `protect`; the Array's element is
        // read at once.
        unsafe {
            let Some(choices) = chunk_level.only(chunk.as_raw()) else { return no };
            if !rb_sys::RB_TYPE_P(choices, T::RUBY_T_ARRAY) || rb_sys::RARRAY_LEN(choices) != 1 {
                return no;
            }
            let inner = choice.only(rb_sys::rb_ary_entry(choices, 0)).and_then(|d| delta.only(d));
            inner.unwrap_or(no)
        }
    })?;
    // SAFETY: a live value; the text is used before Ruby code runs.
    Ok(unsafe { utf8(content) }.map(|text| (text, content)))
}
