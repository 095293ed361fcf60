//! `DiscourseAiStream::OpenAiMessageProcessor`: the core's processor held in
//! a Ruby object. Ruby-facing conveniences (keyword arguments, hooks,
//! `inspect`) live in lib/discourse_ai_stream/open_ai_message_processor.rb.

use std::cell::Cell;
use std::ptr::NonNull;

use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::typed_data::Obj;
use magnus::value::ReprValue;
use magnus::{Error, RArray, RHash, Ruby, Symbol, TryConvert, TypedData, Value};
use openai_stream::anomaly::Anomalies;
use openai_stream::calls::Calls;
use openai_stream::chat::Chunk;
use openai_stream::chat::{ChatProcessor as Processor, Options};
use openai_stream::json::JsonValue;
use openai_stream::output::{Item, Output};
use openai_stream::usage::UsageMode;

use crate::errors;
use crate::guard::guard;
use crate::hash_walk::{self, ContentString, Seen};
use crate::holder::{self, read, Holder, CALLS};
use crate::items::{Built, CallSource, Shape};
use crate::ruby_json;

#[derive(TypedData, Default)]
#[magnus(class = "DiscourseAiStream::OpenAiMessageProcessor", free_immediately, mark, size)]
pub struct RbProcessor {
    holder: Holder<Processor>,
    /// The last chunk given to `process_streamed_message` was not a bare
    /// text delta: the next one goes straight to the chunk reader. Streams
    /// come in runs (text deltas, then tool call fragments), and a run of
    /// fragments would otherwise pay for a text reader that gives up at
    /// each one's `tool_calls`.
    past_text: Cell<bool>,
}

crate::holder::holds!(RbProcessor, Processor);

/// The receiver of a method: a processor object, checked without the
/// `rb_protect` around `rb_check_typeddata` that magnus's `Obj` and `&T`
/// conversions pay on every call. Every instance of the class (and of its
/// subclasses) is allocated by the alloc function of `RbProcessor`, so its
/// data type is exactly ours; anything else (a method bound to a foreign
/// object with `bind_call`) goes to magnus's conversion, which raises its
/// TypeError.
#[derive(Clone, Copy)]
pub struct Me {
    value: Value,
    this: NonNull<RbProcessor>,
}

impl Me {
    /// The processor. The receiver of the method being run stays alive on
    /// Ruby's stack for the whole call, and `free_immediately` frees the
    /// data only with the object.
    fn get(&self) -> &RbProcessor {
        // SAFETY: see above; the pointer came from the object's data.
        unsafe { self.this.as_ref() }
    }
}

impl TryConvert for Me {
    // Inlined into each method's wrapper, with the conversion of anything
    // else kept out of line: called, this check cost 46 instructions per
    // call, most of them saving and restoring registers for that conversion.
    #[inline(always)]
    fn try_convert(value: Value) -> Result<Self, Error> {
        let raw = value.as_raw();
        // `DataType` is `repr(transparent)` over Ruby's `rb_data_type_t`.
        let ours = RbProcessor::data_type() as *const magnus::DataType as *const rb_sys::rb_data_type_t;
        // SAFETY: the header of a live object is read only after checking
        // it is a heap object, then the typed data fields after checking it
        // is typed data.
        unsafe {
            if !rb_sys::SPECIAL_CONST_P(raw)
                && rb_sys::RB_BUILTIN_TYPE(raw) == rb_sys::ruby_value_type::RUBY_T_DATA
                && rb_sys::RTYPEDDATA_P(raw)
                && std::ptr::eq(rb_sys::RTYPEDDATA_TYPE(raw), ours)
            {
                if let Some(this) = NonNull::new(rb_sys::RTYPEDDATA_GET_DATA(raw).cast::<RbProcessor>()) {
                    return Ok(Me { value, this });
                }
            }
        }
        Me::other(value)
    }
}

impl Me {
    /// Anything but a processor made by our alloc function: magnus decides.
    #[cold]
    #[inline(never)]
    fn other(value: Value) -> Result<Me, Error> {
        let obj = Obj::<RbProcessor>::try_convert(value)?;
        Ok(Me { value, this: NonNull::from(&*obj) })
    }
}

impl CallSource for Processor {
    fn call_list(&self) -> &Calls {
        self.calls()
    }

