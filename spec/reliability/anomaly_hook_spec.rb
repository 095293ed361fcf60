# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

# The on_anomaly hook is the caller's: a StandardError it raises itself is
# reported on stderr and does not stop the stream (what interrupts it from
# outside is another matter: spec/reliability/interrupts_spec.rb).
RSpec.describe "the on_anomaly hook" do
  it "reports that it raised even under ruby -W0, and the read's calls come out" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: ->(_) { raise "logger down" })
    nameless = tool_chunk([{ index: 0, function: { name: "f", arguments: "{}" } }], finish: "tool_calls")
    verbose = $VERBOSE
    items = nil
    begin
      $VERBOSE = nil
      expect { items = processor.decode_chunk(sse([nameless])) }
        .to output(/discourse_ai_stream: on_anomaly hook raised RuntimeError: logger down/).to_stderr
    ensure
      $VERBOSE = verbose
    end
    expect(items.map(&:name)).to eq(["f"])
  end
end
