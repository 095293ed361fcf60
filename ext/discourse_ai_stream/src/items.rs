//! What both processor classes do with the output of their core: the Ruby
//! items of its text and tool calls, the anomalies found on the way, and the
//! result or error returned to Ruby. One copy serves both, generic over
//! [`CallSource`].

use std::os::raw::c_int;

use magnus::error::ErrorType;
use magnus::rb_sys::{AsRawId, AsRawValue};
use magnus::value::{Lazy, LazyId, ReprValue};
use magnus::{Error, KwArgs, RArray, RHash, Ruby, Value};
use openai_stream::anomaly::{Anomalies, Anomaly, AnomalyKind};
use openai_stream::calls::{CallId, Calls};
use openai_stream::json::JsonValue;
use openai_stream::output::{Item, Output, Thinking};
use rb_sys::VALUE;

use crate::convert::{anomaly_to_ruby, json_to_ruby, object_to_hash};
use crate::errors::{self, passes_through, FailedToolCall};
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

/// `Thread.handle_interrupt(Object => :never)`: its argument and its name.
static NEVER: Lazy<RHash> = Lazy::new(|ruby| {
    let mask = ruby.hash_new();
    let _ = mask.aset(ruby.class_object(), ruby.to_symbol("never"));
    mask.freeze();
    mask
});
static HANDLE_INTERRUPT: LazyId = LazyId::new("handle_interrupt");

/// Runs `f` with Ruby's asynchronous interrupts deferred (`Thread#raise`,
/// `Thread#kill`, `Timeout`, signals), so that whatever the Ruby code it
/// calls raises was raised by that code. What was deferred lands as the
/// mask is lifted, once `f` returned: it is the error then, if any.
pub(crate) fn masked(ruby: &Ruby, f: impl FnOnce() -> Result<(), Error>) -> Result<(), Error> {
    unsafe extern "C" fn block<F: FnOnce()>(
        _: VALUE,
        f: VALUE,
        _: c_int,
        _: *const VALUE,
        _: VALUE,
    ) -> VALUE {
        // SAFETY: `f` points at `body` below, alive for the whole call.
        if let Some(f) = unsafe { (*(f as *mut Option<F>)).take() } {
            f();
        }
        rb_sys::Qnil as VALUE
    }
    fn block_of<F: FnOnce()>(_: &Option<F>) -> rb_sys::rb_block_call_func_t {
        Some(block::<F>)
    }
    let mut result = Ok(());
    // No panic unwinds through Ruby's frames: the guard catches it.
    let mut body = Some(|| result = guard(ruby, f));
    let (block, mask) = (block_of(&body), ruby.get_inner(&NEVER).as_raw());
    let name = LazyId::get_inner_with(&HANDLE_INTERRUPT, ruby).as_raw();
    // SAFETY: a method call with a block, protected; `mask` is a live Hash.
    magnus::rb_sys::protect(|| unsafe {
        rb_sys::rb_block_call(rb_sys::rb_cThread, name, 1, &mask, block, &mut body as *mut _ as VALUE)
    })?;
    // A `Thread.handle_interrupt` redefined so that it does not yield (an
    // instrumentation wrapper gone wrong): the read is built all the same,
    // unmasked, rather than lost.
    if let Some(unmasked) = body.take() {
        unmasked();
    }
    result
}

/// What a call into the core returns to Ruby.
pub(crate) enum Shape {
    /// `process_streamed_message`: nil, one item, or an Array.
    Streamed,
    /// Everything else: an Array.
    Array,
    /// `finish`: an Array, and the stream's calls are forgotten (the next
    /// stream numbers its calls from 0 again): these lists of the objects
    /// Array are emptied.
    Finish(&'static [isize]),
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
        Shape::Array | Shape::Finish(_) => items.as_value(),
        Shape::Streamed => match items.len() {
            0 => ruby.qnil().as_value(),
            1 => items.entry(0).unwrap_or_else(|_| ruby.qnil().as_value()),
            _ => items.as_value(),
        },
    }
}

