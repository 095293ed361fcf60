//! What both processor classes hold (the core, the Ruby objects of its
//! calls, the poisoned flag), and the readers they share (token counts,
//! options, anomalies), written once. lib.rs defines the readers on each
//! class with `define_shared!`: magnus's `method!` needs a concrete
//! function, so a generic `define` cannot name them.

use std::cell::{Cell, RefCell};

use magnus::gc::Marker;
use magnus::value::Opaque;
use magnus::{Error, RArray, Ruby, Value};
use openai_stream::processor::Processor;
use openai_stream::responses::ResponsesProcessor;
use openai_stream::usage::UsageReport;

use crate::errors;
use crate::items::{anomalies_to_ruby, enter, read_anomalies, CallSource, Tools};

/// Slots of the `objects` Array.
pub(crate) const TOOL_CALL_CLASS: isize = 0;
pub(crate) const CALLS: isize = 1;

/// A processor object's state, `P` its core.
pub(crate) struct Holder<P> {
    core: RefCell<Option<P>>,
    /// `[tool_call_class, calls, ...]`; `calls[i]` is `[tool_call, stack]`
    /// for the call `CallId(i)` of the current stream. Marked for the GC;
    /// the Array itself never changes after `__setup`, so marking needs no
    /// borrow of `core` (which may be borrowed while Ruby runs a GC).
    objects: Cell<Option<Opaque<RArray>>>,
    /// A panic happened inside: the state cannot be trusted any more.
    poisoned: Cell<bool>,
}

impl<P> Default for Holder<P> {
    fn default() -> Self {
        Holder { core: RefCell::new(None), objects: Cell::new(None), poisoned: Cell::new(false) }
    }
}

impl<P: CallSource> Holder<P> {
    /// `__setup`: a new core, and the Array of `objects`: the ToolCall
    /// class, then `lists` new Arrays.
    pub fn install(&self, ruby: &Ruby, core: P, tool_call_class: Value, lists: usize) -> Result<(), Error> {
        let mut slot = self.core.try_borrow_mut().map_err(|_| errors::busy(ruby))?;
        let objects = ruby.ary_new_capa(lists + 1);
        objects.push(tool_call_class)?;
        for _ in 0..lists {
            objects.push(ruby.ary_new())?;
        }
        self.objects.set(Some(objects.into()));
        *slot = Some(core);
        Ok(())
    }

    pub fn mark(&self, marker: &Marker) {
        if let Some(objects) = self.objects.get() {
            marker.mark(objects);
        }
    }

    /// The Array of the Ruby objects (see `objects`).
    pub fn objects(&self, ruby: &Ruby) -> Result<RArray, Error> {
        Ok(ruby.get_inner(self.objects.get().ok_or_else(|| errors::internal(ruby, "no setup"))?))
    }

    /// The ToolCall class and the calls' objects.
    pub fn tools(&self, ruby: &Ruby) -> Result<Tools, Error> {
        let objects = self.objects(ruby)?;
        Ok(Tools { class: objects.entry(TOOL_CALL_CLASS)?, calls: objects.entry(CALLS)? })
    }

    /// One of the lists of `objects`, when set up.
    pub fn list(&self, ruby: &Ruby, slot: isize) -> Option<RArray> {
        self.objects(ruby).ok()?.entry::<RArray>(slot).ok()
    }

    /// The one way into the core, for every entry point: refuses a poisoned
    /// processor, catches panics (and poisons the processor on an internal
    /// error), and refuses a call while another one is running on this
    /// processor (another thread, or a callback re-entering it) with
    /// `ConcurrencyError`.
    pub fn enter<T>(&self, ruby: &Ruby, f: impl FnOnce(&mut P) -> Result<T, Error>) -> Result<T, Error> {
        enter(ruby, &self.poisoned, &self.core, f)
    }
}

/// A Ruby object holding a core processor.
pub(crate) trait Held {
    type Core: CallSource + Readings;

    fn holder(&self) -> &Holder<Self::Core>;
}

/// `Held`, and the GC marking, for a class whose struct has a `holder`.
macro_rules! holds {
    ($held:ty, $core:ty) => {
        impl magnus::DataTypeFunctions for $held {
            fn mark(&self, marker: &magnus::gc::Marker) {
                self.holder.mark(marker);
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

/// What the readers ask of a core processor.
pub(crate) trait Readings {
    fn usage(&self) -> UsageReport;
    fn partial_tool_calls(&self) -> bool;
    fn max_line_bytes(&self) -> usize;
    fn stop_reason(&self) -> Option<&str>;
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
                self.options().max_line_bytes
            }
            fn stop_reason(&self) -> Option<&str> {
                <$core>::stop_reason(self)
            }
        }
    )*};
}
readings!(Processor, ResponsesProcessor);

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
    read_anomalies(ruby, &this.holder().core, |anomalies| anomalies_to_ruby(ruby, anomalies.all().iter()))
}

/// Anomalies past the per-processor limit, counted but not kept.
pub(crate) fn dropped_anomalies<H: Held>(ruby: &Ruby, this: &H) -> Result<u64, Error> {
    read_anomalies(ruby, &this.holder().core, |anomalies| Ok(anomalies.dropped()))
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
