//! `DiscourseAiStream::OpenAiMessageProcessor`: the core's processor held in
//! a Ruby object. Ruby-facing conveniences (keyword arguments, hooks,
//! `inspect`) live in lib/discourse_ai_stream/open_ai_message_processor.rb.

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

use magnus::gc::Marker;
use magnus::prelude::*;
use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::typed_data::Obj;
use magnus::value::{Lazy, Opaque, ReprValue};
use magnus::{
    DataTypeFunctions, Error, KwArgs, RArray, RHash, RString, Ruby, Symbol, TryConvert, TypedData, Value,
};
use openai_stream::anomaly::{Anomaly, AnomalyKind};
use openai_stream::calls::{CallId, Calls};
use openai_stream::chunk::Chunk;
use openai_stream::json::JsonValue;
use openai_stream::output::Item;
use openai_stream::processor::{Options, Processor};
use openai_stream::usage::UsageMode;

use crate::convert::{anomaly_to_ruby, object_to_hash};
use crate::errors;
use crate::guard::guard;
use crate::hash_walk::{self, ContentString, Seen};
use crate::ruby_de::{read_chunk, Unsupported};
use crate::view;

/// The frozen empty Array every call that produced no items returns: most
/// reads of a stream of argument fragments produce nothing, and a fresh
/// Array for each was most of what the raw path allocated.
pub(crate) static NO_ITEMS: Lazy<RArray> = Lazy::new(|ruby| {
    let items = ruby.ary_new_capa(0);
    items.freeze();
    items
});

/// Slots of the `objects` Array.
const TOOL_CALL_CLASS: isize = 0;
const CALLS: isize = 1;

#[derive(TypedData, Default)]
#[magnus(class = "DiscourseAiStream::OpenAiMessageProcessor", free_immediately, mark)]
pub struct RbProcessor {
    core: RefCell<Option<Processor>>,
    /// `[tool_call_class, calls]`; `calls[i]` is `[tool_call, stack]` for
    /// the call `CallId(i)` of the current stream. Marked for the GC; the
    /// Array itself never changes after `__setup`, so marking needs no
    /// borrow of `core` (which may be borrowed while Ruby runs a GC).
    objects: Cell<Option<Opaque<RArray>>>,
    /// A panic happened inside: the state cannot be trusted any more.
    poisoned: Cell<bool>,
    /// The last chunk given to `process_streamed_message` was not a bare
    /// text delta: the next one goes straight to the chunk reader. Streams
    /// come in runs (text deltas, then tool call fragments), and a run of
    /// fragments would otherwise pay for a text reader that gives up at
    /// each one's `tool_calls`.
    past_text: Cell<bool>,
}

impl DataTypeFunctions for RbProcessor {
    fn mark(&self, marker: &Marker) {
        if let Some(objects) = self.objects.get() {
            marker.mark(objects);
        }
    }
}

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
    #[inline]
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
        let obj = Obj::<RbProcessor>::try_convert(value)?;
        Ok(Me { value, this: NonNull::from(&*obj) })
    }
}

/// What a call into the core returns to Ruby.
enum Shape {
    /// `process_streamed_message`: nil, one item, or an Array.
    Streamed,
    /// Everything else: an Array.
    Array,
    /// `finish`: an Array, and the stream's calls are forgotten (the next
    /// stream numbers its calls from 0 again).
    Finish,
}

