//! Core values as Ruby objects: parameters as Hashes with Symbol keys (what
//! `JSON.parse(..., symbolize_names: true)` builds), anomalies as Hashes.

use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::value::ReprValue;
use magnus::{Error, IntoValue, RHash, Ruby, Symbol, Value};
use openai_stream::anomaly::Anomaly;
use openai_stream::driver::OutputLimit;
use openai_stream::error::StreamErrorKind;
use openai_stream::json::{JsonValue, Number};

/// A JSON value as Ruby: objects become Hashes with Symbol keys (a repeated
/// key keeps its first position and its last value), numbers become
/// Integers (of any size) or Floats.
pub fn json_to_ruby(ruby: &Ruby, value: &JsonValue) -> Result<Value, Error> {
    Ok(match value {
        JsonValue::Null => ruby.qnil().as_value(),
        JsonValue::Bool(true) => ruby.qtrue().as_value(),
        JsonValue::Bool(false) => ruby.qfalse().as_value(),
        JsonValue::Number(n) => number(ruby, n)?,
        JsonValue::String(s) => ruby.str_new(s).as_value(),
        JsonValue::Array(items) => {
            room_or_error(ruby)?;
            let array = ruby.ary_new_capa(items.len());
            for item in items {
                array.push(json_to_ruby(ruby, item)?)?;
            }
            array.as_value()
        }
        JsonValue::Object(pairs) => object_to_hash(ruby, pairs)?.as_value(),
    })
}

/// An object's pairs as a Hash with Symbol keys.
pub fn object_to_hash(ruby: &Ruby, pairs: &[(String, JsonValue)]) -> Result<RHash, Error> {
    room_or_error(ruby)?;
    let hash = ruby.hash_new();
    for (k, v) in pairs {
        hash.aset(ruby.to_symbol(k), json_to_ruby(ruby, v)?)?;
    }
    Ok(hash)
}

/// Room on the machine stack for one more level of a value's nesting, else
/// the message of the `TooDeep` StreamError. The Hash reader asks every few
/// levels, the parameters' builder at every level (docs/reliability.md).
pub(crate) fn room() -> Result<(), &'static str> {
    // SAFETY: a query of the current thread's stack.
    match unsafe { rb_sys::ruby_stack_check() } {
        0 => Ok(()),
        _ => Err("a value nested too deep for this thread's machine stack"),
    }
}

/// [`room`], or the StreamError.
fn room_or_error(ruby: &Ruby) -> Result<(), Error> {
    room().map_err(|m| crate::errors::stream(ruby, StreamErrorKind::TooDeep, m.to_owned()))
}

/// What both `__setup`s check: `max_line_bytes` is positive, and the
/// `output_limit:` keyword names a limit.
pub fn output_limit(ruby: &Ruby, max_line_bytes: usize, name: Symbol) -> Result<OutputLimit, Error> {
    if max_line_bytes == 0 {
        return Err(Error::new(ruby.exception_arg_error(), "max_line_bytes must be positive"));
    }
    Ok(match &*name.name()? {
        "drop" => OutputLimit::Drop,
        "drop_cut" => OutputLimit::DropCut,
        "keep" => OutputLimit::Keep,
        other => {
            let message = format!("output_limit must be :drop, :drop_cut or :keep, not :{other}");
            return Err(Error::new(ruby.exception_arg_error(), message));
        }
    })
}

fn number(ruby: &Ruby, n: &Number) -> Result<Value, Error> {
    match n.as_i64() {
        Some(i) => Ok(ruby.integer_from_i64(i).as_value()),
        // Bigger than 64 bits: Ruby's own Integer parser keeps every digit
        // (called directly: a method call is where a Thread#raise lands).
        // SAFETY: a live String of digits; without `badcheck` it does not raise.
        None if n.is_integer() => {
            Ok(unsafe { Value::from_raw(rb_sys::rb_str_to_inum(ruby.str_new(n.as_str()).as_raw(), 10, 0)) })
        }
        None => Ok(ruby.float_from_f64(n.as_f64()).as_value()),
    }
}

/// An anomaly as a frozen Hash: `{kind: :generated_id, message: "...", id:, name:, index:, field:, excerpt:, count:}`
/// (absent details are left out; `count` only when the same anomaly repeated).
pub fn anomaly_to_ruby(ruby: &Ruby, a: &Anomaly) -> Result<Value, Error> {
    let h = ruby.hash_new();
    let set = |key: &str, value: Option<Value>| match value {
        Some(value) => h.aset(ruby.to_symbol(key), value),
        None => Ok(()),
    };
    let str = |s: &str| Some(ruby.str_new(s).as_value());
    set("kind", Some(ruby.to_symbol(a.kind.name()).as_value()))?;
    set("message", str(&a.message))?;
    set("id", a.call_id.as_deref().and_then(str))?;
    set("name", a.call_name.as_deref().and_then(str))?;
    set("index", a.index.map(|i| i.into_value_with(ruby)))?;
    set("field", a.field.and_then(str))?;
    set("excerpt", a.excerpt.as_deref().and_then(str))?;
    set("count", (a.count > 1).then(|| a.count.into_value_with(ruby)))?;
    h.freeze();
    Ok(h.as_value())
}
