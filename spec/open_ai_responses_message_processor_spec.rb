# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/responses_streams"

RSpec.describe DiscourseAiStream::OpenAiResponsesMessageProcessor do
  include ResponsesStreams

  let(:thinking) { DiscourseAiStream::Thinking }

  def processor(**options)
    described_class.new(**options)
  end

  # Runs the stream both ways and checks they agree; returns the raw items.
  def both_ways(events, step: 17, **options)
    raw_processor = processor(**options)
    raw = run_raw(raw_processor, events, step: step)
    hashes = run_hashes(processor(**options), events)
    expect(final_calls(raw)).to eq(final_calls(hashes))
    [raw, raw_processor]
  end

  describe "what Discourse's own processor does" do
    it "streams text deltas as Strings and reads usage net of cached input" do
      item = { id: "msg_1", type: "message", status: "in_progress", content: [], role: "assistant" }
      events = [
        { type: "response.created", response: { id: "resp_1", status: "in_progress", usage: nil } },
        added(0, item),
        { type: "response.content_part.added", item_id: "msg_1", output_index: 0, content_index: 0,
          part: { type: "output_text", text: "" } },
        text_delta(0, "msg_1", "Good"), text_delta(0, "msg_1", " "), text_delta(0, "msg_1", "day"),
        { type: "response.output_text.done", item_id: "msg_1", output_index: 0, content_index: 0, text: "Good day" },
        done(0, item.merge(status: "completed", content: [{ type: "output_text", text: "Good day" }])),
        completed({ input_tokens: 40, input_tokens_details: { cached_tokens: 8 }, output_tokens: 11 })
      ]
      hashes = processor
      expect(run_hashes(hashes, events)).to eq(["Good", " ", "day"])
      expect([hashes.prompt_tokens, hashes.completion_tokens, hashes.cache_read_tokens]).to eq([32, 11, 8])
      raw = processor
      expect(run_raw(raw, events, step: 1).join).to eq("Good day")
      expect([raw.prompt_tokens, raw.completion_tokens, raw.cache_read_tokens]).to eq([32, 11, 8])
      expect(raw.anomalies).to eq([])
    end

    it "streams a tool call as one ToolCall with the item's ids in provider_data" do
      call = function_call("fc_7", "call_7", "echo")
      events = [added(0, call), args_delta(0, "fc_7", '{"'), args_delta(0, "fc_7", 'text":"'),
                args_delta(0, "fc_7", 'hi"}'),
                { type: "response.function_call_arguments.done", item_id: "fc_7", output_index: 0,
                  arguments: '{"text":"hi"}' },
                done(0, call.merge(status: "completed", arguments: '{"text":"hi"}')),
                completed({ input_tokens: 71, output_tokens: 6 })]
      items, = both_ways(events, partial_tool_calls: true)
      expect(items.uniq(&:object_id).size).to eq(1)
      tool = items.first
      expect(tool).to be_a(DiscourseAiStream::ToolCall)
      expect([tool.id, tool.name, tool.parameters, tool.partial?]).to eq(["call_7", "echo", { text: "hi" }, false])
      expect(tool.provider_data).to eq(open_ai_responses: { id: "fc_7", call_id: "call_7" })
    end

    it "gives reasoning summaries as partial Thinking, then a whole one that learns the next message id" do
      reasoning = { id: "rs_1", type: "reasoning", encrypted_content: "SECRET", summary: [] }
      message = { id: "msg_2", type: "message", status: "in_progress", content: [], role: "assistant" }
      events = [
        added(0, reasoning),
        { type: "response.reasoning_summary_part.added", item_id: "rs_1", output_index: 0, summary_index: 0 },
        { type: "response.reasoning_summary_text.delta", item_id: "rs_1", output_index: 0, delta: "Weigh" },
        { type: "response.reasoning_summary_text.delta", item_id: "rs_1", output_index: 0, delta: "ing" },
        done(0, reasoning.merge(summary: [{ type: "summary_text", text: "Weighing" }])),
        added(1, message), text_delta(1, "msg_2", "answer"),
        done(1, message.merge(status: "completed", content: [{ type: "output_text", text: "answer" }])),
        completed({ input_tokens: 26, output_tokens: 7, input_tokens_details: { cached_tokens: 0 } })
      ]
      [->(p) { run_hashes(p, events) }, ->(p) { run_raw(p, events, step: 5) }].each do |run|
        items = run.call(processor(output_thinking: true))
        expect(items[0]).to eq(thinking.new(message: "Weigh", partial: true))
        expect(items[1]).to eq(thinking.new(message: "ing", partial: true))
        info = { open_ai_responses: { reasoning_id: "rs_1", encrypted_content: "SECRET", next_message_id: "msg_2" } }
        expect(items[2]).to eq(thinking.new(message: "Weighing", partial: false, provider_info: info))
        expect(items[3..]).to eq(["answer"])
      end
      expect(run_hashes(processor, events)).to eq(["answer"])
    end

    it "reads a whole response: reasoning, calls and text in order" do
      response = {
        id: "resp_9", status: "completed",
        output: [
          { id: "rs_9", type: "reasoning", summary: [{ type: "summary_text", text: "one" },
                                                     { type: "summary_text", text: "two" }] },
          { id: "fc_9", type: "function_call", status: "completed", arguments: '{"string":"sam"}',
            call_id: "call_9", name: "echo" },
          { id: "msg_9", type: "message", content: [{ type: "output_text", text: "done" },
                                                    { type: "refusal", refusal: "no" }] }
        ],
        usage: { input_tokens: 73, input_tokens_details: { cached_tokens: 0 }, output_tokens: 6 }
      }
      p = processor(output_thinking: true)
      items = p.process_message(JSON.parse(JSON.generate(response), symbolize_names: true))
      expect(items[0].message).to eq("one\n\ntwo")
      expect(items[0].provider_info).to eq(open_ai_responses: { reasoning_id: "rs_9", next_message_id: "msg_9" })
      expect([items[1].id, items[1].name, items[1].parameters]).to eq(["call_9", "echo", { string: "sam" }])
      expect(items[1].provider_data).to eq(open_ai_responses: { id: "fc_9", call_id: "call_9" })
      expect(items[2]).to eq("done")
      expect([p.prompt_tokens, p.completion_tokens]).to eq([73, 6])
    end

    it "separates uncached, cache-read and cache-write input tokens" do
      p = processor
      p.process_message(output: [], usage: { input_tokens: 2_006, output_tokens: 300,
                                             input_tokens_details: { cached_tokens: 1_920, cache_write_tokens: 64 } })
      expect([p.prompt_tokens, p.completion_tokens, p.cache_read_tokens, p.cache_write_tokens])
        .to eq([22, 300, 1_920, 64])
    end
  end

  describe "the defects of the stock processor, fixed" do
    it "keeps two calls added before either is done apart, with interleaved deltas" do
      [false, true].each do |partial|
        [1, 9, 4096].each do |step|
          items, p = both_ways(two_interleaved_calls, step: step, partial_tool_calls: partial)
          expect(final_calls(items)).to contain_exactly(
            ["call_a", "search", { query: "ruby" }, { open_ai_responses: { id: "fc_a", call_id: "call_a" } }],
            ["call_b", "lookup", { id: 42 }, { open_ai_responses: { id: "fc_b", call_id: "call_b" } }]
          )
          expect(p.anomalies).to eq([])
          expect([p.prompt_tokens, p.completion_tokens, p.cache_read_tokens]).to eq([30, 12, 20])
        end
      end
    end

    it "raises ToolArgumentsError for a call cut before its done item (never {} parameters)" do
      events = [added(0, function_call("fc_c", "call_c", "search")), args_delta(0, "fc_c", '{"query":"ru')]
      [->(p) { run_raw(p, events, step: 3) }, ->(p) { run_hashes(p, events) }].each do |run|
        p = processor
        expect { run.call(p) }.to raise_error(DiscourseAiStream::ToolArgumentsError) { |e|
          expect([e.tool_id, e.tool_name, e.raw_arguments]).to eq(["call_c", "search", '{"query":"ru'])
        }
        expect(p.anomalies.map { |a| a[:kind] }).to include(:truncated, :invalid_arguments)
      end
    end

    it "delivers a cut call whose arguments are whole, and says the stream was cut" do
      events = [added(0, function_call("fc_d", "call_d", "search")), args_delta(0, "fc_d", '{"query":"ruby"}'),
                { type: "response.incomplete",
                  response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } }]
      items, p = both_ways(events)
      expect(final_calls(items).map { |c| c[0..2] }).to eq([["call_d", "search", { query: "ruby" }]])
      expect(p.anomalies.map { |a| a[:kind] }).to eq(%i[incomplete_response truncated])
      expect(p.anomalies.first[:message]).to include("max_output_tokens")
    end

    it "reads a usage without input_tokens instead of raising" do
      items, p = both_ways([text_delta(0, "m", "hi"), completed({ output_tokens: 3 })])
      expect(items).to eq(["hi"])
      expect([p.prompt_tokens, p.completion_tokens]).to eq([nil, 3])
    end

    it "lets the last usage win" do
      events = [{ type: "response.in_progress", response: { usage: { input_tokens: 5, output_tokens: 1 } } },
                completed({ input_tokens: 90, output_tokens: 40, input_tokens_details: { cached_tokens: 10 } })]
      _, p = both_ways(events)
      expect([p.prompt_tokens, p.completion_tokens, p.cache_read_tokens]).to eq([80, 40, 10])
    end
  end

  describe "what the stream says about itself" do
    it "lets the done item's whole arguments win over different deltas, and reports it" do
      call = function_call("fc_e", "call_e", "search")
      events = [added(0, call), args_delta(0, "fc_e", '{"query":"rub"}'),
                done(0, call.merge(arguments: '{"query":"ruby"}'))]
      [false, true].each do |partial|
        items, p = both_ways(events, partial_tool_calls: partial)
        expect(final_calls(items).map { |c| c[2] }).to eq([{ query: "ruby" }])
        expect(p.anomalies.map { |a| a[:kind] }).to eq([:arguments_mismatch])
      end
    end

    it "hands out text a server sends only whole, once, and what deltas left out, reported (rule 80)" do
      message = { id: "msg_1", type: "message", role: "assistant", content: [] }
      whole = message.merge(content: [{ type: "output_text", text: "Hello there" }])
      text_done = { type: "response.output_text.done", output_index: 0, item_id: "msg_1", content_index: 0,
                    text: "Hello there" }
      only_whole = [added(0, message), text_done, done(0, whole), completed({}, output: [whole])]
      cut_short = [added(0, message), text_delta(0, "msg_1", "Hello"), done(0, whole), completed({}, output: [whole])]
      [[only_whole, []], [cut_short, [:text_completed]]].each do |events, kinds|
        raw, p = both_ways(events)
        hashes = run_hashes(q = processor, events)
        expect([raw.grep(String).join, hashes.grep(String).join]).to eq(["Hello there"] * 2)
        expect([p, q].map { |r| r.anomalies.map { |a| a[:kind] } }).to eq([kinds] * 2)
      end
    end

    it "reports a refusal whole, once, on both paths, and hands none out (rule 81)" do
      message = { id: "msg_1", type: "message", role: "assistant", content: [] }
      refused = message.merge(content: [{ type: "refusal", refusal: "I can't help." }])
      delta = ->(d) { { type: "response.refusal.delta", item_id: "msg_1", output_index: 0, delta: d } }
      events = [added(0, message), delta["I can't "], delta["help."], done(0, refused),
                completed({}, output: [refused])]
      raw, p = both_ways(events)
      hashes = run_hashes(q = processor, events)
      expect(raw + hashes).to eq([])
      reports = [p, q].map { |r| r.anomalies.map { |a| a.values_at(:kind, :excerpt) } }
      expect(reports).to eq([[[:refusal, "I can't help."]]] * 2)
    end

    it "raises an in-band error event with the provider's message, after what came before it" do
      error = { type: "error", code: "rate_limit_exceeded", message: "Rate limit reached", param: nil }
      p = processor
      expect { p.decode_chunk(sse([text_delta(0, "m", "partial "), error])) }
        .to raise_error(DiscourseAiStream::ProviderError, /Rate limit reached/) { |e|
          expect(e.items).to eq(["partial "])
        }
      expect { processor.process_streamed_message(error) }.to raise_error(DiscourseAiStream::ProviderError)
    end

    it "raises a failed response with its error message" do
      failed = { type: "response.failed",
                 response: { status: "failed", error: { code: "server_error", message: "The model crashed" } } }
      expect { processor.decode_chunk(sse([failed])) }
        .to raise_error(DiscourseAiStream::ProviderError, /The model crashed/)
    end

    it "updates one ToolCall in place with partial_tool_calls" do
      call = function_call("fc_f", "call_f", "search")
      p = processor(partial_tool_calls: true)
      seen = []
      [added(0, call), args_delta(0, "fc_f", '{"query":"ru'), args_delta(0, "fc_f", 'by","n":2}')].each do |e|
        item = p.process_streamed_message(e)
        seen << [item, item&.partial?, item && Marshal.load(Marshal.dump(item.parameters))]
      end
      done_item = p.process_streamed_message(done(0, call.merge(arguments: '{"query":"ruby","n":2}')))
      expect(seen[0]).to eq([nil, nil, nil])
      expect(seen[1][1..]).to eq([true, { query: "ru" }])
      expect(seen[2][1..]).to eq([true, { query: "ruby", n: 2 }])
      expect(seen[1][0]).to equal(seen[2][0])
      expect(done_item).to equal(seen[1][0])
      expect([done_item.partial?, done_item.parameters]).to eq([false, { query: "ruby", n: 2 }])
    end

    # Rule 62: a call_id first seen in the done item replaces the generated
    # id, also after partial updates of an object that has the old one.
    it "hands out a call whose call_id came only with its done item under that id, with partial_tool_calls" do
      call = { id: "fc_f", type: "function_call", status: "in_progress", arguments: "", name: "search" }
      p = processor(partial_tool_calls: true)
      partial = [added(0, call), args_delta(0, "fc_f", '{"q":1}')].filter_map { |e| p.process_streamed_message(e) }
      expect(partial.map(&:id)).to all(start_with("call_das_"))
      done_item = p.process_streamed_message(done(0, call.merge(arguments: '{"q":1}', call_id: "call_late")))
      expect([done_item.id, done_item.partial?, done_item.parameters]).to eq(["call_late", false, { q: 1 }])
      expect(p.anomalies.map { |a| a[:kind] }).to eq(%i[generated_id id_changed])
    end

    it "reports an arguments delta that matches no item" do
      _, p = both_ways([args_delta(5, "fc_nobody", '{"x":1}')])
      expect(p.anomalies.map { |a| a[:kind] }).to eq([:orphan_fragment])
    end

    it "raises ToolCallError, with the other items, when the ToolCall class refuses a call" do
      refusing = Class.new(DiscourseAiStream::ToolCall) do
        def initialize(**kwargs)
          raise ArgumentError, "no" if kwargs[:name] == "lookup"

          super
        end
      end
      p = processor(tool_call_class: refusing)
      expect { run_hashes(p, two_interleaved_calls) }.to raise_error(DiscourseAiStream::ToolCallError) { |e|
        expect(e.tool_id).to eq("call_b")
      }
    end

    it "uses the Thinking class it is given, and refuses copies" do
      own = Struct.new(:message, :partial, :provider_info, keyword_init: true)
      p = processor(output_thinking: true, thinking_class: own)
      item = p.process_streamed_message({ type: "response.reasoning_summary_text.delta", item_id: "rs", delta: "x" })
      expect(item).to eq(own.new(message: "x", partial: true))
      expect { p.dup }.to raise_error(TypeError)
    end

    it "builds a Thinking class with the keywords it takes (older Discourse's has no provider_info)" do
      older = Struct.new(:message, :partial) do
        def initialize(message:, partial: false) = super(message, partial)
      end
      p = processor(output_thinking: true, thinking_class: older)
      item = p.process_message({ output: [{ type: "web_search_call", action: { type: "open_page", url: "u" } }] })
      expect(item).to eq([older.new(message: "Web fetch: u")])
    end

    it "starts afresh after finish" do
      p = processor
      run_raw(p, two_interleaved_calls)
      items = run_raw(p, two_interleaved_calls)
      expect(final_calls(items).size).to eq(2)
    end
  end
end
