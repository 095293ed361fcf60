//! What both processor classes do with the output of their core: the Ruby
//! items of its text and tool calls, the anomalies found on the way, and the
//! result or error returned to Ruby. One copy serves both, generic over
//! [`CallSource`].

use std::cell::{Cell, RefCell};
use std::ops::ControlFlow;

use magnus::value::{Lazy, ReprValue};
use magnus::{Error, KwArgs, RArray, RClass, RHash, RModule, Ruby, Value};
use openai_stream::anomaly::{Anomalies, Anomaly, AnomalyKind};
use openai_stream::calls::{CallId, Calls};
use openai_stream::json::JsonValue;

use crate::convert::{anomaly_to_ruby, object_to_hash};
use crate::errors::{self, own};
use crate::guard::guard;
use crate::view;

/// The frozen empty Array every call that produced no items returns: most
/// reads of a stream of argument fragments produce nothing, and a fresh
/// Array for each was most of what the raw path allocated.
pub(crate) static NO_ITEMS: Lazy<RArray> = Lazy::new(|ruby| {
    let items = ruby.ary_new_capa(0);
    items.freeze();
    items
});

/// What a call into the core returns to Ruby.
pub(crate) enum Shape {
    /// `process_streamed_message`: nil, one item, or an Array.
    Streamed,
    /// Everything else: an Array.
    Array,
    /// `finish`: an Array, and the stream's calls are forgotten (the next
    /// stream numbers its calls from 0 again).
    Finish,
}

/// The one way into a core, for every entry point of both classes: refuses
/// a poisoned processor, catches panics (and poisons the processor on an
/// internal error), and refuses a call while another one is running on this
/// processor (another thread, or a callback re-entering it) with
/// `ConcurrencyError`.
#[inline]
pub(crate) fn enter<P, T>(
    ruby: &Ruby,
    poisoned: &Cell<bool>,
    core: &RefCell<Option<P>>,
    f: impl FnOnce(&mut P) -> Result<T, Error>,
) -> Result<T, Error> {
    if poisoned.get() {
        return Err(errors::internal(ruby, "this processor stopped after an earlier internal error"));
    }
    let result = with_core(ruby, core, f);
    if let Err(e) = &result {
        if own::<RClass>(ruby, "InternalError").is_ok_and(|c| e.is_kind_of(c)) {
            poisoned.set(true);
        }
    }
    result
}

/// `f` on the core, guarded; refused while busy or before `__setup`.
fn with_core<P, T>(
    ruby: &Ruby,
    core: &RefCell<Option<P>>,
    f: impl FnOnce(&mut P) -> Result<T, Error>,
) -> Result<T, Error> {
    guard(ruby, || {
        let mut borrow = core.try_borrow_mut().map_err(|_| errors::busy(ruby))?;
        f(borrow.as_mut().ok_or_else(|| errors::internal(ruby, "processor used before initialize"))?)
    })
}

/// The anomaly readers of both classes: unlike [`enter`], they read a
/// processor an internal error stopped too, since what it recorded up to
/// then (a list the error cannot have left half-written) is what explains
/// the error. Busy (another call running) is still refused.
pub(crate) fn read_anomalies<C: CallSource, T>(
    ruby: &Ruby,
    core: &RefCell<Option<C>>,
    f: impl FnOnce(&Anomalies) -> Result<T, Error>,
) -> Result<T, Error> {
    with_core(ruby, core, |core| f(core.anomaly_list()))
}

/// New anomalies as an Array of Hashes, or None.
#[inline]
pub(crate) fn new_anomalies<C: CallSource>(ruby: &Ruby, core: &mut C) -> Result<Option<RArray>, Error> {
    if !core.anomaly_list().has_new() {
        return Ok(None);
    }
    anomalies_to_ruby(ruby, core.anomaly_list().take_new()).map(Some)
}

/// Anomalies as an Array of frozen Hashes.
#[inline(never)]
pub(crate) fn anomalies_to_ruby<'a>(
    ruby: &Ruby,
    anomalies: impl ExactSizeIterator<Item = &'a Anomaly>,
) -> Result<RArray, Error> {
    let list = ruby.ary_new_capa(anomalies.len());
    for a in anomalies {
        list.push(anomaly_to_ruby(ruby, a)?)?;
    }
    Ok(list)
}

pub(crate) fn shape_items(ruby: &Ruby, items: RArray, shape: &Shape) -> Value {
    match shape {
        Shape::Array | Shape::Finish => items.as_value(),
        Shape::Streamed => match items.len() {
            0 => ruby.qnil().as_value(),
            1 => items.entry(0).unwrap_or_else(|_| ruby.qnil().as_value()),
            _ => items.as_value(),
        },
    }
}

/// What the `build_items` of a processor made of the core's output.
pub(crate) struct Built {
    pub(crate) items: RArray,
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
    own::<RModule>(ruby, "Error").is_ok_and(|own| e.is_kind_of(own))
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

fn call_anomaly<C: CallSource>(core: &C, call: CallId, kind: AnomalyKind, message: String) -> Anomaly {
    match core.call_list().get(call) {
        Some(info) => info.anomaly(kind, message),
        None => Anomaly::new(kind, message),
    }
}

/// The ToolCall class and the Array of the calls' Ruby objects:
/// `calls[i]` is `[tool_call, stack]` for the call `CallId(i)` of the
/// current stream.
#[derive(Clone, Copy)]
pub(crate) struct Tools {
    pub class: Value,
    pub calls: RArray,
}

/// The call's entry in the `calls` Array: `[tool_call, stack]` while its
/// parameters stream, `[tool_call_or_nil, false]` once its partial updates
/// stopped, nil when it has none (yet, or any more).
fn tool_call_entry(calls: RArray, call: CallId) -> Result<Option<RArray>, Error> {
    Ok(RArray::from_value(calls.entry(call.0 as isize)?))
}

/// Stops the partial updates of a call: its open containers may be out of
/// step with the parser now. The ToolCall, if any, is kept for completion.
pub(crate) fn detach(ruby: &Ruby, calls: RArray, call: CallId) -> Result<(), Error> {
    let tool_call = tool_call_entry(calls, call)?.map_or(Ok(ruby.qnil().as_value()), |e| e.entry(0))?;
    calls.store(call.0 as isize, ruby.ary_new_from_values(&[tool_call, ruby.qfalse().as_value()]))
}

/// What the ToolCall builders need of a core: its calls, its anomalies, and
/// the `provider_data` of each call (none for the chat protocol).
pub trait CallSource {
    fn call_list(&self) -> &Calls;

