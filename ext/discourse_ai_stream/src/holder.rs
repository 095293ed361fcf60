//! What both processor classes hold (the core, the Ruby objects of its
//! calls, the items of an interrupted read, the poisoned flag), a read of
//! either ([`run`]), and the readers they share (token counts, options,
//! anomalies), written once. lib.rs defines the readers on each
//! class with `define_shared!`: magnus's `method!` needs a concrete
//! function, so a generic `define` cannot name them.

use std::cell::{Cell, RefCell};

use magnus::gc::Marker;
use magnus::value::{Opaque, ReprValue};
use magnus::{Error, RArray, RClass, Ruby, Value};
use openai_stream::calls::CallId;
use openai_stream::chat::ChatProcessor as Processor;
use openai_stream::error::Error as CoreError;
use openai_stream::output::Item;
use openai_stream::responses::ResponsesProcessor;
use openai_stream::usage::UsageReport;

use crate::errors;
use crate::guard::guard;
use crate::hash_reader;
use crate::items::{
    anomalies_to_ruby, interrupted, masked, new_anomalies, shape_items, Built, CallSource, Shape, Tools,
    NO_ITEMS,
};

/// Slots of the `objects` Array (the ToolCall class is the first).
pub(crate) const CALLS: isize = 1;

/// A processor object's state, `P` its core.
#[derive(Default)]
pub(crate) struct Holder<P> {
    core: RefCell<Option<P>>,
    /// `[tool_call_class, calls, ...]`; `calls[i]` is `[tool_call, stack]`
    /// for the call `CallId(i)` of the current stream. Marked for the GC;
    /// the Array itself never changes after `__setup`, so marking needs no
    /// borrow of `core` (which may be borrowed while Ruby runs a GC).
    objects: Cell<Option<Opaque<RArray>>>,
    /// The first two of `objects`, read by every read that has calls.
    tools: Cell<Option<(Opaque<Value>, Opaque<RArray>)>>,
    /// The items of an interrupted read, which the next read returns first.
    held: Cell<Option<Opaque<RArray>>>,
    /// A panic happened inside: the state cannot be trusted any more.
    poisoned: Cell<bool>,
    /// Ruby code runs for a call outside the core's borrow (the anomaly
    /// hook, the Hash reader's conversions): no read starts meanwhile (a
    /// hook that fed the processor would recurse without end).
    aside: Cell<bool>,
}

impl<P: CallSource> Holder<P> {
    /// `__setup`: a new core, and the Array of `objects`: the ToolCall
    /// class, then `lists` new Arrays.
    pub fn install(&self, ruby: &Ruby, core: P, tool_call_class: Value, lists: usize) -> Result<(), Error> {
        let mut slot = self.core.try_borrow_mut().map_err(|_| errors::busy(ruby, false))?;
        let objects = ruby.ary_new_capa(lists + 1);
        objects.push(tool_call_class)?;
        for _ in 0..lists {
            objects.push(ruby.ary_new())?;
        }
        self.objects.set(Some(objects.into()));
        self.tools.set(Some((tool_call_class.into(), objects.entry::<RArray>(CALLS)?.into())));
        self.held.set(None);
        *slot = Some(core);
        Ok(())
    }

    /// Keeps `items` for the next read (nothing is held when it is called:
    /// a read takes what was).
    fn hold(&self, items: RArray) {
        if !items.is_empty() {
            self.held.set(Some(items.dup().into()));
        }
    }

    /// The bytes it holds, for `ObjectSpace.memsize_of` (the core's
    /// buffers, unless a call has it now).
    pub fn memsize(&self) -> usize
    where
        P: Readings,
    {
        std::mem::size_of::<Self>()
            + self.core.try_borrow().map_or(0, |c| c.as_ref().map_or(0, P::heap_bytes))
    }

    /// Marks (and so pins) what the cells hold.
    pub fn mark(&self, marker: &Marker) {
        let (tools, held) = (self.tools.get().unzip(), self.held.get());
        for list in [self.objects.get(), tools.1, held].into_iter().flatten() {
            marker.mark(list);
        }
        if let Some(class) = tools.0 {
            marker.mark(class);
        }
    }

    /// The Array of the Ruby objects (see `objects`).
    pub fn objects(&self, ruby: &Ruby) -> Result<RArray, Error> {
        Ok(ruby.get_inner(self.objects.get().ok_or_else(|| errors::internal(ruby, "no setup"))?))
    }

