//! A Ruby value (a Hash from `JSON.parse`) as the core's owned
//! [`JsonValue`], the one reader of the Hash path besides the walker:
//! every Responses event, and every chat chunk the walker
//! ([`crate::hash_walk`]) stands aside on, which the core's lenient chunk
//! reader then reads from the value, by the rules it reads raw text with.
//!
//! Hashes become objects (keys in Ruby's order), Arrays arrays, Strings
//! and Symbols strings (text in another encoding is transcoded; a String
//! that is not text is an error), Integers and Floats numbers, true, false
//! and nil themselves. A value of another class has no JSON meaning: it
//! reads as null, with an anomaly; a Hash key that is neither a String nor
//! a Symbol reads as its `to_s` (what `JSON.generate` writes), with an
//! anomaly. Nesting is bounded like serde_json's recursion limit.
//!
//! Transcoding and `to_s` run Ruby code, so a collection may run meanwhile:
//! the value built owns all its data, and the Ruby values being read are on
//! the stack (the pair a Hash iteration hands over, the Array read by
//! index), where the GC sees and pins them.

use magnus::prelude::*;
use magnus::r_hash::ForEach;
use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::value::ReprValue;
use magnus::IntoValue;
use magnus::{Error, Float, Integer, RArray, RHash, RString, Ruby, Symbol, Value};
use openai_stream::anomaly::{Anomaly, AnomalyKind};
use openai_stream::chat::Chunk;
use openai_stream::json::{JsonValue, Number};
use openai_stream::lenient::Field;
use serde::Deserialize;

use crate::{errors, guard::guard, hash_walk};

/// The deepest nesting accepted, as in serde_json.
pub const MAX_DEPTH: usize = 128;

/// `value` as a JSON value, with the anomalies of what had no exact JSON
/// reading; the error of what could not be read at all is an
/// `InvalidChunk` StreamError.
pub fn read(ruby: &Ruby, value: Value) -> Result<(JsonValue, Vec<Anomaly>), Error> {
    let mut anomalies = Vec::new();
    let json = guard(ruby, || {
        convert(ruby, value, 0, &mut anomalies).map_err(|message| errors::invalid_chunk(ruby, message))
    })?;
    Ok((json, anomalies))
}

/// A chunk read from a converted value by the core's lenient chunk reader,
/// through the value's Deserializer (what the raw path reads a line with
/// when serde_json refused it for a number beyond f64's range). Not through
/// `to_json` and the text reader: a non-finite Float has no JSON text.
pub fn chunk_of(json: &JsonValue) -> Result<Chunk<'_>, String> {
    Field::<Chunk>::deserialize(json).map(Chunk::from_field).map_err(|e| e.to_string())
}

/// `v`, at nesting `depth`, adding to `anomalies`; the error's message.
fn convert(ruby: &Ruby, v: Value, depth: usize, anomalies: &mut Vec<Anomaly>) -> Result<JsonValue, String> {
    if v.is_nil() {
        return Ok(JsonValue::Null);
    }
    if let Some(s) = RString::from_value(v) {
        return text(ruby, s).map(JsonValue::String);
    }
    if let Some(sym) = Symbol::from_value(v) {
        return symbol_text(ruby, sym).map(JsonValue::String);
    }
    if let Some(h) = RHash::from_value(v) {
        enter(depth)?;
        let mut pairs = Vec::with_capacity(h.len());
        let mut failed = None;
        h.foreach(|key: Value, value: Value| {
            let pair = key_text(ruby, key, anomalies)
                .and_then(|key| Ok((key, convert(ruby, value, depth + 1, anomalies)?)));
            match pair {
                Ok(pair) => pairs.push(pair),
                Err(message) => failed = Some(message),
            }
            Ok(if failed.is_some() { ForEach::Stop } else { ForEach::Continue })
        })
        .map_err(|e| e.to_string())?;
        return failed.map_or(Ok(JsonValue::Object(pairs)), Err);
    }
    if let Some(a) = RArray::from_value(v) {
        enter(depth)?;
        let mut items = Vec::with_capacity(a.len());
        // By index, the length read again each time: reading an item may
        // run Ruby code.
        let mut i = 0;
        while i < a.len() {
            // SAFETY: a live Array; rb_ary_entry checks the index.
            let item = unsafe { Value::from_raw(rb_sys::rb_ary_entry(a.as_raw(), i as _)) };
            items.push(convert(ruby, item, depth + 1, anomalies)?);
            i += 1;
        }
        return Ok(JsonValue::Array(items));
    }
    if v.as_raw() == ruby.qtrue().as_raw() || v.as_raw() == ruby.qfalse().as_raw() {
        return Ok(JsonValue::Bool(v.to_bool()));
    }
    if let Some(i) = Integer::from_value(v) {
        if let Ok(n) = i.to_i64() {
            return Ok(JsonValue::Number(Number::from_i64(n)));
        }
        if let Ok(n) = i.to_u64() {
            return Ok(JsonValue::Number(Number::from_u64(n)));
        }
        // Beyond 64 bits: a Float, as the raw path reads the same digits
        // (huge ones are Infinity, as `JSON.parse` reads 1e400).
        let f: f64 = v.funcall("to_f", ()).map_err(|e| e.to_string())?;
        return Ok(JsonValue::Number(Number::from_any_f64(f)));
    }
    if let Some(f) = Float::from_value(v) {
        return Ok(JsonValue::Number(Number::from_any_f64(f.to_f64())));
    }
    // SAFETY: the class name is copied into the message at once.
    let class = unsafe { v.classname() };
    anomalies.push(Anomaly::new(
        AnomalyKind::UnsupportedValue,
        format!("a value of class {class} has no JSON meaning; read as nil"),
    ));
    Ok(JsonValue::Null)
}

