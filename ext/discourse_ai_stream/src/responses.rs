//! `DiscourseAiStream::OpenAiResponsesMessageProcessor`: the core's Responses
//! API processor held in a Ruby object. Ruby-facing conveniences (keyword
//! arguments, the Thinking class, hooks) live in
//! lib/discourse_ai_stream/open_ai_responses_message_processor.rb. The
//! ToolCall objects are built by the same helpers as the chat processor's.

use magnus::typed_data::Obj;
use magnus::value::ReprValue;
use magnus::{Error, RArray, RHash, Ruby, Symbol, TypedData, Value};
use openai_stream::anomaly::Anomalies;
use openai_stream::calls::{CallId, Calls};
use openai_stream::output::{Output, Thinking};
use openai_stream::responses::{Options, ResponsesProcessor};

use crate::errors;
use crate::guard::guard;
use crate::holder::{self, read, Holder, CALLS};
use crate::items::{Built, CallSource, Shape};

/// A slot of the `objects` Array, after holder.rs's:
/// `thinkings[n]`: the finished Thinking of reasoning item `n` (its
/// `next_message_id` arrives later).
const THINKINGS: isize = 2;

#[derive(TypedData, Default)]
#[magnus(class = "DiscourseAiStream::OpenAiResponsesMessageProcessor", free_immediately, mark, size)]
pub struct RbResponsesProcessor {
    holder: Holder<ResponsesProcessor>,
}

crate::holder::holds!(RbResponsesProcessor, ResponsesProcessor);

impl CallSource for ResponsesProcessor {
    fn call_list(&self) -> &Calls {
        self.calls()
    }

    fn out(&self) -> &Output {
        self.output()
    }

    fn links(&self) -> bool {
        !self.linked_reasonings().is_empty()
    }

    fn anomaly_list(&mut self) -> &mut Anomalies {
        self.anomalies_mut()
    }

    /// `{ open_ai_responses: { id:, call_id: } }`, without absent ids.
    fn provider_data(&self, ruby: &Ruby, call: CallId) -> Result<Option<RHash>, Error> {
        let Some((id, call_id)) = self.call_item(call) else { return Ok(None) };
        let inner = ruby.hash_new();
        for (key, value) in [("id", id), ("call_id", call_id)] {
            if let Some(value) = value {
                inner.aset(ruby.to_symbol(key), ruby.str_new(value))?;
            }
        }
        let data = ruby.hash_new();
        data.aset(ruby.to_symbol("open_ai_responses"), inner)?;
        Ok(Some(data))
    }
}

type Me = Obj<RbResponsesProcessor>;

impl RbResponsesProcessor {
    /// `__setup(partial_tool_calls, output_thinking, max_line_bytes, tool_call_class, strict, output_limit)`.
    #[allow(clippy::too_many_arguments)]
    pub fn setup(
        ruby: &Ruby,
        rb_self: Me,
        partial_tool_calls: bool,
        output_thinking: bool,
        max_line_bytes: usize,
        tool_call_class: Value,
        strict: bool,
        output_limit: Symbol,
    ) -> Result<(), Error> {
        guard(ruby, || {
            let output_limit = crate::convert::output_limit(ruby, max_line_bytes, output_limit)?;
            let max_line_bytes = openai_stream::sse::MaxLineBytes(max_line_bytes);
            let options =
                Options { partial_tool_calls, output_thinking, max_line_bytes, strict, output_limit };
            rb_self.holder.install(ruby, ResponsesProcessor::new(options), tool_call_class, 2)
        })
    }

    pub fn process_streamed_message(ruby: &Ruby, rb_self: Me, event: Value) -> Result<Value, Error> {
        let read = holder::json(ruby, &rb_self.holder, event, "a parsed event", None, false)?;
        Self::run(ruby, rb_self, Shape::Streamed, Some(event), read)
    }

