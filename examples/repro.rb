# frozen_string_literal: true

# The bug report, reproduced: a server streams several tool calls in ONE chunk
# (as Mistral does for parallel calls). Every call must come out, streamed or
# not, with and without partial_tool_calls. Then the same for the Responses
# API: several calls added before either is done, their argument deltas
# interleaved (the stock Responses processor keeps one open call).
#
#   bin/repro                                   # standalone
#   bin/rails runner path/to/examples/repro.rb  # inside Discourse: the site's
#                                               # stock processor is shown too
#
# Exit status: 0 when the gem's processor returned every call, 1 otherwise.

begin
  require "discourse_ai_stream"
rescue LoadError
  require_relative "../lib/discourse_ai_stream"
end
require "json"

# Builds the chunks of the report and runs a processor class over them.
module Repro
  CASES = [[2, false], [2, true], [3, false], [3, true]].freeze

  module_function

  def tool_calls(count)
    (1..count).map do |i|
      { index: i - 1, id: "call_#{i}", type: "function",
        function: { name: "echo", arguments: JSON.generate(text: "call #{i}") } }
    end
  end

  def streamed_chunk(count)
    { id: "chatcmpl-repro", object: "chat.completion.chunk",
      choices: [{ index: 0, delta: { role: "assistant", tool_calls: tool_calls(count) },
                  finish_reason: "tool_calls" }] }
  end

  def message(count)
    { id: "chatcmpl-repro", object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: nil, tool_calls: tool_calls(count) },
                  finish_reason: "tool_calls" }] }
  end

  # The ids `klass` returns for the streamed chunk and for the non-streamed message.
  def run(klass, count, partial)
    processor = klass.new(partial_tool_calls: partial)
    streamed = [processor.process_streamed_message(streamed_chunk(count)), *processor.finish].flatten.compact
    control = klass.new(partial_tool_calls: partial).process_message(message(count))
    [ids(streamed), ids(control)]
  rescue StandardError => e
    [["raised #{e.class}: #{e.message}"], []]
  end

  def ids(items)
    items.reject { |item| item.is_a?(String) }.map(&:id).uniq
  end

  def line(label, count, ids, width: 14)
    returned = ids.count { |id| id.start_with?("call_") }
    "  #{"#{label}:".ljust(width)}#{returned} of #{count} -> #{ids.inspect}"
  end

  def stock_class
    return unless defined?(::DiscourseAi::Completions::OpenAiMessageProcessor)

    ::DiscourseAi::Completions::OpenAiMessageProcessor
  end

  def report(io = $stdout)
    io.puts "discourse_ai_stream #{DiscourseAiStream::VERSION}: tool calls streamed in one chunk"
    stock = stock_class
    io.puts "stock processor: #{stock ? stock.name : "not loaded (run under bin/rails runner to compare)"}"
    all_returned = CASES.map { |count, partial| report_case(io, stock, count, partial) }.all?
    all_returned = ResponsesRepro.report(io) && all_returned
    io.puts(all_returned ? "every call came out" : "CALLS WERE LOST")
    all_returned
  end

  def report_case(io, stock, count, partial)
    io.puts "\n#{count} calls in one chunk, partial_tool_calls: #{partial}"
    streamed, control = run(DiscourseAiStream::OpenAiMessageProcessor, count, partial)
    io.puts line("streamed", count, streamed), line("non-streamed", count, control)
    if stock
      stock_streamed, stock_control = run(stock, count, partial)
      io.puts line("stock streamed", count, stock_streamed, width: 20),
              line("stock non-streamed", count, stock_control, width: 20)
    end
    streamed.size == count && control.size == count
  end
end

# The Responses API: calls added before either is done, deltas interleaved,
# through process_streamed_message (parsed events), decode_chunk (the raw
# SSE with event: lines, one byte per read) and process_message.
module ResponsesRepro
  module_function

  def events(count)
    items = (1..count).map do |i|
      { id: "fc_#{i}", type: "function_call", status: "in_progress", arguments: "", call_id: "call_#{i}",
        name: "echo" }
    end
    added = items.each_with_index.map { |item, i| { type: "response.output_item.added", output_index: i, item: item } }
    pieces = items.map { |item| arguments(item) }
    deltas = (0...3).flat_map do |k|
      items.each_with_index.map do |item, i|
        { type: "response.function_call_arguments.delta", output_index: i, item_id: item[:id], delta: pieces[i][k] }
      end
    end
    added + deltas + done_events(items).reverse
  end

  # A call's arguments in three deltas.
  def arguments(item)
    ['{"text":', JSON.generate("#{item[:call_id]} text"), "}"]
  end

  def done_events(items)
    items.each_with_index.map do |item, i|
      { type: "response.output_item.done", output_index: i,
        item: item.merge(status: "completed", arguments: arguments(item).join) }
    end
  end

  def sse(count)
    events(count).map { |e| "event: #{e[:type]}\ndata: #{JSON.generate(e)}\n\n" }.join.b
  end

  def response(count)
    { id: "resp_repro", status: "completed",
      output: events(count).select { |e| e[:type] == "response.output_item.done" }.map { |e| e[:item] }.reverse }
  end

  def hashes(klass, count, partial)
    processor = klass.new(partial_tool_calls: partial)
    items = events(count).flat_map do |event|
      Array(processor.process_streamed_message(JSON.parse(JSON.generate(event), symbolize_names: true)))
    end
    checked(items + processor.finish)
  rescue StandardError => e
    ["raised #{e.class}"]
  end

  # The ids of the calls whose parameters are what the stream sent; a call
  # with other parameters shows them instead.
  def checked(items)
    calls = items.reject { |item| item.is_a?(String) }.uniq(&:object_id)
    calls.map { |c| c.parameters == { text: "#{c.id} text" } ? c.id : "wrong #{c.id}: #{c.parameters.inspect}" }
  end

  def raw(count, partial)
    processor = DiscourseAiStream::OpenAiResponsesMessageProcessor.new(partial_tool_calls: partial)
    items = sse(count).each_char.flat_map { |byte| processor.decode_chunk(byte) }
    checked(items + processor.finish)
  end

  def message(count, partial)
    processor = DiscourseAiStream::OpenAiResponsesMessageProcessor.new(partial_tool_calls: partial)
    checked(processor.process_message(JSON.parse(JSON.generate(response(count)), symbolize_names: true)))
  end

  def stock_class
    return unless defined?(::DiscourseAi::Completions::OpenAiResponsesMessageProcessor)

    ::DiscourseAi::Completions::OpenAiResponsesMessageProcessor
  end

  def report(io)
    stock = stock_class
    io.puts "\nResponses API: calls added before either is done, argument deltas interleaved"
    io.puts "stock Responses processor: #{stock ? stock.name : "not loaded"}"
    Repro::CASES.map do |count, partial|
      io.puts "\n#{count} calls, partial_tool_calls: #{partial}"
      results = { "events" => hashes(DiscourseAiStream::OpenAiResponsesMessageProcessor, count, partial),
                  "raw SSE" => raw(count, partial), "whole" => message(count, partial) }
      results.each { |label, ids| io.puts Repro.line("responses #{label}", count, ids, width: 22) }
      io.puts Repro.line("stock responses", count, hashes(stock, count, partial), width: 22) if stock
      results.values.all? { |ids| ids.size == count && ids.all? { |id| id.start_with?("call_") } }
    end.all?
  end
end

exit(Repro.report ? 0 : 1) if $PROGRAM_NAME == __FILE__ || defined?(Rails::Command::RunnerCommand)
