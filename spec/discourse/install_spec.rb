# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"

# Drives the stand-in endpoints the way Endpoints::Base does, with the raw
# Mistral chunk of the bug report.
RSpec.describe "DiscourseAiStream::Discourse.install!", gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:expected_calls) do
    [["bM0Xl0KSh", "get_weather", { city: "Paris" }],
     ["kgOYVL46d", "get_local_time", { timezone: "Europe/Paris" }]]
  end

  def endpoint(name, provider = name.downcase, **custom_params)
    DiscourseAi::Completions::Endpoints.const_get(name).new(llm_model(provider, **custom_params))
  end

  def patches_of(klass)
    klass.ancestors.take_while { |mod| !mod.equal?(klass) }.grep(DiscourseAiStream::Discourse::Patch)
  end

  describe "the stand-ins without the gem" do
    it "lose the second call of the chunk in the legacy generation (the bug)" do
      load_discourse_stand_ins(generation: :legacy)
      %w[OpenAi Mistral Vllm OpenRouter SambaNova].each do |name|
        items = endpoint(name).perform_stream([DiscourseStandIns::MISTRAL_SSE])
        expect(final_calls(items)).to eq([expected_calls.first]), name
      end
    end

    it "return both calls in the current generation, from Discourse's own processor" do
      load_discourse_stand_ins(generation: :current)
      mistral = endpoint("Mistral")
      expect(final_calls(mistral.perform_stream([DiscourseStandIns::MISTRAL_SSE]))).to eq(expected_calls)
      expect(mistral.send(:processor)).to be_an_instance_of(DiscourseAi::Completions::OpenAiMessageProcessor)
    end
  end

  DiscourseStandIns::GENERATIONS.each do |generation|
    context "with the #{generation} generation" do
      before { load_discourse_stand_ins(generation: generation) }

      %w[OpenAi Mistral Vllm OpenRouter SambaNova].each do |name|
        [true, false].each do |fast|
          it "gets both calls out of #{name} (fast_decode: #{fast})" do
            integration.install!(fast_decode: fast)
            target = endpoint(name)
            items = target.perform_stream([DiscourseStandIns::MISTRAL_SSE])

            expect(final_calls(items)).to eq(expected_calls)
            expect(items).to all(be_an_instance_of(DiscourseAi::Completions::ToolCall))
            expect(target.send(:processor)).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
            expect(target.send(:processor).usage_mode).to eq(generation == :legacy ? :as_sent : :net_of_cache)
          end
        end
      end

      it "gets both calls out of reads split anywhere, one byte at a time" do
        integration.install!
        %w[Mistral Vllm SambaNova].each do |name|
          reads = DiscourseStandIns::MISTRAL_SSE.each_char.to_a
          expect(final_calls(endpoint(name).perform_stream(reads))).to eq(expected_calls), name
        end
      end

      it "keeps Vllm's provider_data merge" do
        integration.install!
        items = endpoint("Vllm").perform_stream([DiscourseStandIns::MISTRAL_SSE])
        expect(items.map(&:provider_data))
          .to eq([{ vllm: { tool_batch_id: "cmpl-e5cc70bb28c444948073e77776eb30ef" } }] * 2)
      end

      it "returns both calls of a non-streamed response" do
        integration.install!
        tool_calls = [
          { id: "bM0Xl0KSh", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
          { id: "kgOYVL46d", type: "function",
            function: { name: "get_local_time", arguments: '{"timezone": "Europe/Paris"}' } }
        ]
        body = JSON.generate(choices: [{ message: { content: nil, tool_calls: tool_calls } }],
                             usage: { prompt_tokens: 172, completion_tokens: 23 })
        %w[Mistral Vllm].each do |name|
          expect(final_calls(endpoint(name).perform_request(body))).to eq(expected_calls), name
        end
      end

      it "passes partial_tool_calls on to the gem's processor" do
        integration.install!
        target = endpoint("Mistral")
        items = target.perform_stream([DiscourseStandIns::MISTRAL_SSE], partial_tool_calls: true)
        expect(target.send(:processor).partial_tool_calls?).to be(true)
        expect(final_calls(items)).to eq(expected_calls)
      end

      it "builds one gem processor per endpoint instance, however the endpoint memoizes" do
        integration.install!
        %w[Mistral OpenRouter].each do |name|
          first = endpoint(name)
          memoized = first.send(:processor)
          expect(first.send(:processor)).to be(memoized)
          expect(endpoint(name).send(:processor)).not_to be(memoized)
        end
      end

      it "keeps processor, decode_chunk and final_log_update private" do
        integration.install!
        mistral = endpoint("Mistral")
        expect { mistral.processor }.to raise_error(NoMethodError, /private/)
        expect { mistral.decode_chunk("") }.to raise_error(NoMethodError, /private/)
        expect(integration.generation).to eq(generation)
      end

      it "decodes the raw bytes in the processor with fast_decode, with the stock decode_chunk without" do
        integration.install!(fast_decode: true)
        fast = endpoint("Mistral")
        allow(fast.send(:processor)).to receive(:decode_chunk).and_call_original
        fast.perform_stream([DiscourseStandIns::MISTRAL_SSE])
        expect(fast.send(:processor)).to have_received(:decode_chunk).once
        expect(fast.instance_variable_get(:@decoder)).to be_nil

        integration.install!(fast_decode: false)
        slow = endpoint("Mistral")
        allow(slow.send(:processor)).to receive(:decode_chunk).and_call_original
        expect(final_calls(slow.perform_stream([DiscourseStandIns::MISTRAL_SSE]))).to eq(expected_calls)
        expect(slow.send(:processor)).not_to have_received(:decode_chunk)
        expect(slow.instance_variable_get(:@decoder)).to be_a(DiscourseAi::Completions::JsonStreamDecoder)
      end

      it "leaves decode_chunks that are not the stock one in place (Vllm, SambaNova)" do
        integration.install!(fast_decode: true)
        vllm = endpoint("Vllm")
        samba = endpoint("SambaNova")
        vllm.perform_stream([DiscourseStandIns::MISTRAL_SSE])
        samba.perform_stream([DiscourseStandIns::MISTRAL_SSE])
        expect(vllm.instance_variable_get(:@decoder)).to be_a(DiscourseAi::Completions::JsonStreamDecoder)
        expect(samba.instance_variable_get(:@json_decoder)).to be_a(DiscourseAi::Completions::JsonStreamDecoder)
      end

      it "swaps the Responses API processor too, where OpenAi builds it; other providers' pass through" do
        integration.install!
        responses = endpoint("OpenAi", "open_ai", enable_responses_api: true)
        events = %w[Hel lo].map { |text| "data: #{JSON.generate(type: "response.output_text.delta", delta: text)}\n\n" }
        expect(responses.perform_stream(events)).to eq(%w[Hel lo])
        expect(responses.send(:processor)).to be_an_instance_of(DiscourseAiStream::OpenAiResponsesMessageProcessor)

        anthropic = endpoint("Anthropic")
        expect(anthropic.perform_stream(["data: {\"delta\":{\"text\":\"hi\"}}\n\n"])).to eq(["hi"])
        expect(anthropic.send(:processor)).to be_an_instance_of(DiscourseAi::Completions::AnthropicMessageProcessor)
      end
    end
  end

  describe "an endpoint that reads @processor itself (decode_chunk_finish { @processor.finish })" do
    # The bug report's chunk without finish_reason and without [DONE]: the
    # calls are still open when the body ends, so they come out of finish.
    let(:open_calls_sse) do
      chunk = JSON.parse(DiscourseStandIns::MISTRAL_CHUNK)
      chunk["choices"][0]["finish_reason"] = nil
      "data: #{JSON.generate(chunk)}\n\n".b
    end

    DiscourseStandIns::GENERATIONS.each do |generation|
      [true, false].each do |fast|
        it "gets the calls out at finish (#{generation}, fast_decode: #{fast})" do
          install_into(generation, fast_decode: fast)
          target = endpoint("OlderOpenAi", "open_ai")
          items = target.perform_stream([open_calls_sse])

          expect(final_calls(items)).to eq(expected_calls)
          expect(target.instance_variable_get(:@processor)).to be(target.send(:processor))
          expect(target.instance_variable_get(:@processor)).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
        end
      end
    end
  end

  describe "patching" do
    before { load_discourse_stand_ins(generation: :legacy) }

    let(:endpoints) { DiscourseAi::Completions::Endpoints }

    it "patches the endpoint classes that define what it wraps, and reports them" do
      patched = integration.install!
      expect(patched).to contain_exactly(endpoints::OpenAi, endpoints::Vllm, endpoints::OpenRouter,
                                         endpoints::OlderOpenAi, endpoints::SambaNova, endpoints::Anthropic,
                                         endpoints::OpenAiResponses)
      expect(integration.patched_classes).to match_array(patched)
      expect(patches_of(endpoints::Mistral)).to eq([])
      expect(integration).to be_installed
    end

    it "patches endpoints defined outside the namespace too (another plugin's)" do
      stub_const("OtherPlugin::Endpoint", Class.new(endpoints::Base) do
        def provider_id = 99

        private

        def processor
          @processor ||= DiscourseAi::Completions::OpenAiMessageProcessor.new(partial_tool_calls: partial_tool_calls)
        end

        def decode_chunk(raw)
          @decoder ||= DiscourseAi::Completions::JsonStreamDecoder.new
          (@decoder << raw).flat_map { |json| Array(processor.process_streamed_message(json)) }
        end

        def decode_chunk_finish
          processor.finish
        end
      end)
      expect(integration.install!).to include(OtherPlugin::Endpoint)
      items = OtherPlugin::Endpoint.new(llm_model("other")).perform_stream([DiscourseStandIns::MISTRAL_SSE])
      expect(final_calls(items)).to eq(expected_calls)
    end

    it "is idempotent: installing again adds no second patch" do
      integration.install!
      expect(integration.install!).to eq([])
      expect(endpoints::OpenAi.ancestors.grep(DiscourseAiStream::Discourse::Patch).size).to eq(1)
      expect(patches_of(endpoints::Vllm).size).to eq(1)
      items = endpoints::Vllm.new(llm_model("vllm")).perform_stream([DiscourseStandIns::MISTRAL_SSE])
      expect(final_calls(items)).to eq(expected_calls)
    end

    it "survives a code reload: the new class objects are patched again" do
      integration.install!
      old_mistral = endpoints::Mistral
      load_discourse_stand_ins(generation: :legacy)
      reloaded = DiscourseAi::Completions::Endpoints::Mistral
      expect(reloaded).not_to be(old_mistral)
      expect(integration.patched_classes).to eq([])
      expect(final_calls(reloaded.new(llm_model("mistral")).perform_stream([DiscourseStandIns::MISTRAL_SSE])).size)
        .to eq(1)

      expect(integration.install!).not_to be_empty
      expect(final_calls(reloaded.new(llm_model("mistral")).perform_stream([DiscourseStandIns::MISTRAL_SSE])))
        .to eq(expected_calls)
      expect(patches_of(DiscourseAi::Completions::Endpoints::OpenAi).size).to eq(1)
    end

    it "gives the stock behaviour back after uninstall!, and takes it again on install!" do
      integration.install!
      integration.uninstall!
      expect(integration).not_to be_installed
      mistral = endpoints::Mistral.new(llm_model("mistral"))
      expect(final_calls(mistral.perform_stream([DiscourseStandIns::MISTRAL_SSE])).size).to eq(1)
      expect(mistral.send(:processor)).to be_an_instance_of(DiscourseAi::Completions::OpenAiMessageProcessor)

      integration.install!
      mistral = endpoints::Mistral.new(llm_model("mistral"))
      expect(final_calls(mistral.perform_stream([DiscourseStandIns::MISTRAL_SSE]))).to eq(expected_calls)
    end
  end

  describe "enabled: (a site setting)" do
    before { load_discourse_stand_ins(generation: :legacy) }

    def mistral_calls
      final_calls(endpoint("Mistral").perform_stream([DiscourseStandIns::MISTRAL_SSE])).size
    end

    # Mistral's chunk in two reads, the second starting inside its line
    # (only the decoder that read the first part can read it); the block
    # runs between them.
    def reads_switching
      sse = DiscourseStandIns::MISTRAL_SSE
      Enumerator.new do |y|
        y << sse[0, 100]
        yield
        y << sse[100..]
      end
    end

    it "hands out the stock processor while the callable says no, and the gem's again when it says yes" do
      enabled = true
      integration.install!(enabled: -> { enabled })
      expect(mistral_calls).to eq(2)
      enabled = false
      expect(integration).not_to be_installed
      expect(mistral_calls).to eq(1)
      stock = DiscourseAi::Completions::OpenAiMessageProcessor
      expect(endpoint("Mistral").send(:processor)).to be_an_instance_of(stock)
      enabled = true
      expect(mistral_calls).to eq(2)
    end

    it "decodes a response under way to its end with the gem's processor when the callable says no meanwhile" do
      enabled = true
      integration.install!(enabled: -> { enabled })
      reads = reads_switching { enabled = false }
      expect(final_calls(endpoint("Mistral").perform_stream(reads))).to eq(expected_calls)
      expect(mistral_calls).to eq(1), "the next response is the stock processor's"
    end

    it "decodes a response under way to its end with the stock processor when the callable says yes meanwhile" do
      enabled = false
      integration.install!(enabled: -> { enabled })
      stock = final_calls(endpoint("Mistral").perform_stream([DiscourseStandIns::MISTRAL_SSE]))
      reads = reads_switching { enabled = true }
      expect(final_calls(endpoint("Mistral").perform_stream(reads))).to eq(stock)
      expect(logger.warnings).to eq([])
      expect(mistral_calls).to eq(2), "the next response is the gem's"
    end

    it "falls back to the stock processors and says why when the callable raises" do
      integration.install!(enabled: -> { raise IOError, "settings unavailable" })
      expect(mistral_calls).to eq(1)
      expect(logger.warnings).to include(/the enabled check raised IOError: settings unavailable; stock processors/)
    end
  end

  describe "outside Discourse" do
    it "installs nothing and says so" do
      logger = stub_rails_logger
      expect(integration.install!).to eq([])
      expect(integration).not_to be_installed
      expect(logger.warnings).to include(/DiscourseAi::Completions::Endpoints is not defined/)
      expect(DiscourseAiStream.tool_call_class).to be(DiscourseAiStream::ToolCall)
    end
  end
end