    /// The ToolCall class and the calls' objects.
    pub fn tools(&self, ruby: &Ruby) -> Result<Tools, Error> {
        let (class, calls) = self.tools.get().ok_or_else(|| errors::internal(ruby, "no setup"))?;
        Ok(Tools { class: ruby.get_inner(class), calls: ruby.get_inner(calls) })
    }

    /// One of the lists of `objects`, when set up.
    pub fn list(&self, ruby: &Ruby, slot: isize) -> Option<RArray> {
        self.objects(ruby).ok()?.entry::<RArray>(slot).ok()
    }

    /// Runs `f`, which may run Ruby code, outside the core's borrow: a read
    /// that starts meanwhile is refused (see `aside`).
    fn aside<T>(&self, ruby: &Ruby, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        if self.aside.replace(true) {
            return Err(errors::busy(ruby, false));
        }
        let result = f();
        self.aside.set(false);
        result
    }

    /// The one way into the core, for every entry point: refuses a poisoned
    /// processor, catches panics (and poisons the processor on an internal
    /// error), and refuses a call while another one is running on this
    /// processor (another thread, or a callback re-entering it) with
    /// `ConcurrencyError`.
    #[inline]
    pub fn enter<T>(&self, ruby: &Ruby, f: impl FnOnce(&mut P) -> Result<T, Error>) -> Result<T, Error> {
        if self.poisoned.get() {
            return Err(errors::internal(ruby, "this processor stopped after an earlier internal error"));
        }
        let result = self.with_core(ruby, f);
        if let Err(e) = &result {
            if errors::own::<RClass>(ruby, "InternalError").is_ok_and(|c| e.is_kind_of(c)) {
                self.poisoned.set(true);
            }
        }
        result
    }

    /// `f` on the core, guarded; refused while busy or before `__setup`.
    /// Unlike [`Holder::enter`], for the anomaly readers: a processor an
    /// internal error stopped is read too, since what it recorded up to
    /// then (a list the error cannot have left half-written) is what
    /// explains the error.
    fn with_core<T>(&self, ruby: &Ruby, f: impl FnOnce(&mut P) -> Result<T, Error>) -> Result<T, Error> {
        guard(ruby, || {
            let mut borrow = self.core.try_borrow_mut().map_err(|_| errors::busy(ruby, false))?;
            f(borrow.as_mut().ok_or_else(|| errors::internal(ruby, "processor used before initialize"))?)
        })
    }
}

/// A Ruby object holding a core processor.
pub(crate) trait Held {
    type Core: CallSource + Readings;

    fn holder(&self) -> &Holder<Self::Core>;
}

/// `Held`, the GC marking and the memory size, for a class whose struct
/// has a `holder`.
macro_rules! holds {
    ($held:ty, $core:ty) => {
        impl magnus::DataTypeFunctions for $held {
            fn mark(&self, marker: &magnus::gc::Marker) {
                self.holder.mark(marker);
            }

            fn size(&self) -> usize {
                self.holder.memsize()
            }
        }

        impl $crate::holder::Held for $held {
            type Core = $core;

            fn holder(&self) -> &$crate::holder::Holder<$core> {
                &self.holder
            }
        }
    };
}
pub(crate) use holds;

