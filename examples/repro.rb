# frozen_string_literal: true

# The bug report, reproduced: a server streams several tool calls in ONE chunk
# (as Mistral does for parallel calls). Every call must come out, streamed or
# not, with and without partial_tool_calls.
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

exit(Repro.report ? 0 : 1) if $PROGRAM_NAME == __FILE__ || defined?(Rails::Command::RunnerCommand)
