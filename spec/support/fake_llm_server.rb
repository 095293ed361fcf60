# frozen_string_literal: true

require "json"
require "socket"

# A chat-completions server on loopback that answers the way reasoning
# models behind OpenAI-compatible URLs do (docs/discourse.md, "Reasoning
# models"): the first request of a tool loop gets a stream with reasoning
# and tool calls, a request whose last message is a tool result gets a
# streamed answer, and a request that does not send back what the server's
# stream asked to be sent back gets that server's 400 with its own words.
# Plain TCPServer and HTTP/1.1 (a POST with Content-Length in, a chunked
# stream or a JSON error out, one request per connection), no gems.
#
#   FakeLlmServer.open(:deepseek) { |server| ... server.url ... server.requests }
#
# Each stream is a file of spec/fixtures/recorded/ (spec/fixtures/README.md
# says which are recordings). Each SSE event goes out as two chunks, cut in
# the middle, so a body read may end anywhere.
class FakeLlmServer
  DIR = File.expand_path("../fixtures/recorded", __dir__)

  attr_reader :requests, :personality

  def self.open(name)
    server = new(name)
    yield server
  ensure
    server&.close
  end

  def initialize(name)
    @personality = PERSONALITIES.fetch(name).new
    @requests = []
    @socket = TCPServer.new("127.0.0.1", 0)
    @thread = Thread.new { serve }
  end

  def url = "http://127.0.0.1:#{@socket.addr[1]}/v1/chat/completions"

  def close
    @socket.close
    @thread.join
  end

  # The messages of the nth request (0-based), as the server read them.
  def messages(index) = requests.fetch(index).fetch("messages")

  private

  def serve
    loop do
      client = @socket.accept
      begin
        answer(client)
      ensure
        client.close
      end
    end
  rescue IOError, Errno::EBADF
    nil # the listening socket was closed
  end

  def answer(client)
    headers = []
    client.gets("\r\n")
    while (line = client.gets("\r\n")) && line != "\r\n"
      headers << line.chomp("\r\n").split(": ", 2)
    end
    length = headers.find { |name, _| name.casecmp?("content-length") }&.last.to_i
    body = JSON.parse(client.read(length))
    @requests << body
    status, reply = personality.respond(body.fetch("messages"))
    status == 200 ? stream(client, reply) : refuse(client, status, reply)
  end

  def stream(client, sse)
    client.write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n" \
                 "Connection: close\r\n\r\n")
    sse.b.scan(/.*?\n\n/m).each do |event|
      half = event.bytesize / 2
      [event.byteslice(0, half), event.byteslice(half..)].each do |piece|
        client.write("#{piece.bytesize.to_s(16)}\r\n#{piece}\r\n")
      end
    end
    client.write("0\r\n\r\n")
  end

  def refuse(client, status, error)
    body = JSON.generate(error)
    client.write("HTTP/1.1 #{status} Bad Request\r\nContent-Type: application/json\r\n" \
                 "Content-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
  end

  # What every personality shares: a refusal first, then the answer (last
  # message a tool result) or the tool-call stream.
  class Personality
    def respond(messages)
      error = order(messages) || refusal(messages)
      return [400, error] if error

      [200, messages.last&.fetch("role") == "tool" ? answer : File.read(File.join(DIR, self.class::TOOL_STREAM))]
    end

    # The calls of the tool-call stream: id => { name:, extra_content: }.
    def issued
      @issued ||= events(File.read(File.join(DIR, self.class::TOOL_STREAM))).each_with_object({}) do |event, calls|
        Array(event.dig("choices", 0, "delta", "tool_calls")).each do |call|
          next unless call["id"]

          calls[call["id"]] = { name: call.dig("function", "name"), extra_content: call["extra_content"] }
        end
      end
    end

    private

    def events(sse) = sse.scan(/^data: (\{.*\})$/).map { |(json)| JSON.parse(json) }

    # The assistant messages that carry tool calls, with their index.
    def calling(messages)
      messages.each_with_index.select { |message, _| message["role"] == "assistant" && message["tool_calls"] }
    end

    def mine?(message) = message["tool_calls"].any? { |call| issued.key?(call["id"]) }

    # The order of OpenAI's chat API, which these servers follow too: each
    # tool result answers a call of the assistant message before it, and
    # every call of that message is answered before anything else comes.
    # OpenAI's own words.
    def order(messages)
      open = []
      messages.each do |message|
        if message["role"] == "tool"
          next if open.delete(message["tool_call_id"])

          return openai_error("Invalid parameter: messages with role 'tool' must be a response to a preceeding " \
                              "message with 'tool_calls'.")
        end
        return unanswered(open) unless open.empty?

        calls = message["role"] == "assistant" && message["tool_calls"]
        open = calls.map { |call| call["id"] } if calls
      end
      open.empty? ? nil : unanswered(open)
    end

    def unanswered(ids)
      openai_error("An assistant message with 'tool_calls' must be followed by tool messages responding to each " \
                   "'tool_call_id'. The following tool_call_ids did not have response messages: #{ids.join(", ")}")
    end

    def openai_error(text)
      { "error" => { "message" => text, "type" => "invalid_request_error", "param" => "messages", "code" => nil } }
    end

    # A streamed answer in the server's envelope: reasoning (when the server
    # reasons in the open), text, a stop, usage.
    def answer
      envelope = { "id" => "answer-CONSTRUCTED", "object" => "chat.completion.chunk", "created" => 1_770_000_001,
                   "model" => self.class::MODEL }
      deltas = self.class::ANSWER.map { |field, text| { field => text } }
      chunks = deltas.map { |delta| envelope.merge("choices" => [{ "index" => 0, "delta" => delta }]) }
      chunks << envelope.merge("choices" => [{ "index" => 0, "delta" => {}, "finish_reason" => "stop" }],
                               "usage" => { "prompt_tokens" => 90, "completion_tokens" => 12, "total_tokens" => 102 })
      "#{chunks.map { |chunk| "data: #{JSON.generate(chunk)}\n\n" }.join}data: [DONE]\n\n"
    end
  end

  # DeepSeek V4 in thinking mode: the recorded stream streams
  # reasoning_content, then one call. An assistant message that carries one
  # of its calls without the reasoning_content key is refused.
  class DeepSeek < Personality
    TOOL_STREAM = "deepseek_v4_reasoning_content.sse"
    MODEL = "deepseek-v4-flash"
    ANSWER = [["reasoning_content", "The tool says 20C."], ["content", "It is 20°C"],
              ["content", " in San Francisco."]].freeze
    MESSAGE = "The `reasoning_content` in the thinking mode must be passed back to the API."

    def refusal(messages)
      return unless calling(messages).any? { |message, _| mine?(message) && !message.key?("reasoning_content") }

      { "error" => { "message" => MESSAGE, "type" => "invalid_request_error", "param" => nil,
                     "code" => "invalid_request_error" } }
    end
  end

  # Moonshot Kimi with thinking on: reasoning_content, then two calls in one
  # response. Every assistant message with tool calls needs a non-empty
  # reasoning_content (K2.6 counts "" as missing), named by its index.
  class Kimi < Personality
    TOOL_STREAM = "kimi_thinking_parallel_tool_calls.sse"
    MODEL = "kimi-k2.6"
    ANSWER = [["reasoning_content", "Both results are in."], ["content", "Paris: 18°C, London: 14°C."]].freeze

    def refusal(messages)
      _, index = calling(messages).find { |message, _| message["reasoning_content"].to_s.empty? }
      return unless index

      { "error" => { "type" => "invalid_request_error",
                     "message" => "thinking is enabled but reasoning_content is missing in assistant tool call " \
                                  "message at index #{index}" },
        "type" => "error" }
    end
  end

  # Gemini 3 on Google's OpenAI-compatible URL: two parallel calls, the
  # thought signature in extra_content on the first only. In the current
  # turn (after the last user message), the first call of each assistant
  # message must carry its signature, verbatim: missing is Google's 400
  # (the position is the message's, counted from 1: the format of the
  # quoted error, its counting a guess), a different one is "Corrupted
  # thought signature.". Both as Google's compat layer sends them, an Array.
  class Gemini < Personality
    TOOL_STREAM = "gemini_compat_thought_signature.sse"
    MODEL = "gemini-3-flash-preview"
    ANSWER = [["content", "Paris: 18°C, London: 14°C."]].freeze

    def refusal(messages)
      start = messages.rindex { |message| message["role"] == "user" } || 0
      calling(messages).each do |message, index|
        next if index < start

        first = message["tool_calls"].first
        signature = first.dig("extra_content", "google", "thought_signature")
        return missing(first, index) unless signature

        issued_signature = issued.dig(first["id"], :extra_content, "google", "thought_signature")
        return google_error("Corrupted thought signature.") if issued_signature && signature != issued_signature
      end
      nil
    end

    private

    def missing(call, index)
      google_error("Function call is missing a thought_signature in functionCall parts. This is required for tools " \
                   "to work correctly, and missing thought_signature may lead to degraded model performance. " \
                   "Additional data, function call `default_api:#{call.dig("function", "name")}` , position " \
                   "#{index + 1}. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for " \
                   "more details.")
    end

    def google_error(text) = [{ "error" => { "code" => 400, "message" => text, "status" => "INVALID_ARGUMENT" } }]
  end

  # OpenRouter in front of Gemini 3 Pro: the recorded stream (reasoning,
  # reasoning_details with an encrypted detail, one call) and the recorded
  # answer. An assistant message that carries the call must carry
  # reasoning_details exactly as in the request OpenRouter accepted in the
  # same recording; else OpenRouter's words, in its error envelope.
  class OpenRouter < Personality
    TOOL_STREAM = "openrouter_gemini3_reasoning_details.sse"
    MESSAGE = "Gemini models require OpenRouter reasoning details to be preserved in each request."

    # reasoning_details of the recorded accepted request's assistant message.
    def self.accepted_details
      request = JSON.parse(File.read(File.join(DIR, "openrouter_gemini3_replay_request.json")))
      request["messages"].find { |message| message["tool_calls"] }.fetch("reasoning_details")
    end

    def refusal(messages)
      details = self.class.accepted_details
      return unless calling(messages).any? { |message, _| mine?(message) && message["reasoning_details"] != details }

      { "error" => { "message" => MESSAGE, "code" => 400 } }
    end

    private

    def answer = File.read(File.join(DIR, "openrouter_gemini3_after_tool_result.sse"))
  end

  PERSONALITIES = { deepseek: DeepSeek, kimi: Kimi, gemini: Gemini, openrouter: OpenRouter }.freeze
end