impl RbProcessor {
    /// `__setup(partial_tool_calls, usage_mode, max_line_bytes, tool_call_class, simulate_legacy, strict)`.
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
    ) -> Result<(), Error> {
        guard(ruby, || {
            let usage_mode = match &*usage.name()? {
                "current" => UsageMode::Current,
                "legacy" => UsageMode::Legacy,
                other => {
                    return Err(Error::new(
                        ruby.exception_arg_error(),
                        format!("usage must be :current or :legacy, not {other:?}"),
                    ))
                }
            };
            if max_line_bytes == 0 {
                return Err(Error::new(ruby.exception_arg_error(), "max_line_bytes must be positive"));
            }
            let options =
                Options { partial_tool_calls: partial, usage_mode, max_line_bytes, simulate_legacy, strict };
            let this = rb_self.get();
            let mut core = this.core.try_borrow_mut().map_err(|_| errors::busy(ruby))?;
            let objects = ruby.ary_new_from_values(&[tool_call_class, ruby.ary_new().as_value()]);
            this.objects.set(Some(objects.into()));
            *core = Some(Processor::new(options));
            Ok(())
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
        let Some(raw) = RString::from_value(raw) else {
            return Err(errors::type_error(
                ruby,
                format!("decode_chunk expects a String of response bytes, got {}", unsafe {
                    raw.classname()
                }),
            ));
        };
        Self::run(ruby, rb_self, Shape::Array, None, None, |core| {
            // SAFETY: no Ruby code runs while the core reads the bytes.
            let bytes = unsafe { raw.as_slice() };
            core.decode(bytes).map(|_| ())
        })
    }

    pub fn finish(ruby: &Ruby, rb_self: Me) -> Result<Value, Error> {
        Self::run(ruby, rb_self, Shape::Finish, None, None, |core| core.finish().map(|_| ()))
    }

    fn with_chunk(
        ruby: &Ruby,
        rb_self: Me,
        value: Value,
        shape: Shape,
        f: impl FnOnce(&mut Processor, &Chunk) -> Result<(), openai_stream::error::Error>,
    ) -> Result<Value, Error> {
        if RHash::from_value(value).is_none() {
            return Err(errors::type_error(
                ruby,
                format!("expected a Hash (a parsed chunk), got {}", unsafe { value.classname() }),
            ));
        }
        let unsupported = Unsupported::default();
        let mut chunk = Chunk::default();
        let mut seen = Seen::default();
        guard(ruby, || {
            read_chunk(ruby, &value, &unsupported, &mut chunk, &mut seen)
                .map_err(|e| stream_error(ruby, &e.to_string()))
        })?;
        let reuse = seen.content;
        // The chunk may borrow the Hash's Strings: only `f` reads it, before
        // any Ruby code runs (dropping it reads no text). Borrowed, not
        // moved into the closure: a move copies a few hundred bytes.
        let read = &chunk;
        let result = Self::run(ruby, rb_self, shape, Some(value), reuse, move |core| {
            for anomaly in unsupported.into_inner() {
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

    /// The one way into the core, for every entry point: refuses a poisoned
    /// processor, catches panics (and poisons the processor on an internal
    /// error), and refuses a call while another one is running on this
    /// processor (another thread, or a callback re-entering it) with
    /// `ConcurrencyError`.
    fn enter<T>(
        ruby: &Ruby,
        this: &RbProcessor,
        f: impl FnOnce(&mut Processor) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if this.poisoned.get() {
            return Err(errors::internal(ruby, "this processor stopped after an earlier internal error"));
        }
        let result = guard(ruby, || {
            let mut borrow = this.core.try_borrow_mut().map_err(|_| errors::busy(ruby))?;
            let core =
                borrow.as_mut().ok_or_else(|| errors::internal(ruby, "processor used before initialize"))?;
            f(core)
        });
        if let Err(e) = &result {
            if is_internal(ruby, e) {
                this.poisoned.set(true);
            }
        }
        result
    }

    /// Runs `f` on the core, builds the Ruby items of its output, raises its
    /// error with those items attached, then hands new anomalies to Ruby.
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
        let this: &RbProcessor = rb_self.get();
        let (result, anomalies) = Self::enter(ruby, this, |core| {
            let outcome = f(core);
            // The commonest result of the Hash path, one text, is returned
            // without building an Array around it.
            if let (Shape::Streamed, Ok(()), Some(text)) = (&shape, &outcome, single_text(core)) {
                let text = match reuse {
                    // SAFETY: a String of the Hash, which the caller holds;
                    // no Ruby code ran since the walk.
                    Some(s) if unsafe { s.holds(text) } => unsafe { Value::from_raw(s.string) },
                    _ => ruby.str_new(text).as_value(),
                };
                return Ok((Ok(text), new_anomalies(ruby, core)?));
            }
            let built = this.build_items(ruby, core);
            if matches!(shape, Shape::Finish) {
                // The core ended the stream (whatever its outcome): the next
                // one numbers its calls from 0 again.
                if let Some(calls) = this.calls_array(ruby) {
                    calls.clear()?;
                }
            }
            let Built { items, notes, tool_call_errors, first_exception, passthrough } = built?;
            for note in notes {
                core.push_anomaly(note);
            }
            if outcome.is_err() || passthrough.is_some() {
                // Another error is raised in place of the ToolCallError:
                // the calls it would have named are recorded here instead.
                for failed in &tool_call_errors {
                    let note = call_anomaly(
                        core,
                        failed.call,
                        AnomalyKind::ToolCallFailed,
                        format!("the tool call class raised {}; the call is not returned", failed.error),
                    );
                    core.push_anomaly(note);
                }
            }
            let anomalies = new_anomalies(ruby, core)?;
            if let Some(e) = passthrough {
                return Ok((Err(e), anomalies));
            }
            let result = match outcome {
                Err(e) => Err(errors::from_core(ruby, &e, items, payload)),
                Ok(()) if !tool_call_errors.is_empty() => {
                    Err(errors::tool_call(ruby, &tool_call_errors, first_exception, items))
                }
                Ok(()) => Ok(shape_items(ruby, items, &shape)),
            };
            Ok((result, anomalies))
        })?;
        if let Some(anomalies) = anomalies {
            let _: Value = rb_self.value.funcall("__deliver_anomalies", (anomalies,))?;
        }
        result
    }

    fn calls_array(&self, ruby: &Ruby) -> Option<RArray> {
        let objects = ruby.get_inner(self.objects.get()?);
        objects.entry::<RArray>(CALLS).ok()
    }

    /// The Ruby items of the core's output. A ToolCall class that raises (a
    /// frozen parameters Hash, a `new` or `partial=` that refuses) costs the
    /// call concerned its partial updates, with an anomaly; every other item
    /// of the read is still built.
    fn build_items(&self, ruby: &Ruby, core: &Processor) -> Result<Built, Error> {
        let out = core.output();
        let mut built = Built {
            items: ruby.get_inner(&NO_ITEMS),
            notes: Vec::new(),
            tool_call_errors: Vec::new(),
            first_exception: None,
            passthrough: None,
        };
        if out.is_empty() {
            return Ok(built);
        }
        let items = ruby.ary_new_capa(out.len());
        // The ToolCall class and the calls' objects, looked up at the first
        // call item (most outputs are text only).
        let mut found: Option<(Value, RArray)> = None;
        let mut tools = || -> Result<(Value, RArray), Error> {
            match found {
                Some(tools) => Ok(tools),
                None => Ok(*found.insert(self.tools(ruby)?)),
            }
        };
        for item in out.items() {
            let value = match item {
                Item::Text(text) => Some(ruby.str_new(text).as_value()),
                Item::Progress(call) => {
                    let (class, calls) = tools()?;
                    match progress(ruby, core, class, calls, call) {
                        Ok(value) => value,
                        Err(e) => {
                            detach(ruby, calls, call)?;
                            if passes_through(ruby, &e) {
                                built.passthrough = Some(e);
                                break;
                            }
                            built.notes.push(call_anomaly(
                                core,
                                call,
                                AnomalyKind::PartialArgumentsBroken,
                                format!(
                                    "partial updates stopped for this call: the ToolCall raised {}; \
                                 it is completed at the end as usual",
                                    describe(&e)
                                ),
                            ));
                            None
                        }
                    }
                }
                Item::Completed(call, params) => {
                    let (class, calls) = tools()?;
                    match completed(ruby, core, class, calls, call, params) {
                        Ok(value) => Some(value),
                        Err(e) => {
                            // Whatever happened, nothing streams into this call any more.
                            let _ = calls.store(call.0 as isize, ruby.qnil());
                            if passes_through(ruby, &e) {
                                built.passthrough = Some(e);
                                break;
                            }
                            let info = core.calls().get(call);
                            if built.first_exception.is_none() {
                                built.first_exception = e.value();
                            }
                            built.tool_call_errors.push(FailedToolCall {
                                call,
                                id: info.map(|c| c.id.clone()).unwrap_or_default(),
                                name: info.map(|c| c.name.clone()).unwrap_or_default(),
                                error: describe(&e),
                            });
                            None
                        }
                    }
                }
                // Only the Responses processor returns thinking.
                Item::Thinking { .. } => None,
            };
            if let Some(value) = value {
                // SAFETY: `items` is a new, unfrozen Array of ours, so the push
                // cannot raise (magnus's `push` would wrap it in rb_protect, a
                // cost on every text event).
                unsafe { rb_sys::rb_ary_push(items.as_raw(), value.as_raw()) };
            }
        }
        built.items = items;
        Ok(built)
    }

    /// The ToolCall class and the Array of the calls' objects.
    fn tools(&self, ruby: &Ruby) -> Result<(Value, RArray), Error> {
        let objects = ruby.get_inner(self.objects.get().ok_or_else(|| errors::internal(ruby, "no setup"))?);
        Ok((objects.entry(TOOL_CALL_CLASS)?, objects.entry(CALLS)?))
    }

    fn read<T>(ruby: &Ruby, rb_self: &RbProcessor, f: impl FnOnce(&Processor) -> T) -> Result<T, Error> {
        Self::enter(ruby, rb_self, |core| Ok(f(core)))
    }

    /// Reads the anomalies, even after an internal error stopped the
    /// processor: what it recorded up to then (a list the error cannot
    /// have left half-written) is what explains the error.
    fn read_anomalies<T>(
        ruby: &Ruby,
        rb_self: &RbProcessor,
        f: impl FnOnce(&openai_stream::anomaly::Anomalies) -> Result<T, Error>,
    ) -> Result<T, Error> {
        guard(ruby, || {
            let borrow = rb_self.core.try_borrow().map_err(|_| errors::busy(ruby))?;
            let core =
                borrow.as_ref().ok_or_else(|| errors::internal(ruby, "processor used before initialize"))?;
            f(core.anomalies())
        })
    }

    pub fn prompt_tokens(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<u64>, Error> {
        Self::read(ruby, rb_self, |c| c.usage().prompt_tokens)
    }

    pub fn completion_tokens(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<u64>, Error> {
        Self::read(ruby, rb_self, |c| c.usage().completion_tokens)
    }

    pub fn cache_read_tokens(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<u64>, Error> {
        Self::read(ruby, rb_self, |c| c.usage().cache_read_tokens)
    }

    /// The legacy reader: cache reads, nil unless the server sent a count.
    pub fn cached_tokens(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<u64>, Error> {
        Self::read(ruby, rb_self, |c| c.usage().cached_tokens)
    }

    pub fn cache_write_tokens(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<u64>, Error> {
        Self::read(ruby, rb_self, |c| c.usage().cache_write_tokens)
    }

    pub fn partial_tool_calls(ruby: &Ruby, rb_self: &RbProcessor) -> Result<bool, Error> {
        Self::read(ruby, rb_self, |c| c.options().partial_tool_calls)
    }

    pub fn max_line_bytes(ruby: &Ruby, rb_self: &RbProcessor) -> Result<usize, Error> {
        Self::read(ruby, rb_self, |c| c.options().max_line_bytes)
    }

    pub fn usage_mode(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Symbol, Error> {
        let mode = Self::read(ruby, rb_self, |c| c.options().usage_mode)?;
        Ok(ruby.to_symbol(match mode {
            UsageMode::Current => "current",
            UsageMode::Legacy => "legacy",
        }))
    }

    /// Every anomaly recorded so far, as frozen Hashes (readable after an
    /// internal error too).
    pub fn anomalies(ruby: &Ruby, rb_self: &RbProcessor) -> Result<RArray, Error> {
        Self::read_anomalies(ruby, rb_self, |anomalies| {
            let list = ruby.ary_new_capa(anomalies.len());
            for a in anomalies.all() {
                list.push(anomaly_to_ruby(ruby, a)?)?;
            }
            Ok(list)
        })
    }

    /// With `simulate_legacy: true`: the ids of the calls the legacy
    /// processor would have run in the last finished stream (nil before).
    pub fn legacy_tool_call_ids(ruby: &Ruby, rb_self: &RbProcessor) -> Result<Option<RArray>, Error> {
        Self::enter(ruby, rb_self, |core| {
            let Some(outcome) = core.legacy_outcome() else { return Ok(None) };
            let list = ruby.ary_new_capa(outcome.emitted.len());
            for id in &outcome.emitted {
                list.push(ruby.str_new(id))?;
            }
            Ok(Some(list))
        })
    }

    /// Anomalies past the per-processor limit, counted but not kept.
    pub fn dropped_anomalies(ruby: &Ruby, rb_self: &RbProcessor) -> Result<u64, Error> {
        Self::read_anomalies(ruby, rb_self, |anomalies| Ok(anomalies.dropped()))
    }

    /// `__panic_for_tests`: a panic inside a processor call, to prove the
    /// guard and the poisoning.
    pub fn panic_for_tests(ruby: &Ruby, rb_self: Me) -> Result<Value, Error> {
        Self::run(ruby, rb_self, Shape::Array, None, None, |_| panic!("deliberate panic for tests"))
    }
}

/// New anomalies as an Array of Hashes, or None.
#[inline]
fn new_anomalies(ruby: &Ruby, core: &mut Processor) -> Result<Option<RArray>, Error> {
    if !core.anomalies_mut().has_new() {
        return Ok(None);
    }
    anomalies_to_ruby(ruby, core).map(Some)
}

#[inline(never)]
fn anomalies_to_ruby(ruby: &Ruby, core: &mut Processor) -> Result<RArray, Error> {
    let fresh = core.anomalies_mut().take_new();
    let list = ruby.ary_new_capa(fresh.len());
    for a in fresh {
        list.push(anomaly_to_ruby(ruby, a)?)?;
    }
    Ok(list)
}

/// The output's only item, when it is one text.
#[inline]
fn single_text(core: &Processor) -> Option<&str> {
    let out = core.output();
    if out.len() != 1 {
        return None;
    }
    match out.items().next()? {
        Item::Text(text) => Some(text),
        _ => None,
    }
}

fn shape_items(ruby: &Ruby, items: RArray, shape: &Shape) -> Value {
    match shape {
        Shape::Array | Shape::Finish => items.as_value(),
        Shape::Streamed => match items.len() {
            0 => ruby.qnil().as_value(),
            1 => items.entry(0).unwrap_or_else(|_| ruby.qnil().as_value()),
            _ => items.as_value(),
        },
    }
}

fn stream_error(ruby: &Ruby, message: &str) -> Error {
    let err = openai_stream::error::Error::Stream {
        kind: openai_stream::error::StreamErrorKind::InvalidChunk,
        message: message.to_owned(),
        excerpt: String::new(),
    };
    errors::from_core(ruby, &err, ruby.ary_new(), None)
}

fn is_internal(ruby: &Ruby, e: &Error) -> bool {
    let Some(value) = e.value() else { return false };
    let class = ruby
        .class_object()
        .const_get::<_, magnus::RModule>("DiscourseAiStream")
        .and_then(|m| m.const_get::<_, magnus::RClass>("InternalError"));
    match class {
        Ok(c) => value.is_kind_of(c),
        Err(_) => false,
    }
}

/// What [`RbProcessor::build_items`] made of the core's output.
struct Built {
    items: RArray,
    /// Anomalies found while building (recorded in the core afterwards).
    notes: Vec<Anomaly>,
    /// The completed calls the ToolCall class failed to build.
    tool_call_errors: Vec<FailedToolCall>,
    /// The exception of the first of them. A Vec's buffer is not seen by
    /// the GC; this field, like `Built` itself, lives on the stack, which
    /// the GC scans, so the exception stays alive until it is raised.
    first_exception: Option<Value>,
    /// What Ruby code the processor called raised that is not the ToolCall
    /// class failing: an exception that is not a StandardError or a
    /// non-local exit (Interrupt, Thread#kill, throw), or an error of this
    /// gem (a callback re-entering the processor). Re-raised as it is, once
    /// the borrow of the core is released.
    passthrough: Option<Error>,
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

/// True for what a callback raised that is not the ToolCall class failing
/// (see [`Built::passthrough`]).
pub(crate) fn passes_through(ruby: &Ruby, e: &Error) -> bool {
    if !e.is_kind_of(ruby.exception_standard_error()) {
        return true;
    }
    let own = ruby
        .class_object()
        .const_get::<_, magnus::RModule>("DiscourseAiStream")
        .and_then(|m| m.const_get::<_, magnus::RModule>("Error"));
    own.is_ok_and(|own| e.is_kind_of(own))
}

/// `ClassName (message)` of a Ruby error, for anomalies and messages.
pub fn describe(e: &Error) -> String {
    match e.error_type() {
        magnus::error::ErrorType::Exception(x) => {
            // SAFETY: the class name is copied at once.
            let class = unsafe { x.classname() }.into_owned();
            format!("{class} ({x})")
        }
        _ => e.to_string(),
    }
}

fn call_anomaly(core: &Processor, call: CallId, kind: AnomalyKind, message: String) -> Anomaly {
    match core.calls().get(call) {
        Some(info) => info.anomaly(kind, message),
        None => Anomaly::new(kind, message),
    }
}

/// The call's entry in the `calls` Array: `[tool_call, stack]` while its
/// parameters stream, `[tool_call_or_nil, false]` once its partial updates
/// stopped, nil when it has none (yet, or any more).
fn tool_call_entry(calls: RArray, call: CallId) -> Result<Option<RArray>, Error> {
    let entry: Value = calls.entry(call.0 as isize)?;
    Ok(RArray::from_value(entry))
}

/// Stops the partial updates of a call: its open containers may be out of
/// step with the parser now. The ToolCall, if any, is kept for completion.
pub(crate) fn detach(ruby: &Ruby, calls: RArray, call: CallId) -> Result<(), Error> {
    let tool_call = match tool_call_entry(calls, call)? {
        Some(entry) => entry.entry(0)?,
        None => ruby.qnil().as_value(),
    };
    calls.store(call.0 as isize, ruby.ary_new_from_values(&[tool_call, ruby.qfalse().as_value()]))
}

/// What the ToolCall builders need of a core: its calls, and the
/// `provider_data` of each call (none for the chat protocol).
pub trait CallSource {
    fn call_list(&self) -> &Calls;

    fn provider_data(&self, _ruby: &Ruby, _call: CallId) -> Result<Option<RHash>, Error> {
        Ok(None)
    }
}

impl CallSource for Processor {
    fn call_list(&self) -> &Calls {
        self.calls()
    }
}

fn new_tool_call<C: CallSource>(
    ruby: &Ruby,
    class: Value,
    core: &C,
    call: CallId,
    params: Option<RHash>,
) -> Result<Value, Error> {
    let info =
        core.call_list().get(call).ok_or_else(|| errors::internal(ruby, "an item names an unknown call"))?;
    let kwargs = ruby.hash_new();
    kwargs.aset(ruby.to_symbol("id"), ruby.str_new(&info.id))?;
    kwargs.aset(ruby.to_symbol("name"), ruby.str_new(&info.name))?;
    if let Some(params) = params {
        kwargs.aset(ruby.to_symbol("parameters"), params)?;
    }
    if let Some(data) = core.provider_data(ruby, call)? {
        kwargs.aset(ruby.to_symbol("provider_data"), data)?;
    }
    class.funcall("new", (KwArgs(kwargs),))
}

/// The partial ToolCall of a call whose visible parameters changed, or None
/// when its partial updates have stopped.
pub(crate) fn progress<C: CallSource>(
    ruby: &Ruby,
    core: &C,
    class: Value,
    calls: RArray,
    call: CallId,
) -> Result<Option<Value>, Error> {
    let entry = match tool_call_entry(calls, call)? {
        Some(entry) => entry,
        None => {
            let tool_call = new_tool_call(ruby, class, core, call, None)?;
            // Kept from here on, so that completion can reuse it whatever fails next.
            let entry = ruby.ary_new_from_values(&[tool_call, ruby.qfalse().as_value()]);
            calls.store(call.0 as isize, entry)?;
            let _: Value = tool_call.funcall("partial=", (true,))?;
            let params: Value = tool_call.funcall("parameters", ())?;
            if RHash::from_value(params).is_none() {
                return Err(errors::type_error(ruby, "ToolCall#parameters must return a Hash".to_owned()));
            }
            entry.store(1, ruby.ary_new_from_values(&[params]))?;
            entry
        }
    };
    let tool_call: Value = entry.entry(0)?;
    let Some(stack) = RArray::from_value(entry.entry(1)?) else {
        return Ok(None);
    };
    if let Some(events) = core.call_list().get(call).and_then(|c| c.view()) {
        view::apply(ruby, stack, events)?;
    }
    Ok(Some(tool_call))
}

pub(crate) fn completed<C: CallSource>(
    ruby: &Ruby,
    core: &C,
    class: Value,
    calls: RArray,
    call: CallId,
    params: &JsonValue,
) -> Result<Value, Error> {
    let hash = match params {
        JsonValue::Object(pairs) => object_to_hash(ruby, pairs)?,
        _ => ruby.hash_new(),
    };
    let streamed = match tool_call_entry(calls, call)? {
        Some(entry) => Some(entry.entry::<Value>(0)?).filter(|t| !t.is_nil()),
        None => None,
    };
    // Nothing streams into this call any more.
    calls.store(call.0 as isize, ruby.qnil())?;
    if let Some(tool_call) = streamed {
        // The object the partial updates returned gets the parameters; if
        // it refuses them (frozen, a setter that raises), a new one is built.
        let finished = tool_call
            .funcall::<_, _, Value>("parameters=", (hash,))
            .and_then(|_| tool_call.funcall::<_, _, Value>("partial=", (false,)));
        match finished {
            Ok(_) => return Ok(tool_call),
            Err(e) if passes_through(ruby, &e) => return Err(e),
            Err(_) => {}
        }
    }
    new_tool_call(ruby, class, core, call, Some(hash))
}
