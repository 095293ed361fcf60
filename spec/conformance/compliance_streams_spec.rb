# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "support/conformance_helpers"
require_relative "support/stream_cases"

# Conformance with the shared endpoint checks of discourse/discourse
# plugins/discourse-ai/spec/lib/completions/endpoints/endpoint_compliance.rb,
# with the OpenAI-compatible mocks that feed them (OpenAiMock in
# endpoints/open_ai_spec.rb, VllmMock in endpoints/vllm_spec.rb: the same
# shapes). The facts, not the code: each mock event carries one delta in a
# choice with no index and no finish_reason, while `finish_reason` and
# `index` sit at the top level of the event (the last event has
# "stop_sequence" there, which is no finish_reason of a choice); events are
# joined by a blank line and `data: [DONE]` is glued onto the last event's
# line, with no line break in between; the body arrives one character per
# read.
RSpec.describe "Discourse's endpoint compliance streams", :conformance do
  extend StreamCases

  def self.mock_event(delta, serial, finish: nil)
    JSON.generate({ id: format("chatcmpl-%032x", serial), object: "chat.completion.chunk", created: 1_700_000_000,
                    model: "mock-model", choices: [{ delta: delta }], finish_reason: finish, index: 0 })
  end

  # Events with the last one marked "stop_sequence", as the mocks build them.
  def self.mock_events(deltas)
    deltas.each_with_index.map do |delta, serial|
      mock_event(delta, serial, finish: serial == deltas.size - 1 ? "stop_sequence" : nil)
    end
  end

  def self.glued_body(payloads)
    "#{payloads.map { |payload| "data: #{payload}" }.join("\n\n")}data: [DONE]"
  end

  WORDS = ["Mount", "ain", " ", "Tree ", "Frog"].freeze
  TOOL_DELTAS = [
    { id: "tool_0", function: {} },
    { id: "tool_0", function: { name: "get_weather", arguments: "" } },
    { id: "tool_0", function: { arguments: "" } },
    { id: "tool_0", function: { arguments: "{" } },
    { id: "tool_0", function: { arguments: ' "location": "Sydney"' } },
    { id: "tool_0", function: { arguments: ' ,"unit": "c" }' } }
  ].freeze
  SYDNEY = ["tool_0", "get_weather", { location: "Sydney", unit: "c" }].freeze

  # upstream: endpoint_compliance.rb streaming_mode_simple_prompt (open_ai_spec.rb
  # and vllm_spec.rb "completes a trivial prompt and logs the response", streaming)
  text_events = mock_events(WORDS.map { |word| { content: word } })
  stream "five text deltas, [DONE] glued onto the last", payloads: text_events, body: glued_body(text_events),
                                                          awaiting: { whole: "17.6", bytes: "17.6" } do |steps, _, _|
    # The caller cancels once it holds two words: the first four pieces.
    expect(text_pieces(steps)).to eq(WORDS)
    expect(text_pieces(steps).first(4).join).to eq("Mountain Tree ")
    expect(call_updates(steps)).to eq([])
  end

  # upstream: endpoint_compliance.rb streaming_mode_tools (open_ai_spec.rb "returns a
  # function invocation" and vllm_spec.rb "returns a function invoncation", streaming)
  tool_events = mock_events(TOOL_DELTAS.map { |delta| { tool_calls: [delta] } })
  stream "a call by id only (no index), its last fragment on the line with [DONE]",
         payloads: tool_events, body: glued_body(tool_events), awaiting: { whole: "17.6", bytes: "17.6" } do |steps, _, _|
    # The caller gets exactly the one completed call, nothing else.
    expect(items_of(steps)).to eq([{ id: SYDNEY[0], name: SYDNEY[1], parameters: SYDNEY[2], partial: false }])
  end

  describe "the last event lost on the [DONE] line while the call is open", awaiting: "17.6" do
    # The issue's item 6: arguments cut to {"location":"Sydney" after an event
    # was lost must not come out "repaired" as {location: "Sydney"}.
    it "is an error naming the call, never repaired parameters" do
      broken = "#{tool_events[0..4].map { |payload| "data: #{payload}\n\n" }.join}data: #{tool_events[5][0..-3]}\n\n"
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect do
        broken.each_char { |char| processor.decode_chunk(char.b) }
        processor.finish
      end.to raise_error(DiscourseAiStream::ToolArgumentsError) { |error| expect(error.tool_id).to eq("tool_0") }
    end
  end

  # upstream: endpoint_compliance.rb regular_mode_simple_prompt and regular_mode_tools
  # (the non-streamed bodies of OpenAiMock and VllmMock)
  describe "non-streamed responses" do
    def self.mock_response(message, usage)
      { id: "chatcmpl-mock", object: "chat.completion", created: 1_700_000_000, model: "mock-model",
        usage: usage.merge(total_tokens: 499), choices: [{ message: { role: "assistant" }.merge(message),
                                                           finish_reason: "stop", index: 0 }] }
    end

    arguments = JSON.generate({ location: "Sydney", unit: "c" })
    { "OpenAiMock" => [8, 12], "VllmMock" => [337, 162] }.each do |mock, (prompt, completion)|
      usage = { prompt_tokens: prompt, completion_tokens: completion }
      response "#{mock}, text", mock_response({ content: "1. Serenity\\n2. Laughter\\n3. Adventure" }, usage),
               items: ["1. Serenity\\n2. Laughter\\n3. Adventure"], usage: { prompt: prompt, completion: completion }
      response "#{mock}, a call without type or index",
               mock_response({ tool_calls: [{ id: "tool_0", function: { name: "get_weather", arguments: arguments } }] },
                             usage),
               items: [SYDNEY]
    end
  end
end
