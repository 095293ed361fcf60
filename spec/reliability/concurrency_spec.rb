# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

RSpec.describe "concurrency" do
  def three_calls(prefix = "")
    tool_chunk([call("#{prefix}a", "f", '{"n":1}', index: 0), call("#{prefix}b", "f", '{"n":2}', index: 1),
                call("#{prefix}c", "f", '{"n":3}', index: 2)], finish: "tool_calls")
  end

  it "refuses a re-entrant call from a callback with ConcurrencyError" do
    processor = nil
    reentrant = Class.new(DiscourseAiStream::ToolCall) do
      define_method(:initialize) do |**kwargs|
        super(**kwargs)
        processor.process_streamed_message(ChunkHelpers.text_chunk("inner"))
      end
    end
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: reentrant)
    expect { processor.process_streamed_message(three_calls) }
      .to raise_error(DiscourseAiStream::ConcurrencyError, /already in use/)
    # Still usable afterwards.
    expect(processor.process_streamed_message(text_chunk("later"))).to eq("later")
  end

  it "gives each of two threads sharing a processor a result or a clear error" do
    # A ToolCall class that yields the GVL while the processor is busy, so the
    # other thread really does run inside the same processor's call.
    yielding = Class.new(DiscourseAiStream::ToolCall) do
      def initialize(**kwargs)
        super
        sleep 0.001
      end
    end
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: yielding)
    outcomes = Array.new(2) do |t|
      Thread.new do
        Array.new(20) do |n|
          prefix = "#{t}.#{n}."
          [prefix, ids_in(Array(processor.process_streamed_message(three_calls(prefix))))]
        rescue DiscourseAiStream::ConcurrencyError
          :busy
        end
      end
    end.flat_map(&:value)
    expect(outcomes).to include(:busy)
    done = outcomes - [:busy]
    expect(done).not_to be_empty
    done.each { |prefix, ids| expect(ids).to eq(%w[a b c].map { |x| prefix + x }) }
  end

  it "runs many processors in many threads independently" do
    results = Array.new(8) do |t|
      Thread.new do
        Array.new(100) do |n|
          processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: n.odd?)
          id = "t#{t}-#{n}"
          chunks = [tool_chunk([call(id, "f", "", index: 0)]), tool_chunk([fragment(0, '{"t":')]),
                    tool_chunk([fragment(0, "#{t},\"n\":#{n}}")]), finish_chunk]
          reads = random_reads(sse(chunks), Random.new((t * 1000) + n))
          items = decoded_items(processor, reads).grep_v(String)
          [items.last.id, items.last.parameters] == [id, { t: t, n: n }]
        end
      end
    end.flat_map(&:value)
    expect(results).to all(be(true))
    expect(results.size).to eq(800)
  end
end
