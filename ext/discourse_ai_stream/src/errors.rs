//! Core errors as Ruby exceptions. The classes are defined in Ruby
//! (lib/discourse_ai_stream/errors.rb) and looked up when raised.

use magnus::prelude::*;
use magnus::value::ReprValue;
use magnus::{Error, ExceptionClass, KwArgs, RArray, RClass, RModule, Ruby, Value};
use openai_stream::error::Error as CoreError;

use crate::convert;

fn class(ruby: &Ruby, name: &str) -> Result<RClass, Error> {
    let module: RModule = ruby.class_object().const_get("DiscourseAiStream")?;
    module.const_get(name)
}

/// Builds `DiscourseAiStream::<name>.new(message, **kwargs)` as an error.
fn build(ruby: &Ruby, name: &str, message: String, kwargs: magnus::RHash) -> Error {
    let built = class(ruby, name).and_then(|c| c.new_instance((message.clone(), KwArgs(kwargs))));
    match built.map(magnus::Exception::from_value) {
        Ok(Some(e)) => Error::from(e),
        Ok(None) => Error::new(ruby.exception_runtime_error(), message),
        Err(e) => e,
    }
}

/// The Ruby exception for a core error. `items` are what the call produced
/// before the error; `payload` stands in for a provider error's payload when
/// only Ruby has it (the Hash given to `process_streamed_message`).
pub fn from_core(ruby: &Ruby, err: &CoreError, items: RArray, payload: Option<Value>) -> Error {
    let kwargs = ruby.hash_new();
    let _ = kwargs.aset(ruby.to_symbol("items"), items);
    match err {
        CoreError::Provider { message, payload: p } => {
            let value = match (p, payload) {
                (Some(p), _) => convert::json_to_ruby(ruby, p).unwrap_or_else(|_| ruby.qnil().as_value()),
                (None, Some(v)) => v,
                (None, None) => ruby.qnil().as_value(),
            };
            let _ = kwargs.aset(ruby.to_symbol("payload"), value);
            build(ruby, "ProviderError", message.clone(), kwargs)
        }
        CoreError::Stream { kind, message, excerpt } => {
            let _ = kwargs.aset(ruby.to_symbol("kind"), ruby.to_symbol(kind.name()));
            let _ = kwargs.aset(ruby.to_symbol("excerpt"), ruby.str_new(excerpt));
            build(ruby, "StreamError", message.clone(), kwargs)
        }
        CoreError::Arguments { id, name, raw, message } => {
            let _ = kwargs.aset(ruby.to_symbol("tool_id"), ruby.str_new(id));
            let _ = kwargs.aset(ruby.to_symbol("tool_name"), ruby.str_new(name));
            let _ = kwargs.aset(ruby.to_symbol("raw_arguments"), ruby.str_new(raw));
            let text = format!("invalid arguments for tool {name:?} (id {id:?}): {message}");
            build(ruby, "ToolArgumentsError", text, kwargs)
        }
    }
}

/// `DiscourseAiStream::InternalError`: a bug in the gem (a caught panic).
pub fn internal(ruby: &Ruby, message: &str) -> Error {
    build(ruby, "InternalError", format!("internal error in discourse_ai_stream: {message}"), ruby.hash_new())
}

/// `DiscourseAiStream::ConcurrencyError`: the processor is already busy.
pub fn busy(ruby: &Ruby) -> Error {
    build(
        ruby,
        "ConcurrencyError",
        "this processor is already in use (by another thread, or re-entered from a callback); \
         use one processor per stream"
            .to_owned(),
        ruby.hash_new(),
    )
}

/// A plain `TypeError`.
pub fn type_error(ruby: &Ruby, message: String) -> Error {
    let class: ExceptionClass = ruby.exception_type_error();
    Error::new(class, message)
}
