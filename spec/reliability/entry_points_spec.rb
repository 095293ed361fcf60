# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

# Every public method of the processor goes through the same guard: while a
# call is running (the processor is inside Ruby code it called: a ToolCall
# class, a parameters hook), any other call on it, from that code or from
# another thread, raises ConcurrencyError and changes nothing.
RSpec.describe "entry points" do
  # Each entry point with the arguments to call it with.
  entry_points = {
    process_streamed_message: [ChunkHelpers.text_chunk("x")],
    process_message: [ChunkHelpers.message([])],
    decode_chunk: ["data: {\"choices\":[]}\n\n"],
    finish: [],
    prompt_tokens: [], completion_tokens: [], cache_read_tokens: [], cache_write_tokens: [], cached_tokens: [],
    partial_tool_calls?: [], max_line_bytes: [], usage_mode: [], anomalies: [], dropped_anomalies: [],
    legacy_tool_call_ids: [], stop_reason: [], output_thinking?: [], round_trip?: []
  }.freeze

  define_method(:entry_points) { entry_points }

  # What each entry point does on a processor busy in another call.
  def outcomes(processor)
    entry_points.to_h do |name, args|
      processor.public_send(name, *args)
      [name, :ran]
    rescue DiscourseAiStream::ConcurrencyError => e
      [name, e.message[/already in use/] ? :busy : e.message]
    end
  end

  # A ToolCall class that calls `hook` (when set) when a call is made partial.
  def hooked_class
    Class.new(DiscourseAiStream::ToolCall) do
      class << self
        attr_accessor :hook
      end

      def partial=(value)
        super
        self.class.hook&.call(self) if value
      end
    end
  end

  def stream(processor)
    first = processor.process_streamed_message(tool_chunk([call("a", "f", '{"q":"x', index: 0)]))
    second = processor.process_streamed_message(tool_chunk([fragment(0, "y"), call("b", "g", '{"r":"', index: 1)]))
    last = processor.process_streamed_message(tool_chunk([fragment(0, 'z"}'), fragment(1, 's"}')],
                                                         finish: "tool_calls"))
    [first, second, last, processor.finish]
  end

  let(:busy) { entry_points.keys.to_h { |name| [name, :busy] } }

  it "lists every public method of the processor but the Ruby-side ones (inspect and the on_anomaly hook)" do
    ruby_side = %i[inspect on_anomaly on_anomaly=]
    public_methods = DiscourseAiStream::OpenAiMessageProcessor.public_instance_methods(false) - ruby_side
    expect(entry_points.keys).to match_array(public_methods)
  end

  it "refuses every entry point re-entered from a ToolCall callback, and the stream is unharmed" do
    klass = hooked_class
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, tool_call_class: klass,
                                                              simulate_legacy: true)
    seen = []
    klass.hook = lambda { |tool_call|
      seen << [tool_call.id, outcomes(processor)]
      seen << processor.inspect
    }
    first, second, last, done = stream(processor)
    klass.hook = nil
    # Both calls were made partial (one callback each), every entry point refused.
    expect(seen).to eq([["a", busy], "#<DiscourseAiStream::OpenAiMessageProcessor (busy or stopped)>",
                        ["b", busy], "#<DiscourseAiStream::OpenAiMessageProcessor (busy or stopped)>"])
    # The refused finish cleared nothing: the same objects, updated in place.
    a, b = second
    expect(a).to equal(first)
    expect(done).to eq([])
    expect(last.map(&:object_id)).to eq([a, b].map(&:object_id))
    expect(last.map { |c| [c.id, c.parameters, c.partial?] })
      .to eq([["a", { q: "xyz" }, false], ["b", { r: "s" }, false]])
    # b came second in its chunk: the legacy processor would have dropped it.
    expect(processor.legacy_tool_call_ids).to eq(%w[a])
    expect(processor.anomalies).to eq([])
  end

  it "refuses every entry point from another thread while a call is inside Ruby code" do
    klass = hooked_class
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, tool_call_class: klass)
    inside = Queue.new
    resume = Queue.new
    klass.hook = lambda { |_|
      inside << true
      resume.pop
    }
    worker = Thread.new { stream(processor) }
    from_other_thread = []
    2.times do
      inside.pop
      from_other_thread << outcomes(processor)
      resume << true
    end
    first, second, last, done = worker.value
    expect(from_other_thread).to eq([busy, busy])
    # The refused finish forgot no call: the same objects, completed in place.
    expect(second.first).to equal(first)
    expect(last.first).to equal(first)
    expect(done).to eq([])
    expect(last.map { |c| [c.id, c.parameters] }).to eq([["a", { q: "xyz" }], ["b", { r: "s" }]])
  end

  it "refuses a finish from a ToolCall#parameters hook without forgetting the calls" do
    processor = nil
    refused = []
    klass = Class.new(DiscourseAiStream::ToolCall) do
      define_method(:parameters) do
        if partial?
          begin
            processor.finish
          rescue DiscourseAiStream::ConcurrencyError
            refused << id
          end
        end
        super()
      end
    end
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, tool_call_class: klass)
    first, second, last, done = stream(processor)
    expect(refused).to eq(%w[a b])
    expect(second.first).to equal(first)
    expect(last.first).to equal(first)
    expect(done).to eq([])
    expect(last.map { |c| [c.id, c.parameters, c.partial?] })
      .to eq([["a", { q: "xyz" }, false], ["b", { r: "s" }, false]])
  end

  it "lets an on_anomaly hook read the processor: anomalies are delivered after the call" do
    read = []
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: lambda { |a|
      read << [a[:kind], processor.anomalies.size, processor.prompt_tokens]
    })
    processor.process_streamed_message(tool_chunk([fragment(7, "{}")]))
    expect(read).to eq([[:orphan_fragment, 1, nil]])
  end

  it "refuses dup and clone with a TypeError instead of handing out an object with no state" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true)
    processor.process_streamed_message(tool_chunk([call("a", "f", '{"q":"x"', index: 0)]))
    %i[dup clone].each do |copy|
      expect { processor.public_send(copy) }.to raise_error(TypeError, %r{cannot be copied \(dup/clone\)})
    end
    expect(processor.finish.map { |c| [c.id, c.parameters] }).to eq([["a", { q: "x" }]])
  end

  it "checks its receiver: a foreign object raises TypeError, a subclass or an uninitialized instance no crash" do
    klass = DiscourseAiStream::OpenAiMessageProcessor
    entry_points.each do |name, args|
      expect { klass.instance_method(name).bind_call(Object.new, *args) }.to raise_error(TypeError)
      expect { klass.allocate.public_send(name, *args) }
        .to raise_error(DiscourseAiStream::InternalError, /before initialize/)
    end
    expect(Class.new(klass).new.process_streamed_message(text_chunk(+"x"))).to eq("x")
  end
end