/// One read of either class: `read` runs the core, then the Ruby items of
/// its output are built (with asynchronous interrupts deferred whenever
/// that runs Ruby code: see [`masked`]), the result or error made, and the
/// new anomalies handed to the hook. What interrupts it (an exception that
/// lands as the mask is lifted, passes through a callback or leaves the
/// hook) is raised as it is, and the read's items are held for the next
/// read or `finish`, with `:interrupted` anomalies. `text` makes the String
/// of an output that is one text.
/// `build` makes the items (see [`Built`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<P: CallSource>(
    ruby: &Ruby,
    holder: &Holder<P>,
    me: Value,
    shape: Shape,
    payload: Option<Value>,
    read: impl FnOnce(&mut P) -> Result<(), CoreError>,
    text: impl FnOnce(&str) -> Value,
    build: impl FnOnce(&P, &mut Built) -> Result<(), Error>,
) -> Result<Value, Error> {
    let nil = ruby.qnil().as_value();
    if holder.aside.get() {
        return Err(errors::busy(ruby, false));
    }
    let (result, anomalies, items) = holder.enter(ruby, |core| {
        let outcome = read(core);
        let (out, quiet) = (core.out(), outcome.is_ok() && holder.held.get().is_none() && !core.links());
        // The commonest results, one text (the Hash path) or nothing
        // (argument fragments), made without building anything.
        let fast = match (&shape, out.only_text()) {
            (Shape::Streamed, Some(t)) if quiet => Some((text(t), None)),
            (Shape::Streamed | Shape::Array, None) if quiet && out.is_empty() => {
                let none = ruby.get_inner(&NO_ITEMS);
                Some((shape_items(ruby, none, &shape), Some(none)))
            }
            _ => None,
        };
        if let Some((value, items)) = fast {
            return Ok((Ok(value), new_anomalies(ruby, core)?, items));
        }
        let held = holder.held.take().map(|h| ruby.get_inner(h));
        let mut built = Built::new(ruby, held, out.len(), holder.tools(ruby)?);
        // Ruby code runs to make a ToolCall, a Thinking or an error (not for
        // the partial updates of a ToolCall that exists: most reads of a
        // partial stream).
        let calls = built.tools.calls;
        let new = |call: CallId| calls.entry::<Value>(call.0 as isize).map_or(true, |e| e.is_nil());
        let mask = outcome.is_err()
            || core.links()
            || out.items().any(|item| match item {
                Item::Text(_) => false,
                Item::Progress(call) => new(call),
                _ => true,
            });
        let mut result = Ok(nil);
        let step = || {
            build(core, &mut built)?;
            result = built.conclude(ruby, core, outcome, &shape, payload);
            Ok(())
        };
        // What interrupted it: what landed when the mask was lifted, or a
        // failure to build, else what passed through a callback.
        let stop = if mask { masked(ruby, step) } else { step() }.err().or(built.passthrough.take());
        if let Shape::Finish(lists) = shape {
            // The core ended the stream (whatever its outcome): the next
            // one numbers its calls from 0 again.
            for list in lists.iter().filter_map(|&slot| holder.list(ruby, slot)) {
                list.clear()?;
            }
        }
        let Some(e) = stop else { return Ok((result, new_anomalies(ruby, core)?, Some(built.items))) };
        if !built.items.is_empty() || result.is_err() {
            holder.hold(built.items);
            interrupted(core, &built.tool_call_errors, &e, result.as_ref().err());
        }
        // A callback's re-entry was refused, but this read was consumed.
        let reentered = errors::own::<RClass>(ruby, "ConcurrencyError").is_ok_and(|c| e.is_kind_of(c));
        Err(if reentered { errors::busy(ruby, true) } else { e })
    })?;
    let Some(anomalies) = anomalies else { return result };
    let delivered = holder.aside(ruby, || me.funcall::<_, _, Value>("__deliver_anomalies", (anomalies,)));
    let Err(e) = delivered else { return result };
    // The hook raised: the result it did not let out is held.
    holder.hold(items.unwrap_or_else(|| ruby.ary_new_from_values(&[*result.as_ref().unwrap_or(&nil)])));
    if let Some(core) = holder.core.try_borrow_mut().ok().as_deref_mut().and_then(Option::as_mut) {
        interrupted(core, &[], &e, result.as_ref().err());
        // Not for the hook, which raised: the next read's result would be
        // held again, for good with a hook that always raises.
        let _ = core.anomaly_list().take_new();
    }
    Err(e)
}

/// What the readers ask of a core processor.
pub(crate) trait Readings {
    fn usage(&self) -> UsageReport;
    fn partial_tool_calls(&self) -> bool;
    fn max_line_bytes(&self) -> usize;
    fn heap_bytes(&self) -> usize;
    fn stop_reason(&self) -> Option<&str>;
    fn process_json(&mut self, text: &str, whole: bool) -> Result<(), CoreError>;
}

/// The same readers for both cores, whose options share these fields.
macro_rules! readings {
    ($($core:ty),*) => {$(
        impl Readings for $core {
            fn usage(&self) -> UsageReport {
                <$core>::usage(self)
            }
            fn partial_tool_calls(&self) -> bool {
                self.options().partial_tool_calls
            }
            fn max_line_bytes(&self) -> usize {
                self.options().max_line_bytes.0
            }
            fn heap_bytes(&self) -> usize {
                <$core>::heap_bytes(self)
            }
            fn stop_reason(&self) -> Option<&str> {
                <$core>::stop_reason(self)
            }
            fn process_json(&mut self, text: &str, whole: bool) -> Result<(), CoreError> {
                <$core>::process_json(self, text, whole).map(|_| ())
            }
        }
    )*};
}
readings!(Processor, ResponsesProcessor);

