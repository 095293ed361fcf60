# frozen_string_literal: true

require "json"

# Responses API streams for the specs, built from event Hashes, and the two
# ways of feeding one to a processor: raw SSE bytes (`event:` and `data:`
# lines) through decode_chunk, and parsed events (symbol keys, as Discourse's
# JsonStreamDecoder gives them) through process_streamed_message.
module ResponsesStreams
  module_function

  def function_call(id, call_id, name, arguments = "")
    { id: id, type: "function_call", status: "in_progress", arguments: arguments, call_id: call_id, name: name }
  end

  def added(index, item)
    { type: "response.output_item.added", output_index: index, item: item }
  end

  def done(index, item)
    { type: "response.output_item.done", output_index: index, item: item }
  end

  def args_delta(index, item_id, delta)
    { type: "response.function_call_arguments.delta", output_index: index, item_id: item_id, delta: delta }
  end

  def text_delta(index, item_id, delta)
    { type: "response.output_text.delta", output_index: index, item_id: item_id, content_index: 0, delta: delta }
  end

  def completed(usage, output: [])
    { type: "response.completed", response: { id: "resp_1", status: "completed", output: output, usage: usage } }
  end

  # Two calls added before either is done, their argument deltas
  # interleaved, and each done item carrying its whole arguments.
  def two_interleaved_calls
    a = function_call("fc_a", "call_a", "search")
    b = function_call("fc_b", "call_b", "lookup")
    [
      added(0, a), added(1, b),
      args_delta(0, "fc_a", '{"query":'), args_delta(1, "fc_b", '{"id":'),
      args_delta(0, "fc_a", '"ruby"}'), args_delta(1, "fc_b", "42}"),
      done(0, a.merge(status: "completed", arguments: '{"query":"ruby"}')),
      done(1, b.merge(status: "completed", arguments: '{"id":42}')),
      completed({ input_tokens: 50, output_tokens: 12, input_tokens_details: { cached_tokens: 20 } })
    ]
  end

  # The events as the wire carries them.
  def sse(events)
    events.map { |e| "event: #{e[:type]}\ndata: #{JSON.generate(e)}\n\n" }.join.b
  end

  # Everything a processor returns for the stream, raw: `bytes` cut into
  # reads of `step` bytes, then finish.
  def run_raw(processor, events, step: 17)
    bytes = sse(events)
    items = []
    (0...bytes.bytesize).step(step) { |at| items.concat(processor.decode_chunk(bytes.byteslice(at, step))) }
    items.concat(processor.finish)
  end

  # The same through the Hash path.
  def run_hashes(processor, events)
    items = []
    events.each do |event|
      parsed = JSON.parse(JSON.generate(event), symbolize_names: true)
      items.concat(Array(processor.process_streamed_message(parsed)))
    end
    items.concat(processor.finish)
  end

  # [id, name, parameters, provider_data] of each final call, once each.
  def final_calls(items)
    items.select { |i| i.respond_to?(:parameters) && !i.partial? }.uniq(&:object_id)
         .map { |c| [c.id, c.name, c.parameters, c.provider_data] }
  end
end
