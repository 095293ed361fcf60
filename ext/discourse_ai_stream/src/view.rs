//! Partial parameters, updated in place: the core's view events applied to
//! the Ruby Hash a partial ToolCall holds. Strings being streamed are appended
//! to (never rebuilt), so the cost is linear in the argument bytes.
//!
//! `stack` is a Ruby Array of the open containers; its first element is the
//! ToolCall's parameters Hash.

use magnus::rb_sys::AsRawValue;
use magnus::value::ReprValue;
use magnus::{Error, RArray, RHash, RString, Ruby, Value};
use openai_stream::json::{ContainerKind, ViewEvent, ViewEvents};

use crate::convert::json_to_ruby;

pub fn apply(ruby: &Ruby, stack: RArray, events: &ViewEvents) -> Result<(), Error> {
    for event in events.iter() {
        match event {
            ViewEvent::Open { key, kind } => {
                let value = match kind {
                    ContainerKind::Object => ruby.hash_new().as_value(),
                    ContainerKind::Array => ruby.ary_new().as_value(),
                    ContainerKind::String => ruby.str_new("").as_value(),
                };
                insert(ruby, stack.entry::<Value>(-1)?, key, value)?;
                stack.push(value)?;
            }
            ViewEvent::Append(text) => {
                let Some(s) = RString::from_value(stack.entry::<Value>(-1)?) else {
                    return Err(inconsistent(ruby, "text for a container that is not a String"));
                };
                if s.is_frozen() {
                    return Err(Error::new(
                        ruby.exception_frozen_error(),
                        "a partial tool call parameter was frozen while its value was still streaming",
                    ));
                }
                // rb_str_cat raises on a string Ruby will not let change
                // (frozen since the check above, temporarily locked by an IO
                // read into it, too long): protected, so that it comes back
                // as an Err instead of unwinding through Rust frames that hold
                // the processor's borrow.
                // SAFETY: `s` is a live String (held by `stack`, which the
                // processor marks) and `text` outlives the call.
                magnus::rb_sys::protect(|| unsafe {
                    rb_sys::rb_str_cat(s.as_raw(), text.as_ptr().cast(), text.len() as _)
                })?;
            }
            ViewEvent::Scalar { key, value } => {
                insert(ruby, stack.entry::<Value>(-1)?, key, json_to_ruby(ruby, value)?)?;
            }
            ViewEvent::Close => {
                if stack.len() <= 1 {
                    return Err(inconsistent(ruby, "a close without an open container"));
                }
                let _: Value = stack.pop()?;
            }
        }
    }
    Ok(())
}

fn insert(ruby: &Ruby, parent: Value, key: Option<&str>, value: Value) -> Result<(), Error> {
    if let Some(hash) = RHash::from_value(parent) {
        return hash.aset(ruby.to_symbol(key.unwrap_or("")), value);
    }
    if let Some(array) = RArray::from_value(parent) {
        return array.push(value);
    }
    Err(inconsistent(ruby, "a value inside something that is not a Hash or an Array"))
}

fn inconsistent(ruby: &Ruby, what: &str) -> Error {
    crate::errors::internal(ruby, &format!("partial parameters out of step with the parser: {what}"))
}