    fn out(&self) -> &Output {
        self.output()
    }

    fn anomaly_list(&mut self) -> &mut Anomalies {
        self.anomalies_mut()
    }
}

impl RbProcessor {
    /// `__setup(partial_tool_calls, usage_mode, max_line_bytes, tool_call_class, simulate_legacy, strict,
    /// output_limit)`.
    // One argument per keyword of `OpenAiMessageProcessor.new`, as magnus passes them.
    #[allow(clippy::too_many_arguments)]
    pub fn setup(
        ruby: &Ruby,
        rb_self: Me,
        partial: bool,
        usage: Symbol,
        max_line_bytes: usize,
        tool_call_class: Value,
        simulate_legacy: bool,
        strict: bool,
        output_limit: Symbol,
    ) -> Result<(), Error> {
        guard(ruby, || {
            let usage_mode = match &*usage.name()? {
                "net_of_cache" => UsageMode::Current,
                "as_sent" => UsageMode::Legacy,
                other => {
                    return Err(Error::new(
                        ruby.exception_arg_error(),
                        format!("usage must be :as_sent or :net_of_cache, not {other:?}"),
                    ))
                }
            };
            let output_limit = crate::convert::output_limit(ruby, max_line_bytes, output_limit)?;
            let options = Options {
                partial_tool_calls: partial,
                usage_mode,
                max_line_bytes: openai_stream::sse::MaxLineBytes(max_line_bytes),
                simulate_legacy,
                strict,
                output_limit,
            };
            rb_self.get().holder.install(ruby, Processor::new(options), tool_call_class, 1)
        })
    }

    pub fn process_streamed_message(ruby: &Ruby, rb_self: Me, chunk: Value) -> Result<Value, Error> {
        let this = rb_self.get();
        if !this.past_text.get() && RHash::from_value(chunk).is_some() {
            // SAFETY: a Hash, alive on the caller's stack; the text is only
            // read by the core, before any Ruby code runs.
            if let Some((text, reuse)) = guard(ruby, || Ok(unsafe { hash_walk::read_text(chunk.as_raw()) }))?
            {
                return Self::run(ruby, rb_self, Shape::Streamed, Some(chunk), reuse, |core| {
                    core.process_text(text).map(|_| ())
                });
            }
        }
        Self::with_chunk(ruby, rb_self, chunk, Shape::Streamed, |core, c| {
            this.past_text.set(!c.is_bare_text());
            core.process_chunk(c).map(|_| ())
        })
    }

    pub fn process_message(ruby: &Ruby, rb_self: Me, message: Value) -> Result<Value, Error> {
        Self::with_chunk(ruby, rb_self, message, Shape::Array, |core, c| core.process_message(c).map(|_| ()))
    }

    pub fn decode_chunk(ruby: &Ruby, rb_self: Me, raw: Value) -> Result<Value, Error> {
        let raw = errors::expect_bytes(ruby, raw)?;
        Self::run(ruby, rb_self, Shape::Array, None, None, |core| {
            // SAFETY: no Ruby code runs while the core reads the bytes.
            let bytes = unsafe { raw.as_slice() };
            core.decode(bytes).map(|_| ())
        })
    }

    pub fn finish(ruby: &Ruby, rb_self: Me) -> Result<Value, Error> {
        Self::run(ruby, rb_self, Shape::Finish(&[CALLS]), None, None, |core| core.finish().map(|_| ()))
    }

