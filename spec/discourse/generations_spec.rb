# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"
require_relative "../support/responses_streams"

# install! into the three generations of Discourse: what it recognises, what
# it decides per stock processor (DiscourseAiStream::Discourse.status), and
# that it leaves a stock class that grew beyond the gem's in place, so the
# gem never makes its host worse than stock.
RSpec.describe "DiscourseAiStream::Discourse.install! and the Discourse generations", gc_stress: false do
  include_context "with the Discourse stand-ins"
  include ResponsesStreams

  let(:chat) { DiscourseAiStream::Discourse::STOCK_PROCESSOR }
  let(:responses) { DiscourseAiStream::Discourse::STOCK_RESPONSES_PROCESSOR }
  let(:replaced) { { replaced: true, missing: [] } }
  # A response cut by the output limit: one call whole, one cut, text kept.
  let(:length_sse) do
    chunks = [{ choices: [{ delta: { content: "Partial", tool_calls: [
      { index: 0, id: "call_a", function: { name: "search", arguments: '{"q":"a"}' } },
      { index: 1, id: "call_b", function: { name: "search", arguments: '{"q":"b' } }
    ] } }] }, { choices: [{ delta: {}, finish_reason: "length" }] }]
    "#{chunks.map { |chunk| "data: #{JSON.generate(chunk)}\n\n" }.join}data: [DONE]\n\n".b
  end

  def endpoint(name, provider = name.downcase)
    DiscourseAi::Completions::Endpoints.const_get(name).new(llm_model(provider))
  end

  def errors = logger.lines.select { |level, _| level == :error }.map(&:last)

  it "outside Discourse: no generation, and the processors hand out whole calls after the output limit" do
    expect(integration.generation).to be_nil
    expect(DiscourseAiStream::OpenAiMessageProcessor.new.output_limit).to eq(:drop_cut)
    expect(DiscourseAiStream::OpenAiResponsesMessageProcessor.new.output_limit).to eq(:drop_cut)
    expect(integration.status).to eq({})
  end

  { legacy: :keep, current: :keep, newest: :drop }.each do |generation, output_limit|
    context "with the #{generation} generation" do
      before { load_discourse_stand_ins(generation: generation) }

      it "is recognised, both processors are replaced, and the output limit follows the host" do
        expect(integration.generation).to eq(generation)
        expect(DiscourseAiStream::OpenAiMessageProcessor.new.output_limit).to eq(output_limit)
        integration.install!
        dialects = %w[ChatGpt Mistral OpenAiCompatible Vllm].to_h do |name|
          decision = if generation != :newest
                       { replaced: false, reason: "Discourse AI's #{generation} generation: reasoning is read on " \
                                                  "the newest only", missing: [] }
                     elsif name == "Vllm"
                       { replaced: false, reason: "replays reasoning itself (its own tool_call_msg)", missing: [] }
                     else
                       replaced
                     end
          ["DiscourseAi::Completions::Dialects::#{name}", decision]
        end
        expect(integration.status).to eq(chat => replaced, responses => replaced, **dialects)
        expect(endpoint("Mistral").send(:processor)).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
        expect(endpoint("Mistral").send(:processor).output_limit).to eq(output_limit)
        expect(errors).to eq([])
        integration.uninstall!
        expect(integration.status).to eq({})
      end

      it "leaves a stock class that grew a public method and an initialize keyword in place, and says why" do
        stock = DiscourseAi::Completions::OpenAiMessageProcessor
        stock.class_eval { def cited_sources = [] }
        stock.prepend(Module.new do
          def initialize(partial_tool_calls: false, strict_tools: false)
            @strict_tools = strict_tools
            super(partial_tool_calls: partial_tool_calls)
          end
        end)
        integration.install!

        missing = ["#cited_sources", "initialize(strict_tools:)"]
        expect(integration.status[chat]).to include(replaced: false, missing: missing)
        expect(integration.status[responses]).to eq(replaced)
        expect(errors).to contain_exactly(a_string_including(DiscourseAiStream::VERSION, chat, *missing))
        # The rest of Discourse goes on: the endpoint runs its stock processor.
        mistral = endpoint("Mistral")
        stock_calls = final_calls(mistral.perform_stream([DiscourseStandIns::MISTRAL_SSE]))
        expect(mistral.send(:processor)).to be_an_instance_of(stock)
        expect(stock_calls.map(&:first)).to eq(DiscourseStandIns::MISTRAL_IDS.first(generation == :legacy ? 1 : 2))
        expect(endpoint("OpenAiResponses", "open_ai_responses").send(:processor))
          .to be_a(DiscourseAiStream::OpenAiResponsesMessageProcessor)

        # Decided again on every install!: after a code reload, the stock
        # class is what the gem can stand in for again.
        load_discourse_stand_ins(generation: generation)
        integration.install!
        expect(integration.status[chat]).to eq(replaced)
        expect(endpoint("Mistral").send(:processor)).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
      end
    end
  end

  context "with the newest generation" do
    before { load_discourse_stand_ins(generation: :newest) }

    it "ignores the stock Responses processor's own tracker callbacks, and the gem lacks nothing else" do
      stock = DiscourseAi::Completions::OpenAiResponsesMessageProcessor
      expect(stock.public_method_defined?(:notify_progress)).to be(true)
      integration.install!
      expect(integration.status[responses]).to eq(replaced)
    end

    it "hands out no call after a length stop, as the stock processor, and stop_reason reads it" do
      stock = endpoint("OpenAi", "groq")
      stock_items = stock.perform_stream([length_sse])
      stock_reason = stock.send(:processor).stop_reason
      integration.install!
      groq = endpoint("OpenAi", "groq")
      items = groq.perform_stream([length_sse])

      expect(items).to eq(stock_items).and eq(["Partial"])
      expect(groq.send(:processor).stop_reason).to eq(stock_reason).and eq("length")
      expect(logger.warnings).to include(a_string_including("dropped_call", "call_a"))
    end

    it "skips an incomplete function_call item and reads the stop reason of the Responses API" do
      integration.install!
      target = endpoint("OpenAiResponses", "open_ai_responses")
      call = function_call("fc_a", "call_a", "search", '{"query":')
      incomplete = { type: "response.incomplete", response: { incomplete_details: { reason: "max_output_tokens" } } }
      items = target.perform_stream([sse([added(0, call), done(0, call.merge(status: "incomplete")), incomplete])])
      expect(items).to eq([])
      expect(target.send(:processor).stop_reason).to eq("max_output_tokens")
    end
  end
end