    fn anomaly_list(&mut self) -> &mut Anomalies;

    fn provider_data(&self, _ruby: &Ruby, _call: CallId) -> Result<Option<RHash>, Error> {
        Ok(None)
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
    Tools { class, calls }: Tools,
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
    Tools { class, calls }: Tools,
    call: CallId,
    params: &JsonValue,
) -> Result<Value, Error> {
    let hash = match params {
        JsonValue::Object(pairs) => object_to_hash(ruby, pairs)?,
        _ => ruby.hash_new(),
    };
    let streamed = tool_call_entry(calls, call)?.map(|e| e.entry::<Value>(0)).transpose()?;
    let streamed = streamed.filter(|t| !t.is_nil());
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

impl Built {
    /// Nothing built yet: the shared frozen empty Array as the items.
    pub(crate) fn new(ruby: &Ruby) -> Built {
        Built {
            items: ruby.get_inner(&NO_ITEMS),
            notes: Vec::new(),
            tool_call_errors: Vec::new(),
            first_exception: None,
            passthrough: None,
        }
    }

    /// The item of an `Item::Progress`: the partial ToolCall, or None. A
    /// ToolCall class that raises costs the call its partial updates, with
    /// an anomaly; `Break` when what was raised passes through (see
    /// [`Built::passthrough`]) and building stops.
    pub(crate) fn progress_item<C: CallSource>(
        &mut self,
        ruby: &Ruby,
        core: &C,
        tools: Tools,
        call: CallId,
    ) -> Result<ControlFlow<(), Option<Value>>, Error> {
        let calls = tools.calls;
        match progress(ruby, core, tools, call) {
            Ok(value) => Ok(ControlFlow::Continue(value)),
            Err(e) => {
                detach(ruby, calls, call)?;
                if passes_through(ruby, &e) {
                    self.passthrough = Some(e);
                    return Ok(ControlFlow::Break(()));
                }
                self.notes.push(call_anomaly(
                    core,
                    call,
                    AnomalyKind::PartialArgumentsBroken,
                    format!(
                        "partial updates stopped for this call: the ToolCall raised {}; \
                         it is completed at the end as usual",
                        describe(&e)
                    ),
                ));
                Ok(ControlFlow::Continue(None))
            }
        }
    }

    /// The item of an `Item::Completed`: the finished ToolCall, or None
    /// when the class failed to build it (a ToolCallError once every item
    /// is built); `Break` as for [`Built::progress_item`].
    pub(crate) fn completed_item<C: CallSource>(
        &mut self,
        ruby: &Ruby,
        core: &C,
        tools: Tools,
        call: CallId,
        params: &JsonValue,
    ) -> Result<ControlFlow<(), Option<Value>>, Error> {
        let calls = tools.calls;
        match completed(ruby, core, tools, call, params) {
            Ok(value) => Ok(ControlFlow::Continue(Some(value))),
            Err(e) => {
                // Whatever happened, nothing streams into this call any more.
                let _ = calls.store(call.0 as isize, ruby.qnil());
                if passes_through(ruby, &e) {
                    self.passthrough = Some(e);
                    return Ok(ControlFlow::Break(()));
                }
                let info = core.call_list().get(call);
                if self.first_exception.is_none() {
                    self.first_exception = e.value();
                }
                self.tool_call_errors.push(FailedToolCall {
                    call,
                    id: info.map(|c| c.id.clone()).unwrap_or_default(),
                    name: info.map(|c| c.name.clone()).unwrap_or_default(),
                    error: describe(&e),
                });
                Ok(ControlFlow::Continue(None))
            }
        }
    }

    /// Records what building found in the core, then makes the result of
    /// the call: the error of the core (with the items attached), a
    /// ToolCallError, what passed through, or the items in `shape`. With
    /// the new anomalies, which the caller hands to Ruby once the core is
    /// released.
    pub(crate) fn conclude<C: CallSource>(
        self,
        ruby: &Ruby,
        core: &mut C,
        outcome: Result<(), openai_stream::error::Error>,
        shape: &Shape,
        payload: Option<Value>,
    ) -> Result<(Result<Value, Error>, Option<RArray>), Error> {
        let Built { items, notes, tool_call_errors, first_exception, passthrough } = self;
        for note in notes {
            core.anomaly_list().push(note);
        }
        if outcome.is_err() || passthrough.is_some() {
            // Another error is raised in place of the ToolCallError: the
            // calls it would have named are recorded here instead.
            for failed in &tool_call_errors {
                let note = call_anomaly(
                    core,
                    failed.call,
                    AnomalyKind::ToolCallFailed,
                    format!("the tool call class raised {}; the call is not returned", failed.error),
                );
                core.anomaly_list().push(note);
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
            Ok(()) => Ok(shape_items(ruby, items, shape)),
        };
        Ok((result, anomalies))
    }
}
