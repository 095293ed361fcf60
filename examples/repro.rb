# frozen_string_literal: true

# The bug report, reproduced (bin/repro): a server streams several tool calls
# in ONE chunk (as Mistral does for parallel calls). Every call must come out,
# streamed or not, with and without partial_tool_calls. Then the same for the
# Responses API: several calls added before either is done, their argument
# deltas interleaved. The streams are the gem's (DiscourseAiStream::BugReport);
# on a Discourse site, `rake discourse_ai_stream:check` runs them through the
# site's stock processors beside the gem's.
#
# Exit status: 0 when the gem's processor returned every call, 1 otherwise.

begin
  require "discourse_ai_stream"
rescue LoadError
  require_relative "../lib/discourse_ai_stream"
end

# Runs each case through the gem's processors (and a stock one when loaded)
# and prints what came out.
module Repro
  STREAMS = DiscourseAiStream::BugReport

  module_function

  def message(count)
    { id: "chatcmpl-repro", object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: nil, tool_calls: STREAMS.tool_calls(count) },
                  finish_reason: "tool_calls" }] }
  end

  # The ids `klass` returns for the streamed chunk and for the non-streamed message.
  def run(klass, count, partial)
    streamed = STREAMS.streamed(klass, count, partial)
    [streamed, STREAMS.ids(klass.new(partial_tool_calls: partial).process_message(message(count)))]
  rescue StandardError => e
    [streamed, ["raised #{e.class}: #{e.message}"]]
  end

  def line(label, count, ids, width: 14)
    "  #{"#{label}:".ljust(width)}#{STREAMS.returned(ids)} of #{count} -> #{ids.inspect}"
  end

  def report(io = $stdout)
    io.puts "discourse_ai_stream #{DiscourseAiStream::VERSION}: tool calls streamed in one chunk"
    stock = DiscourseAiStream::Discourse.lookup(DiscourseAiStream::Discourse::STOCK_PROCESSOR)
    io.puts "stock processor: #{stock ? stock.name : "not loaded (on a site: rake discourse_ai_stream:check)"}"
    all_returned = STREAMS::CASES.map { |count, partial| report_case(io, stock, count, partial) }.all?
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

# The Responses API: through process_streamed_message (parsed events),
# decode_chunk (the raw SSE with event: lines, one byte per read) and
# process_message.
module ResponsesRepro
  STREAMS = DiscourseAiStream::BugReport::Responses
  GEM = DiscourseAiStream::OpenAiResponsesMessageProcessor

  module_function

  def sse(count)
    STREAMS.events(count).map { |e| "event: #{e[:type]}\ndata: #{JSON.generate(e)}\n\n" }.join.b
  end

  def response(count)
    done = STREAMS.events(count).select { |e| e[:type] == "response.output_item.done" }
    { id: "resp_repro", status: "completed", output: done.map { |e| e[:item] }.reverse }
  end

  def raw(count, partial)
    processor = GEM.new(partial_tool_calls: partial)
    items = sse(count).each_char.flat_map { |byte| processor.decode_chunk(byte) }
    STREAMS.checked(items + processor.finish)
  end

  def message(count, partial)
    processor = GEM.new(partial_tool_calls: partial)
    STREAMS.checked(processor.process_message(JSON.parse(JSON.generate(response(count)), symbolize_names: true)))
  end

  def report(io)
    stock = DiscourseAiStream::Discourse.lookup(DiscourseAiStream::Discourse::STOCK_RESPONSES_PROCESSOR)
    io.puts "\nResponses API: calls added before either is done, argument deltas interleaved"
    io.puts "stock Responses processor: #{stock ? stock.name : "not loaded"}"
    DiscourseAiStream::BugReport::CASES.map do |count, partial|
      io.puts "\n#{count} calls, partial_tool_calls: #{partial}"
      results = { "events" => STREAMS.streamed(GEM, count, partial), "raw SSE" => raw(count, partial),
                  "whole" => message(count, partial) }
      results.each { |label, ids| io.puts Repro.line("responses #{label}", count, ids, width: 22) }
      io.puts Repro.line("stock responses", count, STREAMS.streamed(stock, count, partial), width: 22) if stock
      results.values.all? { |ids| ids.size == count && ids.all? { |id| id.start_with?("call_") } }
    end.all?
  end
end

exit(Repro.report ? 0 : 1) if $PROGRAM_NAME == __FILE__
