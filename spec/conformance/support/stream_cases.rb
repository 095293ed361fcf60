# frozen_string_literal: true

require_relative "conformance_helpers"

# Declares the examples of one upstream stream: the Hash path and every way
# of splitting the raw body, each its own example. The block holds the
# expectations; it runs in the example with `steps`, `processor` and `way`
# (:hash, :whole, ...).
# rubocop:disable RSpec/NoExpectationExample -- the expectations are in the block
module StreamCases
  def stream(title, payloads:, body: nil, pieces: nil, partial: false, &check)
    wire = body || ConformanceHelpers.sse_body(payloads)
    describe(title) do
      it "on the Hash path" do
        processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
        steps = hash_steps(processor, payloads)
        instance_exec(steps, processor, :hash, &check)
      end

      reads_by_way(wire, pieces: pieces).each do |way, reads|
        it "on the raw path, #{ConformanceHelpers::WAYS.fetch(way)}" do
          processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
          steps = raw_steps(processor, reads)
          instance_exec(steps, processor, way, &check)
        end
      end
    end
  end

  # A non-streamed response body: process_message gives `items` (Strings and
  # [id, name, parameters] of calls) and the processor reports `usage`.
  def response(title, body, items:, usage: nil)
    it "#{title}: process_message gives its items#{" and usage" if usage}" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      result = processor.process_message(JSON.parse(JSON.generate(body), symbolize_names: true))
      summary = result.map { |item| item.is_a?(String) ? item : [item.id, item.name, item.parameters] }
      expect(summary).to eq(items)
      expect(result.grep_v(String)).to all(have_attributes(partial?: false))
      expect(token_counts(processor).slice(*usage.keys)).to eq(usage) if usage
    end
  end

  include ConformanceHelpers
end
# rubocop:enable RSpec/NoExpectationExample
