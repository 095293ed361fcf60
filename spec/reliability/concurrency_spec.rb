# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

RSpec.describe "concurrency" do
  def three_calls(prefix = "")
    tool_chunk([call("#{prefix}a", "f", '{"n":1}', index: 0), call("#{prefix}b", "f", '{"n":2}', index: 1),
                call("#{prefix}c", "f", '{"n":3}', index: 2)], finish: "tool_calls")
  end

  it "refuses a re-entrant call from a callback, and tells the caller that its own read was consumed" do
    processor = nil
    refused = []
    reentrant = Class.new(DiscourseAiStream::ToolCall) do
      define_method(:initialize) do |**kwargs|
        super(**kwargs)
        processor.process_streamed_message(ChunkHelpers.text_chunk("inner"))
      rescue DiscourseAiStream::ConcurrencyError => e
        refused << [e.consumed, e.retryable?]
        raise
      end
    end
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: reentrant)
    expect { processor.process_streamed_message(three_calls) }
      .to raise_error(DiscourseAiStream::ConcurrencyError, /re-entered this processor.*consumed/) { |e|
        expect([e.consumed, e.retryable?]).to eq([true, false])
      }
    # The inner call itself was refused before reading anything.
    expect(refused).to eq([[false, true]] * 3)
    # The class failed for each call, and each is named.
    expect(processor.anomalies.select { |a| a[:kind] == :tool_call_failed }.map { |a| a[:id] }).to eq(%w[a b c])
    # Still usable afterwards.
    expect(processor.process_streamed_message(text_chunk("later"))).to eq("later")
  end

  # The hook runs once the read is done, so what it would read next is
  # not consumed; a hook that fed the processor would recurse without end.
  it "refuses a read from the on_anomaly hook, which gets the error, and the stream is unharmed" do
    processor = nil
    refused = []
    orphan = ->(index) { { choices: [{ delta: { tool_calls: [{ index: index, function: { arguments: "x" } }] } }] } }
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: lambda do |_anomaly|
      processor.process_streamed_message(orphan.call(9))
    rescue DiscourseAiStream::ConcurrencyError => e
      refused << [e.consumed, e.retryable?]
    end)
    expect(processor.process_streamed_message(orphan.call(3))).to be_nil
    expect(refused).to eq([[false, true]])
    expect(processor.anomalies.map { |a| a[:kind] }).to eq([:orphan_fragment])
    expect(processor.process_streamed_message(text_chunk("later"))).to eq("later")
  end

  # The Hash reader runs Ruby code before the read takes the processor (a
  # non-UTF-8 String's encode, a key's to_s): a read from there is refused.
  it "refuses a read from Ruby code the Hash reader runs, and reads the chunk as it came" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    refused = []
    text = Class.new(String) do
      define_method(:encode) do |*args|
        processor.finish
      rescue DiscourseAiStream::ConcurrencyError => e
        refused << e.consumed
        super(*args)
      end
    end
    chunk = { choices: [{ delta: { content: text.new("caf\u00e9".encode("UTF-16LE")) } }] }
    expect(processor.process_streamed_message(chunk)).to eq("caf\u00e9")
    expect(refused).to eq([false])
    expect(processor.anomalies).to be_empty
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
        rescue DiscourseAiStream::ConcurrencyError => e
          # Refused before reading anything: the same chunk can be retried.
          e.retryable? ? :busy : raise
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
