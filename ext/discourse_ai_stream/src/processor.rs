//! `DiscourseAiStream::OpenAiMessageProcessor`: the core's processor held in
//! a Ruby object. Ruby-facing conveniences (keyword arguments, hooks,
//! `inspect`) live in lib/discourse_ai_stream/open_ai_message_processor.rb.

use std::cell::Cell;

use magnus::typed_data::Obj;
use magnus::value::ReprValue;
use magnus::{Error, RArray, RHash, Ruby, Symbol, TypedData, Value};
use openai_stream::anomaly::Anomalies;
use openai_stream::calls::{CallId, Calls};
use openai_stream::chat::{ChatProcessor as Processor, Options};
use openai_stream::output::Output;
use openai_stream::usage::UsageMode;
use rb_sys::VALUE;

use crate::convert::json_to_ruby;
use crate::errors;
use crate::guard::guard;
use crate::hash_reader;
use crate::holder::{self, read, Holder, CALLS};
use crate::items::{CallSource, Shape};

#[derive(TypedData, Default)]
#[magnus(class = "DiscourseAiStream::OpenAiMessageProcessor", free_immediately, mark, size)]
pub struct RbProcessor {
    holder: Holder<Processor>,
    /// The last read did not return one text: the next chunk is not tried
    /// as a bare text delta first. Streams come in runs (text deltas, then
    /// tool call fragments), and each fragment would pay for the try.
    past_text: Cell<bool>,
}

crate::holder::holds!(RbProcessor, Processor);

type Me = Obj<RbProcessor>;

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

    /// `{ chat_completions: { turn:, model:, extra_content: } }` for every
    /// call of a response that carries something back (rules 77 to 79),
    /// without what is absent; none otherwise.
    fn provider_data(&self, ruby: &Ruby, call: CallId) -> Result<Option<RHash>, Error> {
        let trip = self.round_trip();
        if !self.options().round_trip || !trip.carries() {
            return Ok(None);
        }
        let inner = ruby.hash_new();
        for (key, value) in [("turn", trip.turn()), ("model", trip.model())] {
            if let Some(value) = value {
                inner.aset(ruby.to_symbol(key), ruby.str_new(value))?;
            }
        }
        if let Some(extra) = trip.extra(call) {
            inner.aset(ruby.to_symbol("extra_content"), json_to_ruby(ruby, extra)?)?;
        }
        let data = ruby.hash_new();
        data.aset(ruby.to_symbol(PROVIDER_KEY), inner)?;
        Ok(Some(data))
    }
}

/// The key of what the round trip carries, in a ToolCall's `provider_data`
/// and a Thinking's `provider_info` (`OpenAiMessageProcessor::PROVIDER_KEY`).
const PROVIDER_KEY: &str = "chat_completions";

/// The `provider_info` of a Thinking (without the key): the fields the
/// reasoning came in, its details, the model; nil without the round trip.
fn thinking_info(ruby: &Ruby, core: &Processor) -> Result<Value, Error> {
    let trip = core.round_trip();
    if !core.options().round_trip {
        return Ok(ruby.qnil().as_value());
    }
    let info = ruby.hash_new();
    info.aset(ruby.to_symbol("fields"), ruby.ary_from_iter(trip.fields().iter().map(|f| ruby.str_new(f))))?;
    if !trip.details().is_empty() {
        let details = ruby.ary_new_capa(trip.details().len());
        for detail in trip.details() {
            details.push(json_to_ruby(ruby, detail)?)?;
        }
        info.aset(ruby.to_symbol("reasoning_details"), details)?;
    }
    if let Some(model) = trip.model() {
        info.aset(ruby.to_symbol("model"), ruby.str_new(model))?;
    }
    Ok(info.as_value())
}

impl RbProcessor {
    /// `__setup(partial_tool_calls, usage_mode, max_line_bytes, tool_call_class, simulate_legacy, strict,
    /// output_limit, output_thinking, round_trip, model)`.
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
        output_thinking: bool,
        round_trip: bool,
        model: Option<String>,
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
                output_thinking,
                round_trip,
            };
            let mut core = Processor::new(options);
            core.set_model(model);
            rb_self.holder.install(ruby, core, tool_call_class, 1)
        })
    }

    pub fn process_streamed_message(ruby: &Ruby, rb_self: Me, chunk: Value) -> Result<Value, Error> {
        Self::read(ruby, rb_self, chunk, Shape::Streamed, false)
    }

    pub fn process_message(ruby: &Ruby, rb_self: Me, message: Value) -> Result<Value, Error> {
        Self::read(ruby, rb_self, message, Shape::Array, true)
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

    /// A parsed chunk, or (`whole`) a whole response, read by the Hash
    /// path's reader; a bare text delta by its text alone.
    fn read(ruby: &Ruby, rb_self: Me, value: Value, shape: Shape, whole: bool) -> Result<Value, Error> {
        let bare = !whole && !rb_self.past_text.replace(true);
        // The text is read by the core before Ruby code runs.
        let bare_text = guard(ruby, || bare.then(|| hash_reader::bare_text(value)).transpose())?;
        if let Some((text, content)) = bare_text.flatten() {
            return Self::run(ruby, rb_self, shape, Some(value), Some(content), |core| {
                core.process_text(text).map(|_| ())
            });
        }
        let read =
            holder::json(ruby, &rb_self.holder, value, "a parsed chunk", hash_reader::chunk_keys(), whole)?;
        Self::run(ruby, rb_self, shape, Some(value), None, read)
    }

    /// Runs `f` on the core and makes its result (see [`holder::run`]).
    fn run(
        ruby: &Ruby,
        rb_self: Me,
        shape: Shape,
        payload: Option<Value>,
        reuse: Option<VALUE>,
        f: impl FnOnce(&mut Processor) -> Result<(), openai_stream::error::Error>,
    ) -> Result<Value, Error> {
        let this = &*rb_self;
        let text = |text: &str| {
            this.past_text.set(false);
            reuse
                .and_then(|s| hash_reader::reusable(s, text))
                .unwrap_or_else(|| ruby.str_new(text).as_value())
        };
        let me = rb_self.as_value();
        holder::run(ruby, &this.holder, me, shape, payload, f, text, |core, built| {
            built.build(ruby, core, |text, _| {
                me.funcall("__thinking", (text, thinking_info(ruby, core)?)).map(Some)
            })
        })
    }

    pub fn output_thinking(ruby: &Ruby, rb_self: &RbProcessor) -> Result<bool, Error> {
        read(ruby, rb_self, |c| c.options().output_thinking)
    }

    pub fn round_trip(ruby: &Ruby, rb_self: &RbProcessor) -> Result<bool, Error> {
        read(ruby, rb_self, |c| c.options().round_trip)
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
