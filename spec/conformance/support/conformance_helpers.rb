# frozen_string_literal: true

require "json"
require "set"

# Drives DiscourseAiStream::OpenAiMessageProcessor the two ways Discourse
# does, for the conformance specs (spec/conformance/), which replay the facts
# of Discourse's own processor and endpoint specs (input shapes, expected
# calls, text, token counts) in streams and examples written here.
#
# Both paths give "steps": one Array per event (Hash path) or per read (raw
# path), then one for `finish`. Every item in a step is a snapshot taken
# when the step returned it (a String, or a Hash with id, name, a deep copy
# of the parameters and partial), because with partial_tool_calls the same
# ToolCall object comes back again and is changed in place, and Discourse's
# callers copy each item (`partial.dup`) when they receive it.
#
# The endpoint wrapper: Discourse's OpenAI endpoint maps the events of one
# raw read through process_streamed_message, flattens, drops nils, then keeps
# each ToolCall object once per read (a Set, by identity). `steps` applies
# that same rule to every step, so a read that moves a call several times
# shows it once, in the state it has at the end of the read.
module ConformanceHelpers
  module_function

  # The Hash path: each payload (a JSON String as it stands on the wire) is
  # parsed with symbol keys and given to process_streamed_message; payloads
  # that do not parse are skipped, as Discourse's decoder skips them.
  def hash_steps(processor, payloads)
    steps = payloads.filter_map do |payload|
      event = JSON.parse(payload, symbolize_names: true)
      step(processor.process_streamed_message(event)) if event.is_a?(Hash)
    rescue JSON::ParserError
      nil
    end
    steps << step(processor.finish)
  end

  # The raw path: each read goes to decode_chunk, then finish.
  def raw_steps(processor, reads)
    reads.map { |read| step(processor.decode_chunk(read.b)) } << step(processor.finish)
  end

  # What one call returned, as the caller sees it right then.
  def step(result)
    seen = Set.new.compare_by_identity
    [result].flatten.compact.select { |item| item.is_a?(String) || seen.add?(item) }.map { |item| snapshot(item) }
  end

  def snapshot(item)
    return item.dup if item.is_a?(String)

    { id: item.id, name: item.name, parameters: Marshal.load(Marshal.dump(item.parameters)), partial: item.partial? }
  end

  # The ways a body is split into reads: whole, one byte at a time, and the
  # upstream spec's own pieces when it splits the body itself.
  def splittings(body, pieces: nil)
    reads_by_way(body, pieces: pieces).transform_keys { |way| WAYS.fetch(way) }
  end

  WAYS = { whole: "the whole body in one read", bytes: "one byte per read",
           pieces: "the upstream spec's own pieces" }.freeze

  def reads_by_way(body, pieces: nil)
    body = body.b
    ways = { whole: [body], bytes: body.bytes.map { |byte| byte.chr.b } }
    ways[:pieces] = pieces.map(&:b) if pieces
    ways
  end

  # Splits a body after each marker in turn (each searched from the end of
  # the previous piece): the reads of an upstream spec that splits its body
  # at chosen places.
  def cut_after(body, markers)
    pieces = []
    rest = body
    markers.each do |marker|
      at = rest.index(marker) or raise ArgumentError, "no #{marker.inspect} left in the body"
      pieces << rest[0, at + marker.size]
      rest = rest[(at + marker.size)..]
    end
    pieces << rest
  end

  # Arbitrary pieces of a text, of 1 to 6 characters, cut the same way each run.
  def fragments_of(text, sizes: [2, 5, 1, 6, 3, 4])
    pieces = []
    offset = 0
    sizes.cycle do |size|
      break if offset >= text.size

      pieces << text[offset, size]
      offset += size
    end
    pieces
  end

  # The body Discourse's mocks build: every event as `data: JSON` and a
  # blank line, then the end marker.
  def sse_body(payloads, done: "data: [DONE]\n\n")
    payloads.map { |payload| "data: #{payload}\n\n" }.join + done.to_s
  end

  def event(choices:, **rest)
    JSON.generate({ id: "chatcmpl-conformance", object: "chat.completion.chunk", choices: choices }.merge(rest))
  end

  def delta_event(delta, finish_reason: nil, **rest)
    event(choices: [{ index: 0, delta: delta, finish_reason: finish_reason }], **rest)
  end

  # Items of all steps, in order.
  def items_of(steps)
    steps.flatten(1)
  end

  def text_of(steps)
    items_of(steps).grep(String).join
  end

  def text_pieces(steps)
    items_of(steps).grep(String)
  end

  def call_updates(steps)
    items_of(steps).grep(Hash)
  end

  # [id, name, parameters] of every completed call, in the order they completed.
  def completed_calls(steps)
    call_updates(steps).reject { |call| call[:partial] }.map { |call| call.values_at(:id, :name, :parameters) }
  end

  def partial_updates(steps)
    call_updates(steps).select { |call| call[:partial] }
  end

  # Updates of one call where nothing the caller can see changed since the
  # previous update of that call.
  def repeated_updates(steps)
    last = {}
    call_updates(steps).select do |update|
      repeated = last[update[:id]] == update
      last[update[:id]] = update
      repeated
    end
  end

  # Updates of a call in which a string value is not an extension of that
  # value in the call's previous update (the completed call included).
  def non_growing_updates(steps)
    last = {}
    call_updates(steps).reject do |update|
      grows = update[:parameters].all? { |key, value| extends?(last[[update[:id], key]], value) }
      update[:parameters].each { |key, value| last[[update[:id], key]] = value }
      grows
    end
  end

  def extends?(before, now)
    !(before.is_a?(String) && now.is_a?(String)) || now.start_with?(before)
  end

  # Not usage_of: SseFixtures, included in every group, has one of that
  # name, and whichever module is included last would win.
  def token_counts(processor)
    { prompt: processor.prompt_tokens, completion: processor.completion_tokens,
      cache_read: processor.cache_read_tokens, cache_write: processor.cache_write_tokens }
  end
end

RSpec.configure { |config| config.include ConformanceHelpers, :conformance }