/// The Hash path's read, for [`run`]: `value` (a parsed chunk or event,
/// `what`), of which what `keys` names is read (all of it when None), or
/// (`whole`) a whole response.
pub(crate) fn json<P: CallSource + Readings>(
    ruby: &Ruby,
    holder: &Holder<P>,
    value: Value,
    what: &str,
    keys: Option<&hash_reader::Node>,
    whole: bool,
) -> Result<impl FnOnce(&mut P) -> Result<(), CoreError>, Error> {
    errors::expect_hash(ruby, value, what)?;
    // The reader may run Ruby code (a key's to_s, String#encode).
    let read = || guard(ruby, || hash_reader::read(ruby, value, keys));
    let hash_reader::Json { text, anomalies } = holder.aside(ruby, read)?;
    Ok(move |core: &mut P| {
        anomalies.into_iter().for_each(|anomaly| core.anomaly_list().push(anomaly));
        core.process_json(&text, whole)
    })
}

/// Runs `f` on the core of `this`, as every call does (refused when busy or
/// stopped by an internal error).
pub(crate) fn read<H: Held, T>(ruby: &Ruby, this: &H, f: impl FnOnce(&H::Core) -> T) -> Result<T, Error> {
    this.holder().enter(ruby, |core| Ok(f(core)))
}

/// Readers of one value of the core, each `name(ruby, this)`.
macro_rules! readers {
    ($($(#[$doc:meta])* $name:ident -> $t:ty = $read:expr;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name<H: Held>(ruby: &Ruby, this: &H) -> Result<$t, Error> {
            read(ruby, this, $read)
        }
    )*};
}

readers! {
    prompt_tokens -> Option<u64> = |c| c.usage().prompt_tokens;
    completion_tokens -> Option<u64> = |c| c.usage().completion_tokens;
    cache_read_tokens -> Option<u64> = |c| c.usage().cache_read_tokens;
    /// The legacy reader: cache reads, nil unless the server sent a count.
    cached_tokens -> Option<u64> = |c| c.usage().cached_tokens;
    cache_write_tokens -> Option<u64> = |c| c.usage().cache_write_tokens;
    partial_tool_calls -> bool = |c| c.partial_tool_calls();
    max_line_bytes -> usize = |c| c.max_line_bytes();
    stop_reason -> Option<String> = |c| c.stop_reason().map(str::to_owned);
}

/// Every anomaly recorded so far, as frozen Hashes (readable after an
/// internal error too).
pub(crate) fn anomalies<H: Held>(ruby: &Ruby, this: &H) -> Result<RArray, Error> {
    this.holder().with_core(ruby, |core| anomalies_to_ruby(ruby, core.anomaly_list().all().iter()))
}

/// Anomalies past the per-processor limit, counted but not kept.
pub(crate) fn dropped_anomalies<H: Held>(ruby: &Ruby, this: &H) -> Result<u64, Error> {
    this.holder().with_core(ruby, |core| Ok(core.anomaly_list().dropped()))
}

/// Defines the methods both classes have on `$class`, for the Ruby object
/// type `$held`: the entry points of a stream and the readers above.
macro_rules! define_shared {
    ($class:expr, $held:ty) => {{
        use magnus::{method, Module};
        use $crate::holder as r;
        $class.define_method("process_streamed_message", method!(<$held>::process_streamed_message, 1))?;
        $class.define_method("process_message", method!(<$held>::process_message, 1))?;
        $class.define_method("decode_chunk", method!(<$held>::decode_chunk, 1))?;
        $class.define_method("finish", method!(<$held>::finish, 0))?;
        $class.define_method("prompt_tokens", method!(r::prompt_tokens::<$held>, 0))?;
        $class.define_method("completion_tokens", method!(r::completion_tokens::<$held>, 0))?;
        $class.define_method("cache_read_tokens", method!(r::cache_read_tokens::<$held>, 0))?;
        $class.define_method("cache_write_tokens", method!(r::cache_write_tokens::<$held>, 0))?;
        $class.define_method("cached_tokens", method!(r::cached_tokens::<$held>, 0))?;
        $class.define_method("partial_tool_calls?", method!(r::partial_tool_calls::<$held>, 0))?;
        $class.define_method("max_line_bytes", method!(r::max_line_bytes::<$held>, 0))?;
        $class.define_method("stop_reason", method!(r::stop_reason::<$held>, 0))?;
        $class.define_method("anomalies", method!(r::anomalies::<$held>, 0))?;
        $class.define_method("dropped_anomalies", method!(r::dropped_anomalies::<$held>, 0))?;
    }};
}
pub(crate) use define_shared;
