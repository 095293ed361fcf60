# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "support/conformance_helpers"
require_relative "support/stream_cases"

# Conformance with the OpenAI-compatible streams and bodies of
# discourse/discourse plugins/discourse-ai/spec/lib/completions/endpoints/
# open_ai_spec.rb. Two generations of that file are covered: the one whose
# examples stream recorded bodies through WebMock ("older" below, the one
# with "properly handles spaces in tools payload and partial tool calls"),
# and the newest, whose bodies come from Discourse's scripted HTTP transport
# (a role chunk, the content or each call's arguments in pieces of 1 to 6
# characters, then a chunk with the finish_reason and the usage). The
# streams here are written for these specs from the upstream facts.
RSpec.describe "Discourse's OpenAI endpoint streams", :conformance do
  extend StreamCases

  def self.text_events(pieces, usage: nil, finish: "stop")
    [delta_event({ role: "assistant", content: "" }), *pieces.map { |piece| delta_event({ content: piece }) },
     delta_event({}, finish_reason: finish, **(usage ? { usage: usage } : {}))]
  end

  # As the scripted transport streams calls: per call a header with its
  # index, then its arguments in pieces, then the finish chunk with usage.
  def self.tool_events(calls, usage:)
    events = calls.each_with_index.flat_map do |(id, name, arguments), index|
      text = JSON.generate(arguments)
      [delta_event({ tool_calls: [{ index: index, id: id, function: { name: name, arguments: "" } }] }),
       *fragments_of(text).map { |piece| delta_event({ tool_calls: [{ index: index, function: { arguments: piece } }] }) }]
    end
    events << delta_event({}, finish_reason: "tool_calls", usage: usage)
  end

  def self.message_body(content: nil, tool_calls: nil, usage: nil, finish: "stop")
    message = { role: "assistant", content: content }
    message[:tool_calls] = tool_calls if tool_calls
    { id: "chatcmpl-body", object: "chat.completion", choices: [{ index: 0, message: message, finish_reason: finish }],
      usage: usage }.compact
  end

  # The scripted transport hands the body over one event per read.
  def self.scripted(title, payloads:, **options, &check)
    stream(title, payloads: payloads, pieces: payloads.map { |payload| "data: #{payload}\n\n" }, **options, &check)
  end

  def self.function_call(id, name, arguments)
    { id: id, type: "function", function: { name: name, arguments: JSON.generate(arguments) } }
  end

  describe "newest open_ai_spec.rb" do
    # upstream: "maps max_tokens to max_completion_tokens for reasoning endpoints" (streamed "hello")
    # upstream: "streams text chunks and returns the final message" ("Hello world!", more than one chunk)
    # upstream: "preserves multiline formatting when streaming responses"
    # upstream: "falls back to best-effort parsing on broken JSON responses" (the text as it came)
    # upstream: "records audit log entries for streaming completions and honours cancellations"
    ["hello", "Hello world!", "Here is some code:\n\n```ruby\nputs 'hi'\n```", "```json\n{ message: 'hello' }",
     "Stream the peaceful mountain air"].each do |text|
      usage = { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 }
      scripted "streamed text #{text.inspect}", payloads: text_events(fragments_of(text), usage: usage) do |steps, processor, _|
        expect(text_pieces(steps)).to eq(fragments_of(text))
        expect(text_of(steps)).to eq(text)
        expect(call_updates(steps)).to eq([])
        expect(usage_of(processor).slice(:prompt, :completion)).to eq(prompt: 12, completion: 5)
      end
    end

    # upstream: "respects tool_choice and logs usage" (streamed, tool_choice "echo")
    echo = [["call_123", "echo", { text: "h<e>llo" }]]
    scripted "one streamed call with its usage on the finish chunk",
           payloads: tool_events(echo, usage: { prompt_tokens: 40, completion_tokens: 7 }) do |steps, processor, _|
      expect(items_of(steps)).to eq([{ id: "call_123", name: "echo", parameters: { text: "h<e>llo" }, partial: false }])
      expect(usage_of(processor).slice(:prompt, :completion)).to eq(prompt: 40, completion: 7)
    end

    # upstream: "yields partial tool updates and final tool result"
    weather = ["call_weather", "lookup_weather", { location: "SFO", units: "f" }]
    scripted "one streamed call with partial_tool_calls", partial: true,
                                                        payloads: tool_events([weather], usage: { prompt_tokens: 9, completion_tokens: 4 }) do |steps, _, way|
      expect(completed_calls(steps)).to eq([weather])
      # One read holding the whole body shows each call once, completed.
      expect(partial_updates(steps)).not_to be_empty unless way == :whole
      expect(call_updates(steps).last[:partial]).to be(false)
      expect(non_growing_updates(steps)).to eq([])
      expect(repeated_updates(steps)).to eq([])
    end

    # upstream: "records cached token usage when streaming tool calls"
    paris = ["call_weather", "lookup_weather", { location: "Paris", units: "c" }]
    cached_usage = { prompt_tokens: 24, completion_tokens: 16, total_tokens: 40, prompt_tokens_details: { cached_tokens: 33 } }
    scripted "a streamed call whose usage has cached tokens", partial: true,
                                                             payloads: tool_events([paris], usage: cached_usage) do |steps, processor, _|
      expect(completed_calls(steps)).to eq([paris])
      expect(processor.cache_read_tokens).to eq(33)
      expect(processor.cached_tokens).to eq(33)
      expect(processor.completion_tokens).to eq(16)
    end

    # upstream: "yields partial updates for each tool and returns them all"
    calendar = ["call_calendar", "create_calendar_event", { title: "Pack bags", time: "18:00" }]
    scripted "two streamed calls with partial_tool_calls", partial: true,
                                                          payloads: tool_events([paris, calendar], usage: { prompt_tokens: 30, completion_tokens: 20 }) do |steps, _, way|
      expect(completed_calls(steps)).to eq([paris, calendar])
      unless way == :whole
        expect(partial_updates(steps).map { |update| update[:name] }.uniq).to eq(%w[lookup_weather create_calendar_event])
      end
      expect(call_updates(steps).last[:partial]).to be(false)
      expect(non_growing_updates(steps)).to eq([])
      expect(repeated_updates(steps)).to eq([])
    end

    # upstream: "recovers from malformed streamed payloads" (also the older file's
    # "will automatically recover from a bad payload")
    good = ["test,", "test2 ,", "test3,", "test4"].map { |text| JSON.generate({ choices: [{ delta: { content: text } }] }) }
    broken = '{"choices":[{"delta":{"content":"test1 ,"}}]'
    malformed = [good[0], broken, *good[1..]]
    malformed_body = "#{malformed.map { |payload| "data: #{payload}" }.join("\n\n")}\n\ndata: [DONE]"
    malformed_pieces = cut_after(malformed_body, ["d", "a", "t", "a", ":", " ", "{", 'test', "1", " ", '"delta":',
                                                  "test3,\"}}]", '{', '"', "d", "test4\"}}]", "[D"])
    stream "an unreadable event between text events", payloads: malformed, body: malformed_body, pieces: malformed_pieces,
                                                       awaiting: { whole: "17.5", bytes: "17.5", pieces: "17.5" } do |steps, processor, way|
      expect(text_of(steps)).to eq("test,test2 ,test3,test4")
      next if way == :hash

      expect(processor.anomalies.map { |anomaly| anomaly[:excerpt].to_s }).to include(a_string_including("test1 ,"))
    end

    # Non-streamed bodies of the newest file.
    response "upstream \"keeps max_tokens for non-reasoning models\"",
             message_body(content: "hello", usage: { prompt_tokens: 5, completion_tokens: 1 }),
             items: ["hello"], usage: { prompt: 5, completion: 1 }
    # upstream: "sends tool_choice none when requested", "omits disabled parameters from payload",
    # "embeds uploads when vision is enabled", "falls back to non-streaming mode when streaming is disabled",
    # "records audit log entries for non-streaming completions", and the reasoning effort examples
    ["hi there", "test response", "nice pic", "Hello there", "Serenity now", "test", "OK"].each do |text|
      response "upstream text #{text.inspect}", message_body(content: text, usage: { prompt_tokens: 20, completion_tokens: 3 }),
               items: [text], usage: { prompt: 20, completion: 3 }
    end
    # upstream: "parses XML tool calls" (native tools off: the XML is text for Discourse to parse)
    xml = "<function_calls>\n<invoke>\n<tool_name>get_weather</tool_name>\n<parameters>\n<location>Sydney</location>\n" \
          "<units>c</units>\n</parameters>\n</invoke>\n</function_calls>\n"
    response "upstream \"parses XML tool calls\"", message_body(content: xml), items: [xml]
    # upstream: "returns all tool calls" (not streamed)
    response "upstream \"returns all tool calls\"",
             message_body(tool_calls: [function_call(*paris), function_call(*calendar)], finish: "tool_calls"),
             items: [paris, calendar]
    # upstream: "resets context between calls" and "respects tool_choice and logs usage" (first answer, not streamed)
    response "upstream \"resets context between calls\"",
             message_body(tool_calls: [function_call("call_echo", "echo", { text: "hello" })], finish: "tool_calls"),
             items: [["call_echo", "echo", { text: "hello" }]]
  end
end
