# frozen_string_literal: true

require "json"

module Bench
  # The Responses API workloads: `event:` and `data:` lines with OpenAI's
  # envelope, the same texts and arguments as the chat workloads.
  module ResponsesWorkloads
    module_function

    def all
      [text(2_000),
       tools("responses_tools_4k", "Responses API: 3 interleaved calls, 4 KB args, 5-byte deltas", partial: false),
       tools("responses_tools_4k_partial", "the same, partial_tool_calls", partial: true)]
    end

    def event(body)
      "event: #{body[:type]}\ndata: #{JSON.generate(body)}\n\n"
    end

    def tail(output)
      usage = { input_tokens: 1200, input_tokens_details: { cached_tokens: 1024 }, output_tokens: 800,
                output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 2000 }
      event({ type: "response.completed", sequence_number: 0,
              response: { id: "resp_bench", object: "response", status: "completed", model: "gpt-4.1-2025-04-14",
                          output: output, usage: usage } })
    end

    # `count` output_text deltas, as Workloads.text(count) sends them.
    def text(count, seed: 1)
      rng = Random.new(seed)
      words = Workloads::WORDS
      item = { id: "msg_bench", type: "message", status: "in_progress", content: [], role: "assistant" }
      sse = +event({ type: "response.output_item.added", sequence_number: 0, output_index: 0, item: item })
      count.times do |n|
        delta = "#{Array.new(rng.rand(1..3)) { words[rng.rand(words.size)] }.join(" ")} "
        sse << event({ type: "response.output_text.delta", sequence_number: n + 1, item_id: "msg_bench",
                       output_index: 0, content_index: 0, delta: delta, logprobs: [] })
      end
      sse << tail([])
      Workloads.build("responses_text_#{count / 1000}k", "Responses API: #{count} text deltas", sse, false,
                      protocol: :responses)
    end

    # Three function calls of 4 KB arguments, all added first, their
    # 5-byte argument deltas interleaved, then each done item with the
    # whole arguments.
    def tools(name, description, partial:, calls: 3, size: 4096, step: 5)
      items = Array.new(calls) do |i|
        { id: "fc_bench#{i}", type: "function_call", status: "in_progress", arguments: "",
          call_id: "call_bench#{i}", name: "write_file" }
      end
      args = Array.new(calls) { |i| Workloads.arguments(size, seed: 100 + i) }
      sse = items.each_with_index.map do |item, i|
        event({ type: "response.output_item.added", sequence_number: i, output_index: i, item: item })
      end.join
      sse << interleaved(items, args.map { |a| Workloads.fragments(a, step) })
      sse << finished(items, args)
      Workloads.build(name, description, sse, partial, protocol: :responses)
    end

    # The done item of each call, then the completed response listing them.
    def finished(items, args)
      done = items.each_with_index.map { |item, i| item.merge(status: "completed", arguments: args[i]) }
      events = done.each_with_index.map do |item, i|
        event({ type: "response.output_item.done", output_index: i, item: item })
      end
      events.join + tail(done)
    end

    def interleaved(items, pieces)
      (0...pieces.map(&:size).max).flat_map do |k|
        pieces.each_with_index.filter_map do |list, i|
          next unless list[k]

          event({ type: "response.function_call_arguments.delta", sequence_number: k, item_id: items[i][:id],
                  output_index: i, delta: list[k] })
        end
      end.join
    end
  end
end
