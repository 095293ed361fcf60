# frozen_string_literal: true

require "json"

module DiscourseAiStream
  # The bug report's streams, which bin/repro (examples/repro.rb) and the
  # check task run: a server streams several tool calls in ONE chunk, as
  # Mistral does for parallel calls; then the Responses API, several calls
  # added before either is done, their argument deltas interleaved (the
  # stock Responses processor keeps one open call). Calls are "call_N".
  module BugReport
    CASES = [[2, false], [2, true], [3, false], [3, true]].freeze

    module_function

    def tool_calls(count)
      (1..count).map do |i|
        { index: i - 1, id: "call_#{i}", type: "function",
          function: { name: "echo", arguments: JSON.generate(text: "call #{i}") } }
      end
    end

    def chunk(count)
      { id: "chatcmpl-repro", object: "chat.completion.chunk",
        choices: [{ index: 0, delta: { role: "assistant", tool_calls: tool_calls(count) },
                    finish_reason: "tool_calls" }] }
    end

    # The ids of the calls `klass` returns for the chunk, streamed, or what
    # it raised.
    def streamed(klass, count, partial)
      processor = klass.new(partial_tool_calls: partial)
      ids([processor.process_streamed_message(chunk(count)), *processor.finish].flatten.compact)
    rescue StandardError => e
      ["raised #{e.class}: #{e.message}"]
    end

    def ids(items) = items.reject { |item| item.is_a?(String) }.map(&:id).uniq

    # How many of `ids` are calls the stream sent.
    def returned(ids) = ids.count { |id| id.start_with?("call_") }

    # The Responses API's: events as the endpoints parse them.
    module Responses
      module_function

      def events(count)
        items = (1..count).map do |i|
          { id: "fc_#{i}", type: "function_call", status: "in_progress", arguments: "", call_id: "call_#{i}",
            name: "echo" }
        end
        added = items.map.with_index { |item, i| { type: "response.output_item.added", output_index: i, item: item } }
        pieces = items.map { |item| arguments(item) }
        deltas = (0...3).flat_map do |k|
          items.each_with_index.map do |item, i|
            { type: "response.function_call_arguments.delta", output_index: i, item_id: item[:id], delta: pieces[i][k] }
          end
        end
        added + deltas + done_events(items).reverse
      end

      # A call's arguments in three deltas.
      def arguments(item) = ['{"text":', JSON.generate("#{item[:call_id]} text"), "}"]

      def done_events(items)
        items.each_with_index.map do |item, i|
          { type: "response.output_item.done", output_index: i,
            item: item.merge(status: "completed", arguments: arguments(item).join) }
        end
      end

      # What `klass` returns for the events, streamed (see checked).
      def streamed(klass, count, partial)
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
    end
  end
end
