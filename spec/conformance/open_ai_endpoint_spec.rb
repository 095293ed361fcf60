# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "support/conformance_helpers"
require_relative "support/stream_cases"
require_relative "support/upstream_bodies"

# Conformance with the OpenAI-compatible streams and bodies of
# discourse/discourse plugins/discourse-ai/spec/lib/completions/endpoints/
# open_ai_spec.rb. Two generations of that file are covered: the one whose
# examples stream recorded bodies through WebMock ("older" below, the one
# with "properly handles spaces in tools payload and partial tool calls"),
# and the newest, whose bodies come from Discourse's scripted HTTP transport
# (a role chunk, the content or each call's arguments in pieces of 1 to 6
# characters, then a chunk with the finish_reason and the usage). The
# streams here are written for these specs from the upstream facts.
# The examples are declared by StreamCases#stream and #response.
# rubocop:disable RSpec/EmptyExampleGroup
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
       *fragments_of(text).map do |piece|
         delta_event({ tool_calls: [{ index: index, function: { arguments: piece } }] })
       end]
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
      scripted "streamed text #{text.inspect}",
               payloads: text_events(fragments_of(text), usage: usage) do |steps, processor, _|
        expect(text_pieces(steps)).to eq(fragments_of(text))
        expect(text_of(steps)).to eq(text)
        expect(call_updates(steps)).to eq([])
        expect(token_counts(processor).slice(:prompt, :completion)).to eq(prompt: 12, completion: 5)
      end
    end

    # upstream: "respects tool_choice and logs usage" (streamed, tool_choice "echo")
    echo = [["call_123", "echo", { text: "h<e>llo" }]]
    echo_events = tool_events(echo, usage: { prompt_tokens: 40, completion_tokens: 7 })
    scripted "one streamed call with its usage on the finish chunk", payloads: echo_events do |steps, processor, _|
      expect(items_of(steps)).to eq([{ id: "call_123", name: "echo", parameters: { text: "h<e>llo" }, partial: false }])
      expect(token_counts(processor).slice(:prompt, :completion)).to eq(prompt: 40, completion: 7)
    end

    # upstream: "yields partial tool updates and final tool result"
    weather = ["call_weather", "lookup_weather", { location: "SFO", units: "f" }]
    weather_events = tool_events([weather], usage: { prompt_tokens: 9, completion_tokens: 4 })
    scripted "one streamed call with partial_tool_calls", partial: true, payloads: weather_events do |steps, _, way|
      expect(completed_calls(steps)).to eq([weather])
      # One read holding the whole body shows each call once, completed.
      expect(partial_updates(steps)).not_to be_empty unless way == :whole
      expect(call_updates(steps).last[:partial]).to be(false)
      expect(non_growing_updates(steps)).to eq([])
      expect(repeated_updates(steps)).to eq([])
    end

    # upstream: "records cached token usage when streaming tool calls"
    paris = ["call_weather", "lookup_weather", { location: "Paris", units: "c" }]
    cached_usage = { prompt_tokens: 24, completion_tokens: 16, total_tokens: 40,
                     prompt_tokens_details: { cached_tokens: 33 } }
    paris_events = tool_events([paris], usage: cached_usage)
    scripted "a streamed call whose usage has cached tokens",
             partial: true, payloads: paris_events do |steps, processor, _|
      expect(completed_calls(steps)).to eq([paris])
      expect(processor.cache_read_tokens).to eq(33)
      expect(processor.cached_tokens).to eq(33)
      expect(processor.completion_tokens).to eq(16)
    end

    # upstream: "yields partial updates for each tool and returns them all"
    calendar = ["call_calendar", "create_calendar_event", { title: "Pack bags", time: "18:00" }]
    both_events = tool_events([paris, calendar], usage: { prompt_tokens: 30, completion_tokens: 20 })
    scripted "two streamed calls with partial_tool_calls", partial: true, payloads: both_events do |steps, _, way|
      expect(completed_calls(steps)).to eq([paris, calendar])
      unless way == :whole
        names = partial_updates(steps).map { |update| update[:name] }.uniq
        expect(names).to eq(%w[lookup_weather create_calendar_event])
      end
      expect(call_updates(steps).last[:partial]).to be(false)
      expect(non_growing_updates(steps)).to eq([])
      expect(repeated_updates(steps)).to eq([])
    end

    # upstream: "recovers from malformed streamed payloads" (also the older file's
    # "will automatically recover from a bad payload")
    stream "an unreadable event between text events",
           **UpstreamBodies.malformed do |steps, processor, way|
      expect(text_of(steps)).to eq(UpstreamBodies::MALFORMED_TEXT)
      next if way == :hash

      excerpts = processor.anomalies.map { |anomaly| anomaly[:excerpt].to_s }
      expect(excerpts).to include(a_string_including("test1 ,"))
    end

    # Non-streamed bodies of the newest file.
    response "upstream \"keeps max_tokens for non-reasoning models\"",
             message_body(content: "hello", usage: { prompt_tokens: 5, completion_tokens: 1 }),
             items: ["hello"], usage: { prompt: 5, completion: 1 }
    # upstream: "sends tool_choice none when requested", "omits disabled parameters from payload",
    # "embeds uploads when vision is enabled", "falls back to non-streaming mode when streaming is disabled",
    # "records audit log entries for non-streaming completions", and the reasoning effort examples
    ["hi there", "test response", "nice pic", "Hello there", "Serenity now", "test", "OK"].each do |text|
      body = message_body(content: text, usage: { prompt_tokens: 20, completion_tokens: 3 })
      response "upstream text #{text.inspect}", body, items: [text], usage: { prompt: 20, completion: 3 }
    end
    # upstream: "parses XML tool calls" (native tools off: the XML is text for Discourse to parse)
    xml = "<function_calls>\n<invoke>\n<tool_name>get_weather</tool_name>\n<parameters>\n" \
          "<location>Sydney</location>\n" \
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

  describe "older open_ai_spec.rb (recorded bodies)" do
    # upstream: "uses max_completion_tokens for reasoning models": a role chunk, "hello", the
    # finish chunk, then usage in a chunk with no choices.
    o3_usage = { prompt_tokens: 22, completion_tokens: 203, total_tokens: 225,
                 prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
                 completion_tokens_details: { reasoning_tokens: 192 } }
    o3 = [delta_event({ role: "assistant", content: "", refusal: nil }, usage: nil),
          delta_event({ content: "hello" }, usage: nil), delta_event({}, finish_reason: "stop", usage: nil),
          event(choices: [], usage: o3_usage)]
    stream "text, then usage after the finish chunk",
           payloads: o3, body: sse_body(o3, done: "data: [DONE]\n") do |steps, processor, _|
      expect(items_of(steps)).to eq(["hello"])
      expect(token_counts(processor)).to include(prompt: 22, completion: 203)
    end

    # upstream: "properly handles multiple tool calls": two calls streamed one after the
    # other at index 0 and 1, content null on the role chunk, then finish_reason "tool_calls".
    first = ["call_3Gyr3HylFJwfrtKrL6NaIit1", "search", { search_query: "Discourse AI bot" }]
    second = ["call_H7YkbgYurHpyJqzwUN4bghwN", "search", { query: "Discourse AI bot2" }]
    two_calls = [delta_event({ role: "assistant", content: nil }, logprobs: nil)]
    [[first, ['{"se', "arch_", 'query"', ': "D', "iscou", "rse AI", " bot", '"}']],
     [second,
      ['{"qu', 'ery":', ' "Disc', "ours", "e AI ", 'bot2"}']]].each_with_index do |((id, name, _), parts), index|
      two_calls << delta_event({ tool_calls: [{ index: index, id: id, type: "function",
                                                function: { name: name, arguments: "" } }] })
      parts.each { |part| two_calls << delta_event({ tool_calls: [{ index: index, function: { arguments: part } }] }) }
    end
    two_calls << delta_event({}, finish_reason: "tool_calls")
    both_done = [first, second].map do |id, name, parameters|
      { id: id, name: name, parameters: parameters, partial: false }
    end
    stream "two calls streamed in turn",
           payloads: two_calls, body: sse_body(two_calls, done: "data: [DONE]") do |steps, _, _|
      expect(items_of(steps)).to eq(both_done)
    end

    # upstream: "properly handles newlines": five text events, the last one without a line
    # break after it and no [DONE].
    pieces = [":\n\n", "```", "ruby", "\n", "def"]
    newline_events = pieces.map { |piece| delta_event({ content: piece }, usage: nil) }
    newline_body = newline_events.map { |payload| "data: #{payload}" }.join("\n\n")
    stream "text with line breaks, the body ending inside the last event's line",
           payloads: newline_events, body: newline_body do |steps, _, _|
      expect(items_of(steps)).to eq(pieces)
    end

    # upstream: "uses proper token accounting": each event its own read, the blank line
    # starting the next read.
    accounting = [delta_event({ role: "assistant", content: "" }, usage: nil),
                  delta_event({ content: "Hello" }, usage: nil),
                  delta_event({}, finish_reason: "stop", usage: nil),
                  event(choices: [], usage: { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29 })]
    accounting_body = "#{accounting.map { |payload| "data: #{payload}" }.join("\n\n")}\n\ndata: [DONE]"
    accounting_reads = cut_after(accounting_body, accounting)
    stream "usage in its own chunk, each event read apart",
           payloads: accounting, body: accounting_body, pieces: accounting_reads do |steps, processor, _|
      expect(items_of(steps)).to eq(["Hello"])
      expect(token_counts(processor)).to include(prompt: 20, completion: 9)
    end

    # upstream: "properly handles spaces in tools payload and partial tool calls": events
    # with spaces after the colons, an empty tool_calls delta after the call's last
    # fragment, reads cut inside keys and values.
    stream "spaces in the payload and an empty tool delta, with partial_tool_calls",
           partial: true, **UpstreamBodies.spaced do |steps, _, way|
      expect(call_updates(steps).last).to eq(UpstreamBodies::GOOGLE)
      expect(non_growing_updates(steps)).to eq([])
      expect(repeated_updates(steps)).to eq([])
      if way == :pieces
        # Each read shows the call as it stands at the end of the read; the empty tool
        # delta completes it in the read that holds it.
        queries = call_updates(steps).map { |update| update[:parameters][:query] }
        expect(queries).to eq(["Ad", "Adabas", "Adabas 9.", "Adabas 9.1"])
      end
    end

    # upstream: "properly handles multiple params in partial tool calls" (a recorded
    # create_artifact call, read line by line; stock gives 128 items, a count this gem
    # does not promise): here an artifact call of our own with four long string
    # parameters full of escapes, cut so that escapes split across fragments.
    artifact = { name: "Counter",
                 html_body: "<h1 class=\"title\">Count</h1>\n<button id=\"add\">Add</button>\n<p id=\"n\">0</p>\n",
                 css: "h1.title { color: teal; }\nbutton { padding: 4px 8px; }\n",
                 js: "let n = 0;\ndocument.getElementById('add').onclick = () => {\n  n += 1;\n  " \
                     "document.getElementById('n').textContent = `${n}`;\n};\n" }
    artifact_text = JSON.generate(artifact)
    artifact_parts = fragments_of(artifact_text, sizes: [1, 4, 2, 7, 3, 5])
    artifact_header = { index: 0, id: "call_artifact", type: "function",
                        function: { name: "create_artifact", arguments: "" } }
    artifact_events = [delta_event({ role: "assistant", content: nil, tool_calls: [artifact_header] }, usage: nil)]
    artifact_parts.each do |part|
      artifact_events << delta_event({ tool_calls: [{ index: 0, function: { arguments: part } }] }, usage: nil)
    end
    artifact_events << delta_event({}, finish_reason: "tool_calls", usage: nil)
    artifact_events << event(choices: [], usage: { prompt_tokens: 735, completion_tokens: 156, total_tokens: 891,
                                                   prompt_tokens_details: { cached_tokens: 33, audio_tokens: 0 } })
    artifact_body = sse_body(artifact_events, done: "data: [DONE]\n\n\n")
    artifact_lines = artifact_body.scan(/.*\n/)
    stream "a call with several long string parameters, with partial_tool_calls",
           partial: true, payloads: artifact_events, body: artifact_body,
           pieces: artifact_lines do |steps, processor, way|
      expect(artifact_parts).to(satisfy { |parts| parts.any? { |part| part.end_with?("\\") } })
      expect(completed_calls(steps)).to eq([["call_artifact", "create_artifact", artifact]])
      expect(partial_updates(steps).size).to be > 10 unless way == :whole
      expect(non_growing_updates(steps)).to eq([])
      expect(repeated_updates(steps)).to eq([])
      expect(processor.cached_tokens).to eq(33)
      expect(token_counts(processor)).to include(cache_read: 33, completion: 156)
    end

    # upstream: "falls back to best-effort parsing on broken JSON responses" (older file: the
    # compliance mock's shape, [DONE] glued onto the last event, one character per read)
    json_parts = ["```json\n{ message: 'hel", "lo' }"]
    json_events = json_parts.each_with_index.map do |part, serial|
      JSON.generate({ id: "chatcmpl-#{serial}", object: "chat.completion.chunk",
                      choices: [{ delta: { content: part } }],
                      finish_reason: serial == 1 ? "stop_sequence" : nil, index: 0 })
    end
    json_body = "#{json_events.map { |payload| "data: #{payload}" }.join("\n\n")}data: [DONE]"
    stream "text pieces of a broken JSON answer, [DONE] glued onto the last",
           payloads: json_events, body: json_body do |steps, _, _|
      expect(items_of(steps)).to eq(json_parts)
    end

    # Non-streamed bodies of the older file.
    # upstream: "can properly reset context" and "can properly force tool use"
    [["can properly reset context", "hello"], ["can properly force tool use", "h<e>llo"]].each do |title, text|
      response "upstream \"#{title}\"",
               message_body(tool_calls: [function_call("call_I8LKnoijVuhKOM85nnEQgWwd", "echo", { text: text })],
                            usage: { prompt_tokens: 55, completion_tokens: 13, total_tokens: 68 },
                            finish: "tool_calls"),
               items: [["call_I8LKnoijVuhKOM85nnEQgWwd", "echo", { text: text }]],
               usage: { prompt: 55, completion: 13 }
    end
    # upstream: "can properly disable tool use with :none", "remaps max_tokens to max_completion_tokens
    # for reasoning models", "can handle images", "falls back to non-streaming mode when streaming is
    # disabled", "supports gpt-5, ...", "excludes disabled parameters from the request"
    ["I won't use any tools. Here's a direct response instead.", "hello", "nice pic", "Hello there", "ok",
     "test response"].each do |text|
      response "upstream text #{text.inspect}", { choices: [{ message: { content: text } }] }, items: [text]
    end
    # upstream: "parses XML tool calls" (older file: with usage 8 / 13)
    xml = "<function_calls>\n<invoke>\n<tool_name>get_weather</tool_name>\n<parameters>\n" \
          "<location>Sydney</location>\n" \
          "<unit>c</unit>\n<is_it_hot>true</is_it_hot>\n</parameters>\n</invoke>\n</function_calls>\n"
    response "upstream \"parses XML tool calls\" (older)",
             message_body(content: xml, usage: { prompt_tokens: 8, completion_tokens: 13 }),
             items: [xml], usage: { prompt: 8, completion: 13 }
  end
end
# rubocop:enable RSpec/EmptyExampleGroup
