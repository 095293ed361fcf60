//! Core errors as Ruby exceptions. The classes are defined in Ruby
//! (lib/discourse_ai_stream/errors.rb) and looked up when raised.

use magnus::prelude::*;
use magnus::value::ReprValue;
use magnus::{Error, IntoValue, KwArgs, RArray, RClass, RHash, RModule, RString, Ruby, TryConvert, Value};
use openai_stream::calls::CallId;
use openai_stream::error::{Error as CoreError, StreamErrorKind};

/// `DiscourseAiStream::<name>`.
pub fn own<T: TryConvert>(ruby: &Ruby, name: &str) -> Result<T, Error> {
    ruby.class_object().const_get::<_, RModule>("DiscourseAiStream")?.const_get(name)
}

/// True for an exception that passes through the gem as it is: one that is
/// no StandardError (an `Interrupt`, a `Timeout` of Ruby's own, a kill), or
/// one of the gem's own errors.
pub(crate) fn passes_through(ruby: &Ruby, e: &Error) -> bool {
    if !e.is_kind_of(ruby.exception_standard_error()) {
        return true;
    }
    own::<RModule>(ruby, "Error").is_ok_and(|own| e.is_kind_of(own))
}

/// A Hash of keyword arguments (setting a pair of a new Hash cannot fail).
fn kwargs(ruby: &Ruby, pairs: &[(&str, Value)]) -> RHash {
    let hash = ruby.hash_new();
    for &(key, value) in pairs {
        let _ = hash.aset(ruby.to_symbol(key), value);
    }
    hash
}

/// Builds `DiscourseAiStream::<name>.new(message, **kwargs)` as an error.
fn build(ruby: &Ruby, name: &str, message: String, kwargs: RHash) -> Error {
    let built = own::<RClass>(ruby, name).and_then(|c| c.new_instance((message.clone(), KwArgs(kwargs))));
    match built.map(magnus::Exception::from_value) {
        Ok(Some(e)) => Error::from(e),
        Ok(None) => Error::new(ruby.exception_runtime_error(), message),
        Err(e) => e,
    }
}

/// The Ruby exception for a core error. `items` are what the call produced
/// before the error; `payload` is a provider error's payload in Ruby.
pub fn from_core(ruby: &Ruby, err: &CoreError, items: RArray, payload: Option<Value>) -> Error {
    let str = |s: &str| ruby.str_new(s).as_value();
    let items = ("items", items.as_value());
    match err {
        CoreError::Provider { message, .. } => {
            let value = payload.unwrap_or_else(|| ruby.qnil().as_value());
            build(ruby, "ProviderError", message.clone(), kwargs(ruby, &[items, ("payload", value)]))
        }
        CoreError::Stream { kind, message, excerpt } => {
            let kind = ruby.to_symbol(kind.name()).as_value();
            let kw = kwargs(ruby, &[items, ("kind", kind), ("excerpt", str(excerpt))]);
            build(ruby, "StreamError", message.clone(), kw)
        }
        CoreError::Arguments { id, name, raw, message } => {
            let kw = kwargs(
                ruby,
                &[items, ("tool_id", str(id)), ("tool_name", str(name)), ("raw_arguments", str(raw))],
            );
            let text = format!("invalid arguments for tool {name:?} (id {id:?}): {message}");
            build(ruby, "ToolArgumentsError", text, kw)
        }
    }
}

/// `DiscourseAiStream::InternalError`: a bug in the gem (a caught panic).
pub fn internal(ruby: &Ruby, message: &str) -> Error {
    build(ruby, "InternalError", format!("internal error in discourse_ai_stream: {message}"), ruby.hash_new())
}

/// `DiscourseAiStream::ConcurrencyError`: the processor is already busy
/// and this call read nothing (retryable), or (`consumed`) a callback
/// re-entered it while it built this read's items.
pub fn busy(ruby: &Ruby, consumed: bool) -> Error {
    let message = if consumed {
        "a callback re-entered this processor while it built a read's items: the read was consumed \
         (its items come out of the next read or finish)"
    } else {
        "this processor is already in use (by another thread, a callback re-entering it, or a Fiber \
         suspended inside one of its callbacks); nothing was read; use one processor per stream"
    };
    build(
        ruby,
        "ConcurrencyError",
        message.to_owned(),
        kwargs(ruby, &[("consumed", consumed.into_value_with(ruby))]),
    )
}

/// A completed call whose ToolCall could not be built. Plain Rust data: it
/// is kept in a Vec, which the GC does not see.
pub struct FailedToolCall {
    pub call: CallId,
    pub id: String,
    pub name: String,
    /// What the class raised, described.
    pub error: String,
}

/// `DiscourseAiStream::ToolCallError`: the ToolCall class raised while the
/// processor built the ToolCall of completed calls. `error` is what it
/// raised for the first; `items` everything else the read produced;
/// `tool_ids` every call it failed for.
pub fn tool_call(ruby: &Ruby, failed: &[FailedToolCall], exception: Option<Value>, items: RArray) -> Error {
    let Some(first) = failed.first() else {
        return internal(ruby, "a ToolCallError without a failed call");
    };
    let str = |s: &str| ruby.str_new(s).as_value();
    let ids = ruby.ary_from_iter(failed.iter().map(|f| str(&f.id))).as_value();
    let (items, id, name) = (items.as_value(), str(&first.id), str(&first.name));
    let kw = kwargs(ruby, &[("items", items), ("tool_id", id), ("tool_name", name), ("tool_ids", ids)]);
    if let Some(value) = exception {
        let _ = kw.aset(ruby.to_symbol("error"), value);
    }
    let mut text = format!(
        "the tool call class raised {} building tool {:?} (id {:?})",
        first.error, first.name, first.id
    );
    if failed.len() > 1 {
        text.push_str(&format!(", and failed for {} more call(s) of this read", failed.len() - 1));
    }
    build(ruby, "ToolCallError", text, kw)
}

/// A plain `TypeError`.
pub fn type_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_type_error(), message)
}

/// A TypeError: `v` is not what `expected` says.
fn not_a(ruby: &Ruby, v: Value, expected: &str) -> Error {
    // SAFETY: the class name is copied into the message at once.
    type_error(ruby, format!("{expected}, got {}", unsafe { v.classname() }))
}

/// `decode_chunk`'s argument: a String of response bytes, or a TypeError.
pub fn expect_bytes(ruby: &Ruby, raw: Value) -> Result<RString, Error> {
    RString::from_value(raw)
        .ok_or_else(|| not_a(ruby, raw, "decode_chunk expects a String of response bytes"))
}

/// A parsed chunk or event: a Hash, or a TypeError naming `what` it is.
pub fn expect_hash(ruby: &Ruby, value: Value, what: &str) -> Result<(), Error> {
    match RHash::from_value(value) {
        Some(_) => Ok(()),
        None => Err(not_a(ruby, value, &format!("expected a Hash ({what})"))),
    }
}

/// A StreamError for a chunk or event Hash the reader refused: `InvalidChunk`,
/// or `TooDeep` for nesting past a limit.
pub fn stream(ruby: &Ruby, kind: StreamErrorKind, message: String) -> Error {
    from_core(ruby, &CoreError::Stream { kind, message, excerpt: String::new() }, ruby.ary_new(), None)
}