    pub fn process_message(ruby: &Ruby, rb_self: Me, response: Value) -> Result<Value, Error> {
        let read = holder::json(ruby, &rb_self.holder, response, "a parsed event", None, true)?;
        Self::run(ruby, rb_self, Shape::Array, Some(response), read)
    }

    pub fn decode_chunk(ruby: &Ruby, rb_self: Me, raw: Value) -> Result<Value, Error> {
        let raw = errors::expect_bytes(ruby, raw)?;
        Self::run(ruby, rb_self, Shape::Array, None, |core| {
            // SAFETY: no Ruby code runs while the core reads the bytes.
            let bytes = unsafe { raw.as_slice() };
            core.decode(bytes).map(|_| ())
        })
    }

    pub fn finish(ruby: &Ruby, rb_self: Me) -> Result<Value, Error> {
        Self::run(ruby, rb_self, Shape::Finish(&[CALLS, THINKINGS]), None, |core| core.finish().map(|_| ()))
    }

    fn run(
        ruby: &Ruby,
        rb_self: Me,
        shape: Shape,
        payload: Option<Value>,
        f: impl FnOnce(&mut ResponsesProcessor) -> Result<(), openai_stream::error::Error>,
    ) -> Result<Value, Error> {
        let me = rb_self.as_value();
        let text = |text: &str| ruby.str_new(text).as_value();
        holder::run(ruby, &rb_self.holder, me, shape, payload, f, text, |core, built| {
            rb_self.build_items(ruby, me, core, built)
        })
    }

    /// The Ruby items of the core's output, then the `next_message_id` of
    /// thinking items returned earlier.
    fn build_items(
        &self,
        ruby: &Ruby,
        me: Value,
        core: &ResponsesProcessor,
        built: &mut Built,
    ) -> Result<(), Error> {
        let thinkings = || self.holder.objects(ruby)?.entry::<RArray>(THINKINGS);
        built.build(ruby, core, |text, kind| {
            Ok(Some(match kind {
                Thinking::Delta => me.funcall("__thinking", (text, true, ruby.qnil(), ruby.qnil()))?,
                Thinking::Reasoning(n) => {
                    let info = core.reasoning(n);
                    let id = info.and_then(|r| r.id.as_deref());
                    let encrypted = info.and_then(|r| r.encrypted_content.as_deref());
                    let thinking: Value = me.funcall("__thinking", (text, false, id, encrypted))?;
                    thinkings()?.store(n as isize, thinking)?;
                    thinking
                }
                // A native tool's activity, or (no message) the output items.
                kind => {
                    let (message, with_items) = match kind {
                        Thinking::Tool { with_items } => (Some(text), with_items),
                        _ => (None, true),
                    };
                    let items = with_items.then(|| output_items(ruby, core)).transpose()?;
                    me.funcall("__tool_thinking", (message, items))?
                }
            }))
        })?;
        for &n in core.linked_reasonings() {
            let Some(message_id) = core.reasoning(n).and_then(|r| r.next_message_id.as_deref()) else {
                continue;
            };
            let thinking: Value = thinkings()?.entry(n as isize)?;
            if !thinking.is_nil() {
                let _: Value = me.funcall("__link_thinking", (thinking, message_id))?;
            }
        }
        Ok(())
    }

    pub fn output_thinking(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        read(ruby, rb_self, |c| c.options().output_thinking)
    }

    /// `__panic_for_tests`: a panic inside a processor call, to prove the
    /// guard and the poisoning.
    pub fn panic_for_tests(ruby: &Ruby, rb_self: Me) -> Result<Value, Error> {
        Self::run(ruby, rb_self, Shape::Array, None, |_| panic!("deliberate panic for tests"))
    }
}

/// The response's output items (Hashes with Symbol keys), for a thinking item.
fn output_items(ruby: &Ruby, core: &ResponsesProcessor) -> Result<Value, Error> {
    let items = ruby.ary_new_capa(core.output_items().len());
    for item in core.output_items() {
        items.push(crate::convert::json_to_ruby(ruby, item)?)?;
    }
    Ok(items.as_value())
}
