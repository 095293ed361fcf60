# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"
require_relative "../support/responses_streams"

# The Responses API endpoint (Endpoints::OpenAiResponses) and OpenAi with
# enable_responses_api, with the stand-in stock processor and with the gem.
RSpec.describe "DiscourseAiStream::Discourse.install! and the Responses API", gc_stress: false do
  include_context "with the Discourse stand-ins"
  include ResponsesStreams

  let(:both_calls) do
    [["call_a", "search", { query: "ruby" }, { open_ai_responses: { id: "fc_a", call_id: "call_a" } }],
     ["call_b", "lookup", { id: 42 }, { open_ai_responses: { id: "fc_b", call_id: "call_b" } }]]
  end
  let(:cut_call) { [added(0, function_call("fc_c", "call_c", "search")), args_delta(0, "fc_c", '{"query":"ru')] }

  after { integration.logger = nil }

  def responses_endpoint
    DiscourseAi::Completions::Endpoints::OpenAiResponses.new(llm_model("open_ai_responses"))
  end

  def tool_calls(items)
    items.grep(DiscourseAi::Completions::ToolCall).reject(&:partial?).uniq(&:object_id)
         .map { |c| [c.id, c.name, c.parameters, c.provider_data] }
  end

  describe "the stand-in stock processor (its defects, as docs/responses-api.md lists them)" do
    before { load_discourse_stand_ins(generation: :current) }

    it "fails the request with NoMethodError on two calls added before either is done" do
      expect { responses_endpoint.perform_stream([sse(two_interleaved_calls)]) }.to raise_error(NoMethodError)
    end

    it "delivers a call cut before its done item with {} parameters, silently" do
      items = responses_endpoint.perform_stream([sse(cut_call)])
      expect(tool_calls(items).map { |c| c[2] }).to eq([{}])
    end

    it "raises NoMethodError on a usage without input_tokens" do
      expect { responses_endpoint.perform_stream([sse([completed({ output_tokens: 3 })])]) }
        .to raise_error(NoMethodError)
    end
  end

  DiscourseStandIns::GENERATIONS.each do |generation|
    context "with the #{generation} generation" do
      before { load_discourse_stand_ins(generation: generation) }

      [true, false].each do |fast|
        it "gets both interleaved calls out of OpenAiResponses intact (fast_decode: #{fast})" do
          integration.install!(fast_decode: fast)
          target = responses_endpoint
          log = AiApiAuditLog.new
          bytes = sse(two_interleaved_calls)
          reads = bytes.bytes.each_slice(13).map { |slice| slice.pack("C*") }
          items = target.perform_stream(reads, log: log)

          expect(tool_calls(items)).to eq(both_calls)
          expect(target.send(:processor)).to be_a(DiscourseAiStream::OpenAiResponsesMessageProcessor)
          expect([log.request_tokens, log.response_tokens, log.cache_read_tokens]).to eq([30, 12, 20])
          expect(target.instance_variable_defined?(:@decoder)).to be(!fast)
        end
      end

      it "swaps the processor OpenAi builds with enable_responses_api" do
        integration.install!
        target = DiscourseAi::Completions::Endpoints::OpenAi.new(llm_model("open_ai", enable_responses_api: true))
        expect(tool_calls(target.perform_stream([sse(two_interleaved_calls)]))).to eq(both_calls)
        expect(target.send(:processor)).to be_a(DiscourseAiStream::OpenAiResponsesMessageProcessor)
      end

      it "passes partial_tool_calls and output_thinking on, and builds Discourse's Thinking" do
        integration.install!
        target = responses_endpoint
        reasoning = { id: "rs_1", type: "reasoning", summary: [] }
        events = [added(0, reasoning),
                  { type: "response.reasoning_summary_text.delta", item_id: "rs_1", output_index: 0, delta: "Hm" },
                  done(0, reasoning), *two_interleaved_calls]
        partials = []
        items = target.perform_stream(sse(events).chars, partial_tool_calls: true, output_thinking: true) do |item|
          partials << item.partial? if item.is_a?(DiscourseAi::Completions::ToolCall)
        end
        expect(items.first(2).map(&:class)).to eq([DiscourseAi::Completions::Thinking] * 2)
        expect(items.first(2).map(&:message)).to eq(%w[Hm Hm])
        expect(partials).to include(true)
        expect(tool_calls(items)).to eq(both_calls)
        processor = target.send(:processor)
        expect([processor.partial_tool_calls?, processor.output_thinking?]).to eq([true, true])
      end

      context "with an older Thinking and a Responses processor that takes no output_thinking" do
        let(:reasoning_then_text) do
          message = { id: "msg_1", type: "message", status: "in_progress", content: [], role: "assistant" }
          reasoning = { id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "Hm" }] }
          [added(0, reasoning), done(0, reasoning.merge(encrypted_content: "ENC")), added(1, message),
           text_delta(1, "msg_1", "Hello"), done(1, message.merge(status: "completed")),
           completed({ input_tokens: 9, output_tokens: 3 })]
        end

        # An older Discourse: its Thinking has no provider_info, its
        # Responses processor takes partial_tool_calls alone.
        before do
          stub_const("DiscourseAi::Completions::Thinking", Class.new do
            attr_reader :message, :partial

            def initialize(message:, signature: nil, redacted: false, partial: false)
              @message = message
              @partial = partial
              @signature = signature
              @redacted = redacted
            end
          end)
          older = Class.new(DiscourseAi::Completions::OpenAiResponsesMessageProcessor) do
            define_method(:initialize) do |partial_tool_calls: false|
              @partial_tool_calls = partial_tool_calls
              @tool = nil
              @arguments = +""
            end
          end
          stub_const("DiscourseAi::Completions::OpenAiResponsesMessageProcessor", older)
        end

        it "returns no Thinking, as the stock processor returns none" do
          integration.install!
          target = DiscourseAi::Completions::Endpoints::OpenAi.new(llm_model("open_ai", enable_responses_api: true))
          expect(target.perform_stream([sse(reasoning_then_text)], output_thinking: true)).to eq(["Hello"])
          expect(target.send(:processor).output_thinking?).to be(false)
        end

        it "links no message id to such a Thinking, where it has nowhere to keep it" do
          processor = DiscourseAiStream::OpenAiResponsesMessageProcessor.new(
            output_thinking: true, thinking_class: DiscourseAi::Completions::Thinking
          )
          items = processor.decode_chunk(sse(reasoning_then_text))
          expect(items.map { |item| item.is_a?(String) ? item : item.message }).to eq(%w[Hm Hello])
        end
      end

      it "raises ToolArgumentsError for a cut call instead of running it with {}, and logs why" do
        integration.install!
        expect { responses_endpoint.perform_stream([sse(cut_call)]) }
          .to raise_error(DiscourseAiStream::ToolArgumentsError) { |e| expect(e.tool_id).to eq("call_c") }
        expect(logger.warnings.join("\n")).to include("truncated", "invalid_arguments")
      end

      it "reads a usage without input_tokens" do
        integration.install!
        target = responses_endpoint
        log = AiApiAuditLog.new
        expect(target.perform_stream([sse([text_delta(0, "m", "hi"), completed({ output_tokens: 3 })])], log: log))
          .to eq(["hi"])
        expect([log.request_tokens, log.response_tokens]).to eq([nil, 3])
      end

      it "delivers what a read produced before an in-band error, then raises it" do
        integration.install!
        error = { type: "error", code: "server_error", message: "overloaded" }
        expect { responses_endpoint.perform_stream([sse([text_delta(0, "m", "so far"), error])]) { |i| i } }
          .to raise_error(DiscourseAiStream::ProviderError, /overloaded/)
        expect(logger.warnings.join("\n")).to include("overloaded")
      end

      it "says which processors it replaces" do
        integration.install!
        expect(integration.replaced_processors).to eq(
          "DiscourseAi::Completions::OpenAiMessageProcessor" => DiscourseAiStream::OpenAiMessageProcessor,
          "DiscourseAi::Completions::OpenAiResponsesMessageProcessor" =>
            DiscourseAiStream::OpenAiResponsesMessageProcessor
        )
        expect(integration.patched_classes).to include(DiscourseAi::Completions::Endpoints::OpenAiResponses)
      end
    end
  end
end
