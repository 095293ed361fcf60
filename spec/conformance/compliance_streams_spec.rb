# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "support/conformance_helpers"
require_relative "support/stream_cases"
require_relative "support/upstream_bodies"

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
# The examples are declared by StreamCases#stream and #response.
# rubocop:disable RSpec/EmptyExampleGroup
RSpec.describe "Discourse's endpoint compliance streams", :conformance do
  extend StreamCases

  # upstream: endpoint_compliance.rb streaming_mode_simple_prompt (open_ai_spec.rb
  # and vllm_spec.rb "completes a trivial prompt and logs the response", streaming)
  stream "five text deltas, [DONE] glued onto the last", **UpstreamBodies.compliance_text do |steps, _, _|
    # The caller cancels once it holds two words: the first four pieces.
    expect(text_pieces(steps)).to eq(UpstreamBodies::COMPLIANCE_WORDS)
    expect(text_pieces(steps).first(4).join).to eq("Mountain Tree ")
    expect(call_updates(steps)).to eq([])
  end

  # upstream: endpoint_compliance.rb streaming_mode_tools (open_ai_spec.rb "returns a
  # function invocation" and vllm_spec.rb "returns a function invoncation", streaming)
  tool_events = UpstreamBodies.compliance_tool[:payloads]
  stream "a call by id only (no index), its last fragment on the line with [DONE]",
         **UpstreamBodies.compliance_tool do |steps, _, _|
    # The caller gets exactly the one completed call, nothing else.
    id, name, parameters = UpstreamBodies::SYDNEY
    expect(items_of(steps)).to eq([{ id: id, name: name, parameters: parameters, partial: false }])
  end

  describe "the last event lost on the [DONE] line while the call is open" do
    # Rule 23: arguments cut to {"location":"Sydney" after an event
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
               mock_response({ tool_calls: [{ id: "tool_0",
                                              function: { name: "get_weather", arguments: arguments } }] }, usage),
               items: [UpstreamBodies::SYDNEY]
    end
  end
end
# rubocop:enable RSpec/EmptyExampleGroup
