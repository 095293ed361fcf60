# frozen_string_literal: true

# Runs inside a Discourse checkout: bin/rspec plugins/discourse-ai-stream/spec
RSpec.describe "discourse-ai-stream" do
  # The bug report's chunk: Mistral streams both parallel calls, the
  # finish_reason and the usage in ONE chunk.
  let(:sse) do
    tool_calls = [
      { id: "bM0Xl0KSh", function: { name: "get_weather", arguments: '{"city": "Paris"}' }, index: 0 },
      { id: "kgOYVL46d", function: { name: "get_local_time", arguments: '{"timezone": "Europe/Paris"}' }, index: 1 }
    ]
    chunk = {
      id: "cmpl-e5cc70bb28c444948073e77776eb30ef", object: "chat.completion.chunk", created: 1_702_256_327,
      model: "mistral-large-latest",
      choices: [{ index: 0, delta: { content: "", tool_calls: tool_calls }, finish_reason: "tool_calls",
                  logprobs: nil }],
      usage: { prompt_tokens: 172, total_tokens: 195, completion_tokens: 23 },
      p: "abcdefghijklmnopq"
    }
    "data: #{chunk.to_json}\n\ndata: [DONE]\n\n".b
  end

  fab!(:mistral_model) do
    Fabricate(:llm_model, provider: "mistral", name: "mistral-large-latest",
                          url: "https://api.mistral.ai/v1/chat/completions")
  end
  fab!(:vllm_model) do
    Fabricate(:llm_model, provider: "vllm", name: "qwen3", url: "https://vllm.example.com/v1/chat/completions")
  end

  # What Endpoints::Base does with a streamed body, without the HTTP.
  def stream(endpoint)
    items = endpoint.send(:decode_chunk, sse) + endpoint.send(:decode_chunk_finish)
    items.grep(DiscourseAi::Completions::ToolCall)
  end

  it "is installed on the OpenAI-compatible endpoints" do
    expect(DiscourseAiStream::Discourse).to be_installed
    expect(DiscourseAiStream::Discourse.patched_classes).to include(DiscourseAi::Completions::Endpoints::OpenAi)
  end

  it "gets both tool calls of the chunk out of the Mistral endpoint" do
    endpoint = DiscourseAi::Completions::Endpoints::Mistral.new(mistral_model)
    calls = stream(endpoint)

    expect(endpoint.send(:processor)).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
    expect(calls.map(&:id)).to eq(%w[bM0Xl0KSh kgOYVL46d])
    expect(calls.map(&:name)).to eq(%w[get_weather get_local_time])
    expect(calls.map(&:parameters)).to eq([{ city: "Paris" }, { timezone: "Europe/Paris" }])
  end

  # Older Discourse AI's vLLM endpoint reads its tools from the text itself
  # and builds no processor: the gem leaves it alone there.
  it "keeps the tool batch id vLLM puts into provider_data, where its endpoint builds a processor" do
    vllm = DiscourseAi::Completions::Endpoints::Vllm
    unless vllm.method_defined?(:processor) || vllm.private_method_defined?(:processor)
      expect(DiscourseAiStream::Discourse.patched_classes).not_to include(vllm)
      next
    end
    calls = stream(vllm.new(vllm_model))
    expect(calls.size).to eq(2)
    expect(calls.map { |call| call.provider_data.dig(:vllm, :tool_batch_id) })
      .to all(eq("cmpl-e5cc70bb28c444948073e77776eb30ef"))
  end

  it "hands the endpoints Discourse's own processor while its site setting is off" do
    SiteSetting.discourse_ai_stream_enabled = false
    stock = DiscourseAi::Completions::Endpoints::Mistral.new(mistral_model).send(:processor)
    expect(stock).to be_a(DiscourseAi::Completions::OpenAiMessageProcessor)

    SiteSetting.discourse_ai_stream_enabled = true
    ours = DiscourseAi::Completions::Endpoints::Mistral.new(mistral_model).send(:processor)
    expect(ours).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
  end

  it "passes rake discourse_ai_stream:check: the gem in use, every call of the bug report's streams out" do
    io = StringIO.new
    expect(DiscourseAiStream::Check.run(io)).to eq(DiscourseAiStream::Check::IN_USE), io.string
  end

  it "registers the admin dashboard's problem checks, which find nothing while the gem is in use" do
    checks = %i[discourse_ai_stream_not_in_use discourse_ai_stream_lost_or_refused].map { |id| ProblemCheck[id] }
    expect(checks).to all(be_present)
    # An Array (2024's contract) or one problem or nil (the newest).
    expect(checks.map { |check| Array(check.new.call).compact }).to eq([[], []])
  end

  # What the gem's processor stamps on a DeepSeek V4 tool turn, as the AI
  # bot's loop pushes it, and what the ChatGpt dialect then sends back: the
  # reasoning on the call's assistant message on the newest Discourse (the
  # only one the gem replays for), the stock message elsewhere.
  it "sends a reasoning model's reasoning back with its tool call, to that model only" do
    deepseek = Fabricate(:llm_model, provider: "open_ai", name: "deepseek-v4-flash",
                                     url: "https://api.deepseek.com/chat/completions")
    key = DiscourseAiStream::OpenAiMessageProcessor::PROVIDER_KEY
    translated = lambda do |producer|
      identity = DiscourseAiStream::Discourse.model_identity(producer)
      prompt = DiscourseAi::Completions::Prompt.new("You are a bot.")
      prompt.push(type: :user, content: "Weather in Paris?")
      # What the gem stamps, where Prompt#push keeps it (the newest only).
      stamped = { thinking_provider_info: { key => { fields: ["reasoning_content"], model: identity } },
                  provider_data: { key => { turn: "t1", model: identity } } }
      keeps = DiscourseAi::Completions::Prompt.instance_method(:push).parameters.map(&:last)
      prompt.push(type: :tool_call, id: "call_a", name: "weather", content: { arguments: { city: "Paris" } }.to_json,
                  thinking: "Look it up.", **stamped.slice(*keeps))
      prompt.push(type: :tool, id: "call_a", name: "weather", content: '{"celsius":18}')
      messages = DiscourseAi::Completions::Dialects::ChatGpt.new(prompt, deepseek).translate
      messages.find { |message| message[:role] == "assistant" && message[:tool_calls] }
    end
    newest = DiscourseAiStream::Discourse.generation == :newest
    expect(translated.call(deepseek)[:reasoning_content]).to eq(newest ? "Look it up." : nil)
    expect(translated.call(mistral_model)).not_to have_key(:reasoning_content)
  end

  it "reports the usage to the audit log" do
    endpoint = DiscourseAi::Completions::Endpoints::Mistral.new(mistral_model)
    stream(endpoint)
    log = AiApiAuditLog.new
    endpoint.send(:final_log_update, log)
    expect([log.request_tokens, log.response_tokens]).to eq([172, 23])
  end
end
