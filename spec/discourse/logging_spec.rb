# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"

RSpec.describe "logging of anomalies and provider errors with the gem installed", gc_stress: false do
  include_context "with the Discourse stand-ins"

  before { install_into(:legacy) }

  after do
    integration.logger = nil
    DiscourseAiStream.on_anomaly = nil
  end

  def sse(*chunks)
    chunks.map { |chunk| "data: #{JSON.generate(chunk)}\n\n" }
  end

  # A fragment at an index no call was announced at, on every delta.
  def orphan_fragments(count)
    (1..count).map { |i| { choices: [{ delta: { tool_calls: [{ index: 3, function: { arguments: "f#{i}" } }] } }] } }
  end

  def mistral
    DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral"))
  end

  it "logs an anomaly at warn with the endpoint's provider" do
    mistral.perform_stream(sse(*orphan_fragments(1), { choices: [{ delta: {}, finish_reason: "stop" }] }))
    expect(logger.warnings).to eq([
                                    "discourse_ai_stream: mistral (DiscourseAi::Completions::Endpoints::Mistral): " \
                                    "orphan_fragment: a tool call fragment matched no call and carried no name " \
                                    "to start one (index 3)"
                                  ])
  end

  it "logs one line per anomaly kind in a response, and counts the rest at the end" do
    mistral.perform_stream(sse(*orphan_fragments(50)) << "data: not json\n\n" << "data: nor this\n\n")
    expect(logger.warnings.size).to eq(3)
    expect(logger.warnings[0]).to include("orphan_fragment")
    expect(logger.warnings[1]).to include("non_json_data")
    expect(logger.warnings[2]).to end_with("more anomalies in this response, not logged: " \
                                           "orphan_fragment x49, non_json_data x1")
  end

  it "counts the rest at the end of a response that was not streamed too" do
    calls = (1..3).map { |i| { type: "function", function: { name: "f#{i}", arguments: "{}" } } }
    expect(mistral.perform_request(JSON.generate(choices: [{ message: { tool_calls: calls } }])).size).to eq(3)
    expect(logger.warnings.size).to eq(2)
    expect(logger.warnings[0]).to include("generated_id")
    expect(logger.warnings[1]).to end_with("more anomalies in this response, not logged: generated_id x2")
  end

  # Discourse's "recovers from malformed streamed payloads": the request
  # goes on past an event whose JSON is cut, and the skipped event is logged.
  it "skips an unreadable event without failing the request, with a warn line" do
    body = "#{sse({ choices: [{ delta: { content: "a," } }] }).join}" \
           "data: {\"choices\":[{\"delta\":{\"content\":\"lost\"}}]\n\n" \
           "#{sse({ choices: [{ delta: { content: "b" } }] }).join}data: [DONE]"
    [[body], body.chars].each_with_index do |reads, n|
      items = mistral.perform_stream(reads)
      expect(items.join).to eq("a,b")
      expect(logger.warnings.size).to eq(n + 1)
      expect(logger.warnings.last).to match(/mistral .*unreadable_event: an event that could not be read was skipped/)
    end
  end

  it "logs each response on its own" do
    2.times { mistral.perform_stream(sse(*orphan_fragments(3))) }
    expect(logger.warnings.grep(/orphan_fragment: /).size).to eq(2)
  end

  it "falls back to the endpoint's class name without an llm_model provider" do
    vllm = DiscourseAi::Completions::Endpoints::Vllm.new(DiscourseStandIns::LlmModel.new)
    vllm.perform_stream(sse(*orphan_fragments(1)))
    expect(logger.warnings.first).to start_with("discourse_ai_stream: DiscourseAi::Completions::Endpoints::Vllm: ")
  end

  it "logs a provider error once, with the provider, and raises it on" do
    reads = sse({ error: { message: "rate limited", code: 429 } })
    %w[Mistral Vllm].each do |name|
      endpoint = DiscourseAi::Completions::Endpoints.const_get(name).new(llm_model(name.downcase))
      expect { endpoint.perform_stream(reads) }.to raise_error(DiscourseAiStream::ProviderError, /rate limited/)
    end
    expect(logger.warnings).to eq(
      ["discourse_ai_stream: mistral (DiscourseAi::Completions::Endpoints::Mistral): " \
       "provider error in the stream: rate limited",
       "discourse_ai_stream: vllm (DiscourseAi::Completions::Endpoints::Vllm): " \
       "provider error in the stream: rate limited",
       # vLLM's own decode_chunk reads event by event: the error waits for
       # the end of the read, whose other items come out first.
       "discourse_ai_stream: vllm (DiscourseAi::Completions::Endpoints::Vllm): " \
       "DiscourseAiStream::ProviderError in an event of a read made by the endpoint's own decode_chunk: " \
       "delivering the read's items first, raising on the next read: rate limited"]
    )
  end

  it "still hands every anomaly to DiscourseAiStream.on_anomaly" do
    seen = []
    DiscourseAiStream.on_anomaly = ->(anomaly) { seen << anomaly[:kind] }
    mistral.perform_stream(sse(*orphan_fragments(4)))
    expect(seen).to eq([:orphan_fragment] * 4)
  end

  it "logs an anomaly before DiscourseAiStream.on_anomaly sees it, and warns when that hook raises" do
    logged = []
    DiscourseAiStream.on_anomaly = ->(_anomaly) { (logged << logger.warnings.size) && raise("hook failed") }
    expect { mistral.perform_stream(sse(*orphan_fragments(2))) }
      .to output("discourse_ai_stream: on_anomaly hook raised RuntimeError: hook failed\n" * 2).to_stderr
    expect(logged).to eq([1, 1])
    expect(logger.warnings[0]).to include("orphan_fragment")
  end

  it "logs nothing for a clean stream" do
    mistral.perform_stream([DiscourseStandIns::MISTRAL_SSE])
    expect(logger.lines).to eq([])
  end

  it "logs nothing once uninstalled" do
    integration.uninstall!
    mistral.perform_stream(sse(*orphan_fragments(3)))
    expect(logger.lines).to eq([])
  end

  it "writes to a logger of its own when one is set, and to stderr without any" do
    own = DiscourseStandIns::FakeLogger.new
    integration.logger = own
    mistral.perform_stream(sse(*orphan_fragments(1)))
    expect(own.warnings.size).to eq(1)
    expect(logger.lines).to eq([])

    integration.logger = nil
    hide_const("Rails")
    expect { mistral.perform_stream(sse(*orphan_fragments(1))) }.to output(/orphan_fragment/).to_stderr
  end
end
