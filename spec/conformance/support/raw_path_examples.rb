# frozen_string_literal: true

require_relative "conformance_helpers"

# The raw path of an example whose chunks the Hash path already checks: the
# same chunks as SSE bytes through decode_chunk give the same calls and text
# however the bytes are split, and one event per read gives, step by step,
# what process_streamed_message gave for that event.
#
# The including group defines `chunks` (Hashes), `expected_calls`
# ([id, name, parameters] in completion order) and `expected_text`, and may
# `partial` (partial_tool_calls).
RSpec.shared_examples "the same stream on the raw path" do
  let(:payloads) { chunks.map { |chunk| JSON.generate(chunk) } }
  let(:body) { sse_body(payloads) }

  def new_processor
    DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
  end

  it "gives the same calls and text from decode_chunk, whole and one byte per read" do
    splittings(body).each do |way, reads|
      steps = raw_steps(new_processor, reads)
      expect(completed_calls(steps)).to eq(expected_calls), way
      expect(text_of(steps)).to eq(expected_text), way
    end
  end

  it "gives, one event per read, what process_streamed_message gives for each event" do
    by_event = raw_steps(new_processor, payloads.map { |payload| "data: #{payload}\n\n" })
    expect(by_event).to eq(hash_steps(new_processor, payloads))
  end
end