    fn with_chunk(
        ruby: &Ruby,
        rb_self: Me,
        value: Value,
        shape: Shape,
        f: impl FnOnce(&mut Processor, &Chunk) -> Result<(), openai_stream::error::Error>,
    ) -> Result<Value, Error> {
        errors::expect_hash(ruby, value, "a parsed chunk")?;
        // What the walker stands aside on is converted, then read by the
        // core's chunk reader; the chunk may borrow the converted value.
        let converted: JsonValue;
        let mut unsupported = Vec::new();
        let mut chunk = Chunk::default();
        let mut seen = Seen::default();
        // SAFETY: a Hash, alive on the caller's stack; the chunk borrows its
        // Strings only until `f` has read it, before any Ruby code runs.
        if !guard(ruby, || Ok(unsafe { hash_walk::read(value.as_raw(), &mut chunk, &mut seen) }))? {
            seen = Seen::default();
            (converted, unsupported) = ruby_json::read(ruby, value)?;
            chunk =
                guard(ruby, || ruby_json::chunk_of(&converted).map_err(|e| errors::invalid_chunk(ruby, e)))?;
        }
        let reuse = seen.content;
        // The chunk may borrow the Hash's Strings: only `f` reads it, before
        // any Ruby code runs (dropping it reads no text). Borrowed, not
        // moved into the closure: a move copies a few hundred bytes.
        let read = &chunk;
        let result = Self::run(ruby, rb_self, shape, Some(value), reuse, move |core| {
            for anomaly in unsupported {
                core.push_anomaly(anomaly);
            }
            f(core, read)
        });
        if seen.borrowed_only {
            // It owns nothing: forgetting it leaks nothing (see `Seen`).
            std::mem::forget(chunk);
        }
        result
    }

    /// Runs `f` on the core and makes its result (see [`holder::run`]).
    /// `reuse`: a String of the chunk Hash that is returned itself when the
    /// output is one text with exactly its bytes.
    fn run(
        ruby: &Ruby,
        rb_self: Me,
        shape: Shape,
        payload: Option<Value>,
        reuse: Option<ContentString>,
        f: impl FnOnce(&mut Processor) -> Result<(), openai_stream::error::Error>,
    ) -> Result<Value, Error> {
        let this = rb_self.get();
        let text = |text: &str| match reuse {
            // SAFETY: a String of the Hash, which the caller holds; no Ruby
            // code ran since the walk.
            Some(s) if unsafe { s.holds(text) } => unsafe { Value::from_raw(s.string) },
            _ => ruby.str_new(text).as_value(),
        };
        holder::run(ruby, &this.holder, rb_self.value, shape, payload, f, text, |core, built| {
            this.build_items(ruby, core, built)
        })
    }

    /// The Ruby items of the core's output. A ToolCall class that raises (a
    /// frozen parameters Hash, a `new` or `partial=` that refuses) costs the
    /// call concerned its partial updates, with an anomaly; every other item
    /// of the read is still built.
    fn build_items(&self, ruby: &Ruby, core: &Processor, built: &mut Built) -> Result<(), Error> {
        let out = core.output();
        if out.is_empty() {
            return Ok(());
        }
        let items = built.items;
        let tools = self.holder.tools(ruby)?;
        for item in out.items() {
            let value = match item {
                Item::Text(text) => Some(ruby.str_new(text).as_value()),
                Item::Progress(call) => built.progress_item(ruby, core, tools, call)?,
                Item::Completed(call, params) => built.completed_item(ruby, core, tools, call, params)?,
                // Only the Responses processor returns thinking.
                Item::Thinking { .. } => None,
            };
            if let Some(value) = value {
                // SAFETY: `items` is an unfrozen Array of ours, so the push
                // cannot raise (magnus's `push` would wrap it in rb_protect, a
                // cost on every text event).
                unsafe { rb_sys::rb_ary_push(items.as_raw(), value.as_raw()) };
            }
        }
        Ok(())
    }

    pub fn usage_mode(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Symbol, Error> {
        let mode = read(ruby, rb_self, |c| c.options().usage_mode)?;
        Ok(ruby.to_symbol(match mode {
            UsageMode::Current => "net_of_cache",
            UsageMode::Legacy => "as_sent",
        }))
    }

    /// With `simulate_legacy: true`: the ids of the calls the legacy
    /// processor would have run in the last finished stream (nil before).
    pub fn legacy_tool_call_ids(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<RArray>, Error> {
        rb_self.holder.enter(ruby, |core| {
            let ids = core.legacy_outcome().map(|o| o.emitted.iter().map(|id| ruby.str_new(id)));
            Ok(ids.map(|ids| ruby.ary_from_iter(ids)))
        })
    }

    /// `__panic_for_tests`: a panic inside a processor call, to prove the
    /// guard and the poisoning.
    pub fn panic_for_tests(ruby: &Ruby, rb_self: Me) -> Result<Value, Error> {
        Self::run(ruby, rb_self, Shape::Array, None, None, |_| panic!("deliberate panic for tests"))
    }
}
