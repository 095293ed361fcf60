# frozen_string_literal: true

require_relative "../support/chunks"
require_relative "../support/discourse_stand_ins"
require_relative "../support/sse_fixtures"

# What install! has the chat processor hand out for the next request
# (docs/discourse.md#reasoning-models-in-a-tool-loop): where it replays it
# (the newest generation, an endpoint whose decode_chunk is the stock one,
# the replay switch on), with the thinking the endpoint asked for and the
# model the stream comes from; elsewhere Discourse's own items.
RSpec.describe "DiscourseAiStream::Discourse: the round trip on the read side", gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:deepseek) { File.binread(File.join(SseFixtures::FIXTURE_DIR, "recorded", "deepseek_v4_reasoning_content.sse")) }
  let(:model) { DiscourseStandIns::LlmModel.new(provider: "open_ai", name: "deepseek-v4-flash", id: 12) }

  def endpoint(klass = :OpenAi, llm = model) = DiscourseAi::Completions::Endpoints.const_get(klass).new(llm)

  def stream(target = endpoint, **options) = target.perform_stream([deepseek], **options)

  def calls(items)
    items.grep(DiscourseAi::Completions::ToolCall).map { |c| [c.id, c.name, c.parameters, c.provider_data] }
  end

  # What the stock processor of that generation returns for the stream.
  def stock_calls(generation, klass = :OpenAi, **options)
    load_discourse_stand_ins(generation: generation)
    calls(stream(endpoint(klass), **options))
  end

  context "with the newest generation, installed" do
    before { install_into(:newest) }

    it "gives the Thinking, in Discourse's class, before the call, both naming the model" do
      items = stream(output_thinking: true)
      expect(items.map(&:class)).to eq([DiscourseAi::Completions::Thinking, DiscourseAi::Completions::ToolCall])
      expect(items.first.provider_info).to eq(chat_completions: { fields: ["reasoning_content"],
                                                                  model: "12:deepseek-v4-flash" })
      expect(items.first.message).to start_with("The user asks about the weather")
      expect(items.last.provider_data[:chat_completions]).to match(turn: /\Aturn_das_/, model: "12:deepseek-v4-flash")
    end

    # Discourse's decode_chunk calls the processor once per event and hands
    # each call out once per read, where it first came: with partial calls,
    # a read that holds a partial update and the completion gave the call
    # before its reasoning, and the bot sent it back without.
    it "gives the Thinking before the call through Discourse's own decode_chunk, with partial calls too" do
      install_into(:newest, fast_decode: false)
      [false, true].each do |partial|
        items = stream(output_thinking: true, partial_tool_calls: partial)
        expect(items.map(&:class).uniq).to eq([DiscourseAi::Completions::Thinking, DiscourseAi::Completions::ToolCall])
        expect(items.first.message).to start_with("The user asks about the weather")
      end
    end

    # Reasoning, then call A (a partial update) in one read; call B's
    # update and completion and the finish in the next: B came first in the
    # second read, and its reasoning goes in front of it, as on the fast path.
    it "gives the Thinking before the first call of a read it led to, through Discourse's decode_chunk too" do
      chunk = ->(delta, finish = nil) { { choices: [{ index: 0, delta: delta, finish_reason: finish }] } }
      call = lambda { |index, args, id = nil|
        { index: index, id: id, function: { name: id && "f", arguments: args }.compact }
      }
      reads = [sse([chunk.call(reasoning_content: "think"), chunk.call(tool_calls: [call.call(0, '{"q":', "a")]),
                    chunk.call(tool_calls: [call.call(0, '"x"}')])], done: false),
               sse([chunk.call(tool_calls: [call.call(1, '{"u":', "b")]), chunk.call(tool_calls: [call.call(1, "1}")]),
                    chunk.call({}, "tool_calls")])]
      order = [true, false].map do |fast|
        install_into(:newest, fast_decode: fast)
        items = endpoint.perform_stream(reads, partial_tool_calls: true, output_thinking: true)
        items.map { |item| item.respond_to?(:parameters) ? [item.id, item.partial?] : item.message }
      end
      expect(order.first).to eq(order.last)
      expect(order.last.last(3)).to eq(["think", ["b", false], ["a", false]])
    end

    # Discourse's non-streamed path hands every item to its XML tool parser,
    # which takes Strings only.
    it "gives no Thinking where the endpoint reads its tools from the text (XML tools), as stock" do
      xml = endpoint.tap { |e| e.define_singleton_method(:xml_tools_enabled?) { true } }
      expect(stream(xml, output_thinking: true).map(&:class)).to eq([DiscourseAi::Completions::ToolCall])
      native = endpoint.tap { |e| e.define_singleton_method(:xml_tools_enabled?) { false } }
      expect(stream(native, output_thinking: true).first).to be_a(DiscourseAi::Completions::Thinking)
    end

    it "gives no Thinking to a caller that did not ask for it" do
      items = stream
      expect(items.map(&:class)).to eq([DiscourseAi::Completions::ToolCall])
      expect(items.first.provider_data[:chat_completions].keys).to eq(%i[turn model])
    end

    it "gives Discourse's own items with the replay switched off, at once and back" do
      stock = stock_calls(:newest, output_thinking: true)
      replay = true
      install_into(:newest, replay: -> { replay })
      replay = false
      expect(calls(stream(output_thinking: true))).to eq(stock)
      expect(stream(output_thinking: true).grep(DiscourseAi::Completions::Thinking)).to be_empty
      replay = true
      expect(stream(output_thinking: true).first).to be_a(DiscourseAi::Completions::Thinking)
      install_into(:newest, replay: false)
      expect(calls(stream(output_thinking: true))).to eq(stock)
    end

    it "leaves the vLLM endpoint, which reads reasoning itself and whose dialect replays it, as it was" do
      vllm = DiscourseStandIns::LlmModel.new(provider: "vllm", name: "deepseek", id: 3)
      items = stream(endpoint(:Vllm, vllm), output_thinking: true)
      expect(items.grep(DiscourseAi::Completions::Thinking)).to be_empty
      expect(items.last.provider_data.keys).to eq([:vllm])
    end

    it "counts a replay check that raises as off, with a warn line" do
      install_into(:newest, replay: -> { raise "no settings yet" })
      expect(stream(output_thinking: true).map(&:class)).to eq([DiscourseAi::Completions::ToolCall])
      expect(logger.warnings.join).to include("the replay check raised RuntimeError: no settings yet; replay off")
    end
  end

  %i[legacy current].each do |generation|
    it "gives the #{generation} generation, whose Prompt may not keep what is carried back, Discourse's own items" do
      stock = stock_calls(generation, output_thinking: true)
      install_into(generation)
      items = stream(output_thinking: true)
      expect(items.map(&:class)).to eq([DiscourseAi::Completions::ToolCall])
      expect(calls(items)).to eq(stock)
    end
  end
end