/// The Ruby items a read builds of the core's output ([`Built::build`]).
pub(crate) struct Built {
    pub(crate) items: RArray,
    /// The ToolCall class and the calls' objects, looked up once per read.
    pub(crate) tools: Tools,
    /// How many of `items`, at their start, an interrupted read held.
    held: usize,
    /// Anomalies found while building (recorded in the core afterwards).
    notes: Vec<Anomaly>,
    /// The completed calls the ToolCall class failed to build.
    pub(crate) tool_call_errors: Vec<FailedToolCall>,
    /// The exception of the first of them. A Vec's buffer is not seen by
    /// the GC; this field, like `Built` itself, lives on the stack, which
    /// the GC scans, so the exception stays alive until it is raised.
    first_exception: Option<Value>,
    /// What a callback raised that is not a StandardError (Interrupt, a
    /// throw), or an error of this gem (a callback re-entering the
    /// processor): it costs the call being built as any failure of the
    /// class does, then it is raised as it is, the read's items held.
    pub(crate) passthrough: Option<Error>,
    /// A non-local exit (throw, break) passed: Ruby code run now could
    /// clear what it needs to go on, so no callback runs any more.
    stopped: bool,
}

/// `ClassName (message)` of a Ruby error, for anomalies and messages.
pub fn describe(e: &Error) -> String {
    match e.error_type() {
        ErrorType::Exception(x) => {
            // SAFETY: the class name is copied at once.
            let class = unsafe { x.classname() }.into_owned();
            format!("{class} ({x})")
        }
        ErrorType::Jump(tag) => format!("a non-local exit ({tag}: a throw, Thread#kill...)"),
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

    /// The items of the last read.
    fn out(&self) -> &Output;

    /// Building runs Ruby code even when the output is empty.
    fn links(&self) -> bool {
        false
    }

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

/// The ToolCall of a completed call, and whether a partial one handed out
/// under another id was left behind (see `renamed`).
pub(crate) fn completed<C: CallSource>(
    ruby: &Ruby,
    core: &C,
    Tools { class, calls }: Tools,
    call: CallId,
    params: &JsonValue,
) -> Result<(Value, bool), Error> {
    let hash = match params {
        JsonValue::Object(pairs) => object_to_hash(ruby, pairs)?,
        _ => ruby.hash_new(),
    };
    let streamed = tool_call_entry(calls, call)?.map(|e| e.entry::<Value>(0)).transpose()?;
    let streamed = streamed.filter(|t| !t.is_nil());
    // Nothing streams into this call any more.
    calls.store(call.0 as isize, ruby.qnil())?;
    // The server's id came after the partial updates (a Responses call_id
    // only in the done item) and replaced the generated one: the object
    // has no setter for it, so a new one is built.
    let id = core.call_list().get(call).map(|c| ruby.str_new(&c.id));
    let renamed = |t: &Value| -> Result<bool, Error> {
        let Some(id) = id else { return Ok(false) };
        match t.funcall::<_, _, Value>("id", ()).and_then(|own| own.eql(id)) {
            Ok(same) => Ok(!same),
            Err(e) if passes_through(ruby, &e) => Err(e),
            Err(_) => Ok(true),
        }
    };
    let (streamed, left) = match streamed {
        Some(t) if renamed(&t)? => (None, true),
        other => (other, false),
    };
    if let Some(tool_call) = streamed {
        // The object the partial updates returned gets the parameters (and
        // the provider data, which may have come after it was built); if it
        // refuses them (frozen, a setter that raises), a new one is built.
        let finished = tool_call
            .funcall::<_, _, Value>("parameters=", (hash,))
            .and_then(|_| match core.provider_data(ruby, call)? {
                Some(data) => tool_call.funcall::<_, _, Value>("provider_data=", (data,)),
                None => Ok(tool_call),
            })
            .and_then(|_| tool_call.funcall::<_, _, Value>("partial=", (false,)));
        match finished {
            Ok(_) => return Ok((tool_call, false)),
            Err(e) if passes_through(ruby, &e) => return Err(e),
            Err(_) => {}
        }
    }
    Ok((new_tool_call(ruby, class, core, call, Some(hash))?, left))
}

impl Built {
    /// Nothing built yet: the items an interrupted read held, a new Array
    /// for `capacity` items, or the shared frozen empty Array.
    pub(crate) fn new(ruby: &Ruby, held: Option<RArray>, capacity: usize, tools: Tools) -> Built {
        let none = || if capacity == 0 { ruby.get_inner(&NO_ITEMS) } else { ruby.ary_new_capa(capacity) };
        Built {
            items: held.unwrap_or_else(none),
            tools,
            held: held.map_or(0, |h| h.len()),
            notes: Vec::new(),
            tool_call_errors: Vec::new(),
            first_exception: None,
            passthrough: None,
            stopped: false,
        }
    }

    /// Calls `f`, a callback, unless a non-local exit stopped them (see
    /// `stopped`). What it raises is described, with the exception when it
    /// is the class failing; what passes through is kept (the first).
    fn call<T>(
        &mut self,
        ruby: &Ruby,
        f: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, (String, Option<Value>)> {
        if self.stopped {
            return Err(("nothing (not called: a non-local exit left this read)".to_owned(), None));
        }
        let e = match f() {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let text = describe(&e);
        if !passes_through(ruby, &e) {
            return Err((text, e.value()));
        }
        self.stopped |= matches!(e.error_type(), ErrorType::Jump(_));
        self.passthrough.get_or_insert(e);
        Err((text, None))
    }

    /// Adds the Ruby items of the core's output to `items`; `thinking`
    /// makes the item of a thinking, or none (only the Responses processor
    /// returns them). A ToolCall class that raises (a frozen parameters
    /// Hash, a `new` or `partial=` that refuses) costs the call concerned
    /// its partial updates, with an anomaly; every other item of the read
    /// is still built.
    pub(crate) fn build<C: CallSource>(
        &mut self,
        ruby: &Ruby,
        core: &C,
        mut thinking: impl FnMut(&str, Thinking) -> Result<Option<Value>, Error>,
    ) -> Result<(), Error> {
        for item in core.out().items() {
            let value = match item {
                Item::Text(text) => Some(ruby.str_new(text).as_value()),
                Item::Progress(call) => self.progress_item(ruby, core, call)?,
                Item::Completed(call, params) => self.completed_item(ruby, core, call, params)?,
                Item::Thinking { text, kind } => self.thinking_item(ruby, || thinking(text, kind), text),
            };
            if let Some(value) = value {
                // SAFETY: `items` is an unfrozen Array of ours (the frozen
                // empty one only when there is no item), so the push cannot
                // raise (magnus's `push` would wrap it in rb_protect, a cost
                // on every text event).
                unsafe { rb_sys::rb_ary_push(self.items.as_raw(), value.as_raw()) };
            }
        }
        Ok(())
    }

    /// The item of an `Item::Thinking`, made by `make`, or None when the
    /// Thinking class raised: that reasoning is left out, with an anomaly,
    /// and every other item of the read is still built (so no call of it
    /// is lost to the class failing).
    fn thinking_item(
        &mut self,
        ruby: &Ruby,
        make: impl FnOnce() -> Result<Option<Value>, Error>,
        text: &str,
    ) -> Option<Value> {
        match self.call(ruby, make) {
            Ok(value) => value,
            Err((what, _)) => {
                let message =
                    format!("the Thinking class raised {what}; this reasoning was left out, the read's other items were built");
                self.notes.push(Anomaly::new(AnomalyKind::ThinkingFailed, message).excerpt(text));
                None
            }
        }
    }

    /// The item of an `Item::Progress`: the partial ToolCall, or None. A
    /// ToolCall class that raises costs the call its partial updates, with
    /// an anomaly.
    fn progress_item<C: CallSource>(
        &mut self,
        ruby: &Ruby,
        core: &C,
        call: CallId,
    ) -> Result<Option<Value>, Error> {
        let tools = self.tools;
        match self.call(ruby, || progress(ruby, core, tools, call)) {
            Ok(value) => Ok(value),
            Err((what, _)) => {
                detach(ruby, tools.calls, call)?;
                self.notes.push(call_anomaly(
                    core,
                    call,
                    AnomalyKind::PartialArgumentsBroken,
                    format!(
                        "partial updates stopped for this call: the ToolCall raised {what}; \
                         it is completed at the end as usual"
                    ),
                ));
                Ok(None)
            }
        }
    }

    /// The item of an `Item::Completed`: the finished ToolCall, or None
    /// when the class failed to build it (a ToolCallError once every item
    /// is built).
    fn completed_item<C: CallSource>(
        &mut self,
        ruby: &Ruby,
        core: &C,
        call: CallId,
        params: &JsonValue,
    ) -> Result<Option<Value>, Error> {
        let tools = self.tools;
        match self.call(ruby, || completed(ruby, core, tools, call, params)) {
            Ok((value, left)) => {
                if left {
                    let what = "the call's id changed after its partial ToolCall was handed out under the \
                                generated one; the completed call is a new ToolCall under the server's id, \
                                the partial one stays as it was";
                    self.notes.push(call_anomaly(core, call, AnomalyKind::IdChanged, what.to_owned()));
                }
                Ok(Some(value))
            }
            Err((error, exception)) => {
                // Whatever happened, nothing streams into this call any more.
                let _ = tools.calls.store(call.0 as isize, ruby.qnil());
                self.first_exception = self.first_exception.or(exception);
                let info = core.call_list().get(call);
                self.tool_call_errors.push(FailedToolCall {
                    call,
                    id: info.map(|c| c.id.clone()).unwrap_or_default(),
                    name: info.map(|c| c.name.clone()).unwrap_or_default(),
                    error,
                });
                Ok(None)
            }
        }
    }

    /// Records what building found in the core, then makes the result of
    /// the call: the error of the core (with the items attached), a
    /// ToolCallError, or the items in `shape`. (What passed through is
    /// the caller's to raise.)
    pub(crate) fn conclude<C: CallSource>(
        &mut self,
        ruby: &Ruby,
        core: &mut C,
        outcome: Result<(), openai_stream::error::Error>,
        shape: &Shape,
        payload: Option<Value>,
    ) -> Result<Value, Error> {
        for note in self.notes.drain(..) {
            core.anomaly_list().push(note);
        }
        let passthrough = self.passthrough.is_some();
        if outcome.is_err() || passthrough {
            // Another error is raised in place of the ToolCallError: the
            // calls it would have named are recorded here instead.
            for failed in &self.tool_call_errors {
                let note = call_anomaly(
                    core,
                    failed.call,
                    AnomalyKind::ToolCallFailed,
                    format!("the tool call class raised {}; the call is not returned", failed.error),
                );
                core.anomaly_list().push(note);
            }
        }
        if self.held > 0 {
            self.items = dedupe(ruby, self.items, self.held);
        }
        match outcome {
            Err(e) => {
                // A provider error's payload: the core's, else (only Ruby
                // has it) the Hash given to `process_streamed_message`.
                let payload = match &e {
                    openai_stream::error::Error::Provider { payload: Some(p), .. } => {
                        Some(json_to_ruby(ruby, p).unwrap_or_else(|_| ruby.qnil().as_value()))
                    }
                    _ => payload,
                };
                Err(errors::from_core(ruby, &e, self.items, payload))
            }
            Ok(()) if !self.tool_call_errors.is_empty() && !passthrough => {
                Err(errors::tool_call(ruby, &self.tool_call_errors, self.first_exception, self.items))
            }
            Ok(()) => Ok(shape_items(ruby, self.items, shape)),
        }
    }
}

/// The items, each object once: a partial ToolCall held from an
/// interrupted read may come again from this one; it stays where it was.
fn dedupe(ruby: &Ruby, items: RArray, held: usize) -> RArray {
    let out = ruby.ary_new_capa(items.len());
    for (i, item) in items.into_iter().enumerate() {
        if i < held || !items.into_iter().take(held).any(|h| h.as_raw() == item.as_raw()) {
            let _ = out.push(item);
        }
    }
    out
}

/// Records that `by` interrupted a read whose items are held for the next
/// read or `finish`: an `:interrupted` anomaly for each call of its output
/// but those that `failed`, or one for the read; `lost`, the read's own
/// error, was not raised.
pub(crate) fn interrupted<C: CallSource>(
    core: &mut C,
    failed: &[FailedToolCall],
    by: &Error,
    lost: Option<&Error>,
) {
    let lost = lost.map(|e| format!(" (its {} was not raised)", describe(e))).unwrap_or_default();
    let message = format!(
        "{} interrupted this read: its items come out of the next read or finish{lost}",
        describe(by)
    );
    let calls: Vec<CallId> = (core.out().items())
        .filter_map(|item| match item {
            Item::Progress(call) | Item::Completed(call, _) => Some(call),
            _ => None,
        })
        .filter(|call| !failed.iter().any(|f| f.call == *call))
        .collect();
    let kind = AnomalyKind::Interrupted;
    if calls.is_empty() {
        core.anomaly_list().push(Anomaly::new(kind, message.clone()));
    }
    for call in calls {
        let note = call_anomaly(core, call, kind, message.clone());
        core.anomaly_list().push(note);
    }
}
