# frozen_string_literal: true

require "json"

# Builders for the chunks and streams the specs feed to processors: parsed
# chunks as Discourse passes them (symbol keys) and raw SSE bytes.
module ChunkHelpers
  module_function

  # A streamed chunk whose delta carries `tool_calls` (an Array of Hashes).
  def tool_chunk(tool_calls, finish: nil, **extra)
    { id: "chatcmpl-spec", object: "chat.completion.chunk",
      choices: [{ index: 0, delta: { tool_calls: tool_calls }, finish_reason: finish }] }.merge(extra)
  end

  def text_chunk(text, finish: nil)
    { choices: [{ index: 0, delta: { content: text }, finish_reason: finish }] }
  end

  def finish_chunk(reason = "tool_calls")
    { choices: [{ index: 0, delta: {}, finish_reason: reason }] }
  end

  def usage_chunk(prompt:, completion:, **details)
    { choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion, **details } }
  end

  # A tool call header (or a complete call when `arguments` is the whole JSON).
  def call(id, name, arguments = "", index: nil)
    { index: index, id: id, type: "function", function: { name: name, arguments: arguments } }.compact
  end

  # An arguments fragment for the call at `index`.
  def fragment(index, arguments)
    { index: index, function: { arguments: arguments } }
  end

  # A whole non-streamed response with these tool calls.
  def message(tool_calls, content: nil, usage: nil)
    { id: "chatcmpl-spec", object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: content, tool_calls: tool_calls },
                  finish_reason: "tool_calls" }], usage: usage }.compact
  end

  # SSE bytes for chunks (Hashes or JSON Strings), ending with [DONE] unless told not to.
  def sse(chunks, done: true, newline: "\n")
    lines = chunks.map { |c| "data: #{c.is_a?(String) ? c : JSON.generate(c)}#{newline}#{newline}" }
    lines << "data: [DONE]#{newline}#{newline}" if done
    lines.join.b
  end

  # JSON round trip, as Discourse parses events (symbol keys).
  def parsed(hash)
    JSON.parse(JSON.generate(hash), symbolize_names: true)
  end

  # Every item a processor returns for these chunks and its finish, flattened.
  def stream_items(processor, chunks)
    [*chunks.map { |c| processor.process_streamed_message(c) }, *processor.finish].flatten.compact
  end

  # Every item decode_chunk returns for these reads, then finish.
  def decoded_items(processor, reads)
    [*reads.flat_map { |r| processor.decode_chunk(r) }, *processor.finish]
  end

  def tool_calls_in(items)
    items.grep_v(String)
  end

  def ids_in(items)
    tool_calls_in(items).map(&:id)
  end

  # Splits bytes into `count` reads at positions chosen by `random`.
  def random_reads(bytes, random, count: 8)
    cuts = Array.new(count) { random.rand(bytes.bytesize + 1) }.sort
    ([0] + cuts + [bytes.bytesize]).each_cons(2).map { |a, b| bytes.byteslice(a, b - a) }
  end
end

RSpec.configure { |config| config.include ChunkHelpers }