/// Checks the depth of a Hash or an Array before it is read.
fn enter(depth: usize) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        return Err(format!("the chunk is nested deeper than {MAX_DEPTH} levels"));
    }
    Ok(())
}

/// A Hash key: a String or a Symbol as its text; anything else as its
/// `to_s`, with an anomaly, instead of failing the whole value.
fn key_text(ruby: &Ruby, key: Value, anomalies: &mut Vec<Anomaly>) -> Result<String, String> {
    if let Some(sym) = Symbol::from_value(key) {
        return symbol_text(ruby, sym);
    }
    if let Some(s) = RString::from_value(key) {
        return text(ruby, s);
    }
    let s = key.to_r_string().map_err(|e| format!("a Hash key could not be read: {e}"))?;
    // SAFETY: copied before any Ruby code runs again.
    let text = s.to_string().unwrap_or_else(|_| String::from_utf8_lossy(unsafe { s.as_slice() }).into());
    // SAFETY: the class name is copied into the message at once.
    let class = unsafe { key.classname() };
    anomalies.push(Anomaly::new(
        AnomalyKind::ConvertedField,
        format!("a Hash key of class {class} is neither a String nor a Symbol; read as {text:?}"),
    ));
    Ok(text)
}

/// A Symbol's name, read as a String.
fn symbol_text(ruby: &Ruby, sym: Symbol) -> Result<String, String> {
    // SAFETY: rb_sym2str returns the Symbol's frozen name String.
    let name = unsafe { Value::from_raw(rb_sys::rb_sym2str(sym.as_raw())) };
    let name = RString::from_value(name).ok_or("a Symbol without a name")?;
    text(ruby, name)
}

/// A String's text, copied: UTF-8 as it is, else transcoded to UTF-8 when
/// it is tagged with an encoding other than binary; anything else is an
/// error.
fn text(ruby: &Ruby, s: RString) -> Result<String, String> {
    // SAFETY: copied before any Ruby code runs.
    if let Ok(text) = std::str::from_utf8(unsafe { s.as_slice() }) {
        return Ok(text.to_owned());
    }
    if !s.is_utf8_compatible_encoding() && s.enc_get() != ruby.ascii8bit_encindex() {
        // UTF-16 and friends: let Ruby transcode.
        if let Ok(utf8) = s.funcall::<_, _, RString>("encode", ("UTF-8",)) {
            // SAFETY: as above.
            if let Ok(text) = std::str::from_utf8(unsafe { utf8.as_slice() }) {
                return Ok(text.to_owned());
            }
        }
    }
    // SAFETY: read before any Ruby code runs again.
    let bytes = unsafe { s.as_slice() };
    let valid = std::str::from_utf8(bytes).map_err(|e| e.valid_up_to()).err().unwrap_or(0);
    Err(format!(
        "invalid UTF-8 in a String at byte {valid}: {}",
        openai_stream::anomaly::excerpt_bytes(bytes)
    ))
}

/// `DiscourseAiStream::Native.hash_readers_for_tests(value)`: the chunk the
/// walker reads (nil when it stands aside) and the chunk read from the
/// converted value (or its error), both as debug text, the messages of the
/// anomalies the conversion found, whether the walker's chunk may be
/// forgotten instead of dropped (`Seen::borrowed_only`), and the text the
/// text-delta reader took from it (nil when it is not a bare text delta);
/// the specs compare them.
pub fn hash_readers_for_tests(ruby: &Ruby, value: Value) -> Result<RArray, Error> {
    let mut seen = hash_walk::Seen::default();
    let (fast, text) = guard(ruby, || {
        if RHash::from_value(value).is_none() {
            return Ok((None, None));
        }
        let mut chunk = Chunk::default();
        // SAFETY: a Hash; the chunk and the text are copied before Ruby
        // code runs.
        let fast =
            unsafe { hash_walk::read(value.as_raw(), &mut chunk, &mut seen) }.then(|| format!("{chunk:?}"));
        let text = unsafe { hash_walk::read_text(value.as_raw()) }.map(|(text, _)| text.to_owned());
        Ok((fast, text))
    })?;
    let mut anomalies = Vec::new();
    let converted = match guard(ruby, || Ok(convert(ruby, value, 0, &mut anomalies))) {
        Ok(Ok(json)) => chunk_of(&json).map(|c| format!("{c:?}")),
        Ok(Err(message)) => Err(message),
        Err(e) => Err(e.to_string()),
    };
    let converted = converted.unwrap_or_else(|message| format!("error: {message}"));
    let messages = ruby.ary_from_iter(anomalies.into_iter().map(|a| a.message));
    Ok(ruby.ary_new_from_values(&[
        fast.into_value_with(ruby),
        converted.into_value_with(ruby),
        messages.as_value(),
        seen.borrowed_only.into_value_with(ruby),
        text.into_value_with(ruby),
    ]))
}
