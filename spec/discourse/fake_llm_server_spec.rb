# frozen_string_literal: true

require "net/http"
require_relative "../support/fake_llm_server"

# The fake reasoning servers of spec/support/fake_llm_server.rb, driven by
# hand-built requests: each streams its tool turn, refuses a second request
# that lacks what it streamed with its own words, and accepts one that
# carries it back. What the two-turn tests (round_trip_spec.rb) rest on.
RSpec.describe FakeLlmServer do
  let(:question) { { "role" => "user", "content" => "Weather?" } }

  def post(server, messages)
    response = Net::HTTP.post(URI(server.url), JSON.generate(model: "m", messages: messages, stream: true),
                              "Content-Type" => "application/json")
    [response.code.to_i, response.body]
  end

  def data_lines(body) = body.scan(/^data: (\{.*\})$/).map { |(json)| JSON.parse(json) }

  # The calls of the server's tool stream as one assistant message (the
  # whole arguments), then a result for each, as a client that sends back
  # nothing of the reasoning would build them.
  def stock_turn(server)
    calls = {}
    data_lines(post(server, [question]).last).each do |chunk|
      Array(chunk.dig("choices", 0, "delta", "tool_calls")).each { |call| follow(calls, call) }
    end
    [{ "role" => "assistant", "content" => nil, "tool_calls" => calls.values },
     *calls.values.map { |call| { "role" => "tool", "tool_call_id" => call["id"], "content" => "{}" } }]
  end

  def follow(calls, call)
    slot = calls[call["index"] || call["id"]] ||= { "id" => call["id"], "type" => "function", "function" => {} }
    slot["function"]["name"] ||= call.dig("function", "name")
    (slot["function"]["arguments"] ||= +"") << call.dig("function", "arguments").to_s
  end

  # The server, and its tool turn as a client that sends nothing back has it.
  def with_turn(name)
    described_class.open(name) { |server| yield server, stock_turn(server) }
  end

  def reasoning(server, field)
    data_lines(post(server, [question]).last).filter_map { |chunk| chunk.dig("choices", 0, "delta", field) }.join
  end

  it "streams the tool turn of its recording, in pieces over a chunked HTTP/1.1 response" do
    described_class.open(:deepseek) do |server|
      reads = []
      Net::HTTP.start("127.0.0.1", URI(server.url).port) do |http|
        request = Net::HTTP::Post.new(URI(server.url), "Content-Type" => "application/json")
        request.body = JSON.generate(messages: [question])
        http.request(request) { |response| response.read_body { |read| reads << read } }
      end
      expect(reads.join).to eq(File.binread(File.join(FakeLlmServer::DIR, "deepseek_v4_reasoning_content.sse")))
      expect(reads.size).to be > 60
      expect(server.requests).to eq([{ "messages" => [question] }])
    end
  end

  describe "DeepSeek" do
    it "refuses an assistant message of its calls without reasoning_content, and takes one with it" do
      with_turn(:deepseek) do |server, turn|
        status, body = post(server, [question, *turn])
        expect(status).to eq(400)
        expect(JSON.parse(body)).to eq("error" => { "message" => FakeLlmServer::DeepSeek::MESSAGE,
                                                    "type" => "invalid_request_error", "param" => nil,
                                                    "code" => "invalid_request_error" })

        text = reasoning(server, "reasoning_content")
        expect(text).to eq("The user asks about the weather in San Francisco. I should use the weather tool.")
        turn.first["reasoning_content"] = text
        status, body = post(server, [question, *turn])
        expect(status).to eq(200)
        expect(data_lines(body).filter_map { |chunk| chunk.dig("choices", 0, "delta", "content") }.join)
          .to eq("It is 20°C in San Francisco.")
      end
    end
  end

  describe "Kimi" do
    it "names the index of each assistant tool-call message without reasoning_content, \"\" counting as missing" do
      with_turn(:kimi) do |server, turn|
        expect(turn.first["tool_calls"].map { |call| call["id"] })
          .to eq(%w[functions.get_weather:0 functions.get_weather:1])
        message = "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2"
        error = { "error" => { "type" => "invalid_request_error", "message" => message }, "type" => "error" }
        expect(post(server, [{ "role" => "system", "content" => "Be brief." }, question, *turn]))
          .to eq([400, JSON.generate(error)])
        turn.first["reasoning_content"] = ""
        expect(post(server, [question, *turn]).first).to eq(400)

        turn.first["reasoning_content"] = reasoning(server, "reasoning_content")
        expect(post(server, [question, *turn]).first).to eq(200)
      end
    end
  end

  describe "Gemini" do
    let(:signature) { "CiQBjz1rXwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" }

    it "wants the signature on the first call of the message, verbatim, and the calls in one message" do
      with_turn(:gemini) do |server, turn|
        status, body = post(server, [question, *turn])
        expect(status).to eq(400)
        expect(JSON.parse(body).first["error"]).to include("code" => 400, "status" => "INVALID_ARGUMENT")
        expect(JSON.parse(body).first.dig("error", "message"))
          .to start_with("Function call is missing a thought_signature in functionCall parts.")
          .and include("function call `default_api:get_weather` , position 2.")

        first, second = turn.first["tool_calls"]
        first["extra_content"] = { "google" => { "thought_signature" => "#{signature}x" } }
        expect(JSON.parse(post(server, [question, *turn]).last).first.dig("error", "message"))
          .to eq("Corrupted thought signature.")

        first["extra_content"] = { "google" => { "thought_signature" => signature } }
        split = [{ "role" => "assistant", "content" => nil, "tool_calls" => [first] }, turn[1],
                 { "role" => "assistant", "content" => nil, "tool_calls" => [second] }, turn[2]]
        expect(JSON.parse(post(server, [question, *split]).last).first.dig("error", "message"))
          .to include("position 4.")
        expect(post(server, [question, *turn]).first).to eq(200)
      end
    end

    it "checks the current turn only: what came before the last user message is not validated" do
      with_turn(:gemini) do |server, turn|
        expect(post(server, [question, *turn, { "role" => "user", "content" => "And now?" }]).first).to eq(200)
      end
    end
  end

  describe "OpenRouter" do
    it "accepts the request it accepted in the recording, and refuses it without reasoning_details" do
      described_class.open(:openrouter) do |server|
        recorded = JSON.parse(File.read(File.join(FakeLlmServer::DIR, "openrouter_gemini3_replay_request.json")))
        status, body = post(server, recorded["messages"])
        expect(status).to eq(200)
        expect(body).to eq(File.binread(File.join(FakeLlmServer::DIR, "openrouter_gemini3_after_tool_result.sse")))

        recorded["messages"][2].delete("reasoning_details")
        expect(post(server, recorded["messages"]))
          .to eq([400, JSON.generate("error" => { "message" => FakeLlmServer::OpenRouter::MESSAGE, "code" => 400 })])
        recorded["messages"][2]["reasoning_details"] = FakeLlmServer::OpenRouter.accepted_details.reverse
        expect(post(server, recorded["messages"]).first).to eq(400)
      end
    end
  end

  it "refuses, in OpenAI's words, results that answer no call before them and calls left unanswered" do
    with_turn(:deepseek) do |server, turn|
      turn.first["reasoning_content"] = "x"
      expect(JSON.parse(post(server, [question, turn[1]]).last).dig("error", "message"))
        .to start_with("Invalid parameter: messages with role 'tool' must be a response to a preceeding message")
      expect(JSON.parse(post(server, [question, turn.first, question]).last).dig("error", "message"))
        .to end_with("did not have response messages: #{turn.first["tool_calls"].first["id"]}")
    end
  end
end
