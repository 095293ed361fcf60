# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"

# The way back of the reasoning round trip (Discourse::Replay), on prompts
# built by hand with the data the gem's processor hands out: what the
# ChatGpt dialect family writes into the request, and that a prompt without
# that data, or with another model's, translates to exactly what the
# stand-in dialects give without the gem.
RSpec.describe "DiscourseAiStream::Discourse reasoning replay", gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:completions) { DiscourseAi::Completions }
  let(:deepseek) { model("open_ai", url: "https://api.deepseek.com/chat/completions") }
  let(:me) { integration.model_identity(deepseek) }
  let(:weather) { { name: "weather", description: "The weather", parameters: { type: "object" } } }

  before { load_discourse_stand_ins(generation: :newest) }

  def model(provider, id: 7, name: "reasoner", url: nil, **params)
    DiscourseStandIns::LlmModel.new(id: id, provider: provider, name: name, url: url,
                                    custom_params: params.transform_keys(&:to_s))
  end

  def translate(prompt, llm) = completions::Dialects::Dialect.dialect_for(llm).new(prompt, llm).translate

  # The stand-ins' translation, then the same with the gem installed.
  def stock_and_gem(prompt, llm, **options)
    stock = translate(prompt, llm)
    integration.install!(**options)
    [stock, translate(prompt, llm)]
  end

  def new_prompt(skip_trim: true)
    completions::Prompt.new("You are a bot.", tools: [weather]).tap do |prompt|
      prompt.skip_trim = skip_trim
      prompt.push(type: :user, content: "Weather in Paris and London?", id: "sam")
    end
  end

  # provider_data and thinking_provider_info as the gem's processor makes them.
  def data(turn, model: me, **extra) = { chat_completions: { turn: turn, model: model, **extra } }

  def info(fields = ["reasoning_content"], model: me, **extra)
    { chat_completions: { fields: fields, model: model, **extra } }
  end

  def signature(value) = { google: { thought_signature: value } }

  # A call and its result, as the AI bot pushes them.
  def called(prompt, id, city, provider_data: nil, **thinking)
    content = { arguments: { city: city } }.to_json
    prompt.push(type: :tool_call, id: id, name: "weather", content: content, provider_data: provider_data, **thinking)
    prompt.push(type: :tool, id: id, name: "weather", content: '{"celsius":18}', provider_data: provider_data)
  end

  def assistant_calls(messages) = messages.select { |message| message[:role] == "assistant" && message[:tool_calls] }

  # The one assistant message with calls.
  def calling(messages)
    found = assistant_calls(messages)
    expect(found.size).to eq(1)
    found.first
  end

  describe "a prompt without the gem's data" do
    # Everything the dialects read, but nothing of the gem's (or another
    # model's data): thinking of another provider, vLLM's batch, names.
    def busy_prompt(other: nil)
      new_prompt(skip_trim: false).tap do |prompt|
        prompt.push(type: :model, content: "Let me look.", thinking: "hmm",
                    thinking_provider_info: { anthropic: { signature: "sig" } })
        prompt.push(type: :user, content: "Go on.", id: "sam")
        called(prompt, "call_a", "Paris", provider_data: { vllm: { tool_batch_id: "b1" } }, thinking: "first",
                                          thinking_provider_info: other && info(model: other))
        batch = other ? data("t1", model: other) : { vllm: { tool_batch_id: "b1" } }
        called(prompt, "call_b", "London", provider_data: batch)
        prompt.push(type: :model, content: "Paris 18, London 14.")
        prompt.push(type: :user, content: "   ")
      end
    end

    { "ChatGpt" => "open_ai", "ChatGpt (OpenRouter)" => "open_router", "Mistral" => "mistral",
      "OpenAiCompatible" => "groq", "Vllm" => "vllm" }.each do |dialect, provider|
      it "translates to the stock request, the same objects, for #{dialect}" do
        llm = model(provider)
        stock, ours = stock_and_gem(busy_prompt, llm)
        expect(ours).to eq(stock)
        expect(JSON.generate(ours)).to eq(JSON.generate(stock))
        expect(assistant_calls(ours).size).to eq(provider == "vllm" ? 1 : 2)
      end

      it "translates another model's data to the stock request for #{dialect}: it is never sent" do
        llm = model(provider)
        other = integration.model_identity(model(provider, id: 8, name: "primary"))
        stock, ours = stock_and_gem(busy_prompt(other: other), llm)
        expect(JSON.generate(ours)).to eq(JSON.generate(stock))
        expect(JSON.generate(ours)).not_to include("extra_content", "reasoning_details")
      end
    end

    it "leaves tool calls written into the text (no native tools) as they are" do
      llm = model("open_ai", disable_native_tools: true)
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1", extra_content: signature("sig")),
                                        thinking: "why", thinking_provider_info: info)
      stock, ours = stock_and_gem(prompt, llm)
      expect(ours).to eq(stock)
      expect(ours[2][:content]).to start_with("<function_calls>")
    end
  end

  describe "a prompt with the gem's data, for the dialect's own model" do
    it "puts the reasoning under the field the server used on the call's assistant message" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "Paris", thinking_provider_info: info)
      stock, ours = stock_and_gem(prompt, deepseek)

      expect(ours.size).to eq(stock.size)
      expect(ours[2]).to eq(stock[2].merge(reasoning_content: "Paris"))
      expect(ours - [ours[2]]).to eq(stock - [stock[2]])
    end

    it "sends an empty reasoning as \"\" when the server used the field with nothing in it" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking_provider_info: info)
      expect(assistant_calls(stock_and_gem(prompt, deepseek).last).first).to include(reasoning_content: "")
    end

    it "sends reasoning and reasoning_details as streamed (OpenRouter)" do
      details = [{ type: "reasoning.text", text: "Think.", format: "google-gemini-v1", index: 0 },
                 { type: "reasoning.encrypted", data: "ENC", id: "call_a", format: "google-gemini-v1", index: 0 }]
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "Think.",
                                        thinking_provider_info: info(["reasoning"], reasoning_details: details))
      message = assistant_calls(stock_and_gem(prompt, model("open_router")).last).first
      expect(message).to include(reasoning: "Think.", reasoning_details: details)
      expect(message).not_to have_key(:reasoning_content)
    end

    it "writes each field the server used, and only the fields it knows" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "Both.",
                                        thinking_provider_info: info(%w[reasoning_content reasoning content]))
      message = assistant_calls(stock_and_gem(prompt, deepseek).last).first
      expect(message).to include(reasoning_content: "Both.", reasoning: "Both.", content: nil)
    end

    it "puts the calls of one response into one assistant message, extra_content on the call that had it" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1", extra_content: signature("SIG")))
      called(prompt, "call_b", "London", provider_data: data("t1"))
      stock, ours = stock_and_gem(prompt, deepseek)

      expect(stock.map { |message| message[:role] }).to eq(%w[system user assistant tool assistant tool])
      expect(ours.map { |message| message[:role] }).to eq(%w[system user assistant tool tool])
      calls = ours[2][:tool_calls]
      expect(calls.map { |call| call[:id] }).to eq(%w[call_a call_b])
      expect(calls.first).to eq(stock[2][:tool_calls].first.merge(extra_content: signature("SIG")))
      expect(calls.last).to eq(stock[4][:tool_calls].first)
      expect(ours.last(2)).to eq([stock[3], stock[5]])
    end

    it "keeps the responses of a loop apart, and takes a later call's reasoning when the first has none" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"))
      called(prompt, "call_b", "London", provider_data: data("t1"), thinking: "late", thinking_provider_info: info)
      called(prompt, "call_c", "Rome", provider_data: data("t2"), thinking: "next", thinking_provider_info: info)
      ours = stock_and_gem(prompt, deepseek).last

      expect(ours.map { |message| message[:role] }).to eq(%w[system user assistant tool tool assistant tool])
      expect(ours[2]).to include(reasoning_content: "late")
      expect(ours[2][:tool_calls].map { |call| call[:id] }).to eq(%w[call_a call_b])
      expect(ours[5]).to include(reasoning_content: "next", tool_calls: [a_hash_including(id: "call_c")])
    end

    it "appends reasoning that resumed after a call, and keeps the last reasoning_details, which hold them all" do
      first = [{ type: "reasoning.text", text: "Paris. ", index: 0 }]
      all = first + [{ type: "reasoning.encrypted", data: "ENC", index: 1 }]
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "Paris. ",
                                        thinking_provider_info: info(["reasoning"], reasoning_details: first))
      called(prompt, "call_b", "London", provider_data: data("t1"), thinking: "London.",
                                         thinking_provider_info: info(["reasoning"], reasoning_details: all))
      called(prompt, "call_c", "Rome", provider_data: data("t1"),
                                       thinking_provider_info: info(["reasoning"], reasoning_details: all))
      message = calling(stock_and_gem(prompt, model("open_router")).last)
      expect(message).to include(reasoning: "Paris. London.", reasoning_details: all)
      expect(message[:tool_calls].map { |call| call[:id] }).to eq(%w[call_a call_b call_c])
    end

    it "ends a response's message at anything but a result of its calls" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"))
      prompt.push(type: :model, content: "Half way.")
      called(prompt, "call_b", "London", provider_data: data("t1"))
      expect(assistant_calls(stock_and_gem(prompt, deepseek).last).size).to eq(2)
    end

    it "takes the thinking of the text message a Prompt gave it to, also when trimming drops that text" do
      ["", "Let me check."].each do |text|
        load_discourse_stand_ins(generation: :newest)
        prompt = new_prompt(skip_trim: false)
        thinking = completions::Thinking.new(message: "Look it up.", provider_info: info)
        call = completions::ToolCall.new(id: "call_a", name: "weather", parameters: { city: "Paris" },
                                         provider_data: data("t1"))
        prompt.push_model_response([thinking, text, call])
        expect(prompt.messages.last(2).map { |message| message[:type] }).to eq(%i[model tool_call])
        stock, ours = stock_and_gem(prompt, deepseek)

        expect(ours.size).to eq(stock.size).and eq(text.empty? ? 3 : 4)
        expect(ours.last).to eq(stock.last.merge(reasoning_content: "Look it up."))
        expect(ours[2]).to eq(role: "assistant", content: text) unless text.empty?
        integration.uninstall!
      end
    end

    it "sends a text answer's own reasoning back, as DeepSeek V4 wants on the answer that ends a turn of calls" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "Look.", thinking_provider_info: info)
      prompt.push(type: :model, content: "Paris: 18.", thinking: "Done.", thinking_provider_info: info)
      prompt.push(type: :user, content: "Thanks!", id: "sam")
      stock, ours = stock_and_gem(prompt, deepseek)

      answer = ours.find { |message| message[:content] == "Paris: 18." }
      expect(answer).to eq(role: "assistant", content: "Paris: 18.", reasoning_content: "Done.")
      expect(ours.map { |message| message.except(:reasoning_content) }).to eq(stock)
      # Another model's answer goes as it is.
      other = new_prompt
      other.push(type: :model, content: "Hi.", thinking: "x", thinking_provider_info: info(model: "9:other"))
      expect(stock_and_gem(other, deepseek).uniq.size).to eq(1)
    end

    it "fills in the content Mistral wants on the one assistant message" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "why", thinking_provider_info: info)
      called(prompt, "call_b", "London", provider_data: data("t1"))
      message = calling(stock_and_gem(prompt, model("mistral")).last)
      expect(message).to include(content: "", reasoning_content: "why")
      expect(message[:tool_calls].size).to eq(2)
    end

    it "writes OpenAiCompatible's requests too (any other provider)" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "why", thinking_provider_info: info)
      expect(calling(stock_and_gem(prompt, model("samba_nova")).last)).to include(reasoning_content: "why")
    end

    it "leaves vLLM's dialect alone: it replays reasoning_content itself" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1", extra_content: signature("SIG")), thinking: "why",
                                        thinking_provider_info: info(reasoning_details: [{ type: "reasoning.text" }]))
      called(prompt, "call_b", "London", provider_data: data("t1"))
      stock, ours = stock_and_gem(prompt, model("vllm"))
      expect(ours).to eq(stock)
      expect(assistant_calls(ours).first).to include(reasoning_content: "why")
    end

    it "sends the calls' data but not reasoning stamped with another model" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1", extra_content: signature("SIG")), thinking: "why",
                                        thinking_provider_info: info(model: "8:primary"))
      message = calling(stock_and_gem(prompt, deepseek).last)
      expect(message[:tool_calls].first).to include(extra_content: signature("SIG"))
      expect(message).not_to have_key(:reasoning_content)
    end

    # Groq streams `reasoning` and refuses it back ("property 'reasoning' is
    # unsupported"), on tool-call turns and answers alike.
    it "sends nothing to Groq, by provider or by URL: it needs no reasoning back and refuses the field" do
      [model("groq"), model("open_ai", url: "https://api.groq.com/openai/v1/chat/completions")].each do |groq|
        prompt = new_prompt
        mine = integration.model_identity(groq)
        called(prompt, "call_a", "Paris", provider_data: data("t1", model: mine), thinking: "why",
                                          thinking_provider_info: info(["reasoning"], model: mine))
        called(prompt, "call_b", "London", provider_data: data("t1", model: mine))
        prompt.push(type: :model, content: "Sunny.", thinking: "easy",
                    thinking_provider_info: info(["reasoning"], model: mine))
        stock, ours = stock_and_gem(prompt, groq)
        expect(ours).to eq(stock), groq.to_h.inspect
        integration.uninstall!
      end
    end

    it "sends nothing for a dialect without a model, whose identity is unknown" do
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1", model: nil), thinking: "why",
                                        thinking_provider_info: info(model: nil))
      integration.install!
      dialect = completions::Dialects::ChatGpt.new(prompt, nil)
      dialect.define_singleton_method(:disable_native_tools?) { false }
      expect(calling(dialect.translate).keys).to eq(%i[role content tool_calls])
    end
  end

  describe "switches" do
    let(:prompt) do
      new_prompt.tap do |prompt|
        called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "why", thinking_provider_info: info)
      end
    end

    def replayed? = calling(translate(prompt, deepseek)).key?(:reasoning_content)

    it "replay: false gives the stock request" do
      stock, ours = stock_and_gem(prompt, deepseek, replay: false)
      expect(ours).to eq(stock)
      expect(integration.replay?).to be(false)
    end

    it "asks a replay: callable on every use; one that raises counts as off, with a warn line" do
      answers = [true, false, true]
      integration.install!(replay: -> { answers.shift or raise IOError, "settings unavailable" })
      expect([replayed?, replayed?, replayed?, replayed?]).to eq([true, false, true, false])
      expect(logger.warnings).to include(/the replay check raised IOError: settings unavailable; replay off/)
    end

    it "is off while the gem is switched off (enabled:) or uninstalled" do
      enabled = false
      integration.install!(enabled: -> { enabled })
      expect(replayed?).to be(false)
      enabled = true
      expect(replayed?).to be(true)
      integration.uninstall!
      expect(replayed?).to be(false)
    end
  end

  describe "where the host already sends the data back" do
    it "leaves the host's messages as they are, says so in status, and warns once" do
      completions::Dialects::OpenAiTools.prepend(Module.new do
        def from_raw_tool_call(msg) = super.merge(reasoning_content: "host: #{msg[:thinking]}")
      end)
      prompt = new_prompt
      called(prompt, "call_a", "Paris", provider_data: data("t1"), thinking: "why", thinking_provider_info: info)
      called(prompt, "call_b", "London", provider_data: data("t1"))
      stock, ours = stock_and_gem(prompt, deepseek)

      expect(ours).to eq(stock)
      expect(translate(prompt, deepseek)).to eq(stock)
      expect(integration.status["DiscourseAi::Completions::Dialects::ChatGpt"])
        .to eq(replaced: false, reason: "the host's dialect already sends reasoning_content back", missing: [])
      expect(logger.warnings.grep(/already sends/)).to eq(
        ["discourse_ai_stream: DiscourseAi::Completions::Dialects::ChatGpt: the host's dialect already sends " \
         "reasoning_content back; left to it"]
      )
    end
  end

  describe "status" do
    it "says per dialect whether the gem writes its tool-call turns, and why not" do
      integration.install!(replay: false)
      expect(integration.status.select { |name, _| name.include?("Dialects") }.values.map { |entry| entry[:reason] })
        .to eq(["switched off (install!'s replay:)"] * 4)
      integration.install!
      expect(integration.status["DiscourseAi::Completions::Dialects::Vllm"])
        .to eq(replaced: false, reason: "replays reasoning itself (its own tool_call_msg)", missing: [])
    end

    it "names the ChatGpt dialect not loaded when the host has none" do
      completions.send(:remove_const, :Dialects)
      integration.install!
      expect(integration.status["DiscourseAi::Completions::Dialects::ChatGpt"])
        .to eq(replaced: false, reason: "not loaded", missing: [])
    end

    it "stands aside on an older generation" do
      load_discourse_stand_ins(generation: :current)
      call = { type: :tool_call, id: "call_a", name: "weather", content: '{"arguments":{}}', provider_data: data("t1"),
               thinking: "why", thinking_provider_info: info }
      prompt = Struct.new(:messages, :tools, :skip_trim).new([call], [weather], true)
      stock, ours = stock_and_gem(prompt, deepseek)
      expect(ours).to eq(stock)
      expect(integration.status["DiscourseAi::Completions::Dialects::ChatGpt"][:reason])
        .to eq("Discourse AI's current generation: reasoning is read on the newest only")
    end
  end

  it "identifies a model by its id and name" do
    expect(integration.model_identity(deepseek)).to eq("7:reasoner")
    expect(integration.model_identity(nil)).to be_nil
  end
end
