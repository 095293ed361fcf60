# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"
require_relative "../support/fake_llm_server"

# What the fake servers stream, and how each is set up in Discourse.
module ToolLoopServers
  TOOLS = { "weather" => ->(_) { { celsius: 20 } }, "get_weather" => ->(_) { { celsius: 18 } } }.freeze
  DEEPSEEK_REASONING = "The user asks about the weather in San Francisco. I should use the weather tool."
  KIMI_REASONING = "The user wants the weather in Paris and London. I will call get_weather for both cities."
  GEMINI_SIGNATURE = { "google" => { "thought_signature" => "CiQBjz1rXwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" } }
                     .freeze

  # Per server: the provider its model is set up with in Discourse (no
  # DeepSeek, Kimi or Gemini-compatible provider exists: an OpenAI one with
  # the server's URL), the answer of the second turn, and words of the 400
  # of a second request without the data.
  SERVERS = {
    deepseek: ["open_ai", "It is 20°C in San Francisco.", FakeLlmServer::DeepSeek::MESSAGE],
    kimi: ["open_ai", "Paris: 18°C, London: 14°C.",
           "reasoning_content is missing in assistant tool call message at index 2"],
    gemini: ["open_ai", "Paris: 18°C, London: 14°C.",
             "Function call is missing a thought_signature in functionCall parts."],
    openrouter: ["open_router", "The weather in Florence, Italy, currently feels quite hot at 40°C.",
                 FakeLlmServer::OpenRouter::MESSAGE]
  }.freeze
end

# Two turns of the AI bot's tool loop (the stand-ins' Agents::Bot#reply) over
# HTTP against the fake reasoning servers: the first request streams
# reasoning and tool calls, the bot runs the tools, the second request
# carries their results. Without the gem, with its replay off, or with the
# write side (Discourse::Replay) standing aside, the server refuses the
# second request with its 400; with the gem it gets back what it streamed,
# and answers.
RSpec.describe "A tool loop through a reasoning model, over HTTP", gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:failed) { DiscourseAi::Completions::Endpoints::Base::CompletionFailed }

  before { load_discourse_stand_ins(generation: :newest) }

  def llm(server, provider, id: 3)
    DiscourseStandIns::LlmModel.new(id: id, provider: provider, name: server.personality.class.name,
                                    url: server.url, custom_params: {})
  end

  def bot(server, name, **model)
    DiscourseAi::Agents::Bot.new(llm(server, ToolLoopServers::SERVERS.fetch(name).first, **model),
                                 tools: ToolLoopServers::TOOLS)
  end

  def new_prompt
    tools = ToolLoopServers::TOOLS.keys.map { |name| { name: name, description: "The weather", parameters: {} } }
    DiscourseAi::Completions::Prompt.new("You are a bot.", tools: tools).tap do |prompt|
      prompt.push(type: :user, content: "What is the weather?")
    end
  end

  # The bot's reply, the server's requests, and the prompt.
  def reply(name)
    FakeLlmServer.open(name) do |server|
      prompt = new_prompt
      [bot(server, name).reply(prompt), server.requests, prompt]
    end
  end

  # The server's requests, the second refused with its 400.
  def refused(name)
    FakeLlmServer.open(name) do |server|
      expect { bot(server, name).reply(new_prompt) }
        .to raise_error(failed, a_string_including(ToolLoopServers::SERVERS.fetch(name).last))
      server.requests
    end
  end

  def calling(request)
    request["messages"].select { |message| message["role"] == "assistant" && message["tool_calls"] }
  end

  describe "without the gem" do
    ToolLoopServers::SERVERS.each_key do |name|
      it "#{name}: the second request is refused with the server's 400" do
        requests = refused(name)
        expect(requests.size).to eq(2)
        expect(JSON.generate(calling(requests.last)))
          .not_to include("reasoning_content", "extra_content", "reasoning_details")
      end
    end
  end

  describe "with the gem, its replay switched off" do
    ToolLoopServers::SERVERS.each_key do |name|
      it "#{name}: the requests are the stock ones, the second refused" do
        stock = refused(name)
        integration.install!(replay: false)
        expect(refused(name)).to eq(stock)
      end
    end
  end

  describe "with the gem" do
    before { integration.install! }

    ToolLoopServers::SERVERS.each do |name, (_, answer, _)|
      it "#{name}: the second request carries back what the server streamed, and the server answers" do
        text, requests, = reply(name)
        expect(text).to eq(answer)
        expect(requests.size).to eq(2)
      end

      it "#{name}: the first request is the stock one; without the write side the second is refused" do
        integration.uninstall!
        stock = refused(name)
        integration.install!
        expect(reply(name)[1].first).to eq(stock.first)

        allow(DiscourseAiStream::Discourse::Replay).to receive(:active?).and_return(false)
        expect(refused(name)).to eq(stock)
        expect(DiscourseAiStream::Discourse::Replay).to have_received(:active?).at_least(:once)
      end
    end

    it "DeepSeek: the reasoning it streamed, whole, under reasoning_content" do
      _, requests, prompt = reply(:deepseek)
      expect(calling(requests.last))
        .to match([a_hash_including("reasoning_content" => ToolLoopServers::DEEPSEEK_REASONING)])
      expect(prompt.messages.find { |message| message[:type] == :tool_call })
        .to include(thinking: ToolLoopServers::DEEPSEEK_REASONING)
    end

    it "Kimi: both calls of the response in one assistant message, with the reasoning, the results after it" do
      _, requests, = reply(:kimi)
      expect(calling(requests.last).size).to eq(1)
      message = calling(requests.last).first
      ids = message["tool_calls"].map { |call| call["id"] }
      expect(message["reasoning_content"]).to eq(ToolLoopServers::KIMI_REASONING)
      expect(ids).to eq(%w[functions.get_weather:0 functions.get_weather:1])
      expect(requests.last["messages"].last(3))
        .to match([message, *ids.map { |id| a_hash_including("tool_call_id" => id) }])
    end

    it "Gemini: the signature on the call that had it, verbatim, the parallel calls in one message" do
      _, requests, = reply(:gemini)
      expect(calling(requests.last).size).to eq(1)
      message = calling(requests.last).first
      first, second = message["tool_calls"]
      expect(first["extra_content"]).to eq(ToolLoopServers::GEMINI_SIGNATURE)
      expect(second).not_to have_key("extra_content")
      expect(message.keys).to contain_exactly("role", "content", "tool_calls")
    end

    it "OpenRouter: reasoning_details as in the request OpenRouter accepted, and the reasoning text" do
      _, requests, = reply(:openrouter)
      message = calling(requests.last).first
      expect(message["reasoning_details"]).to eq(FakeLlmServer::OpenRouter.accepted_details)
      expect(message["reasoning"]).to eq(FakeLlmServer::OpenRouter.accepted_details.first["text"])
    end

    it "never sends one model's reasoning to another: a fallback model's request has none of it" do
      FakeLlmServer.open(:deepseek) do |server|
        prompt = new_prompt
        bot(server, :deepseek, id: 1).reply(prompt)
        prompt.push(type: :user, content: "And tomorrow?")
        expect { bot(server, :deepseek, id: 2).reply(prompt) }.to raise_error(failed, /reasoning_content/)
        expect(calling(server.requests[1]).first).to have_key("reasoning_content")
        expect(calling(server.requests[2]).first).not_to have_key("reasoning_content")
      end
    end
  end
end
