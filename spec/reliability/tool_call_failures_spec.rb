# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

# Ruby code the processor calls can raise: the ToolCall class (`new`,
# `partial=`, `parameters=`), or the Hash and Strings of a partial call's
# parameters, which belong to the user (frozen, or locked by an IO read into
# them). That costs the call concerned its partial updates, with an anomaly;
# the call still completes, every other call is unaffected, and the
# processor stays usable.
RSpec.describe "ToolCall failures" do
  def partial_processor(**options)
    DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, **options)
  end

  def stopped(processor)
    processor.anomalies.select { |a| a[:kind] == :partial_arguments_broken }
  end

  # A ToolCall class whose `new` raises KeyError for ids starting with "bad".
  def raising_for_bad_ids
    Class.new(DiscourseAiStream::ToolCall) do
      def initialize(id:, **kwargs)
        raise KeyError, "no #{id}" if id.start_with?("bad")

        super
      end
    end
  end

  it "a partial String locked by an IO read: the append fails in Ruby, not through Rust" do
    processor = partial_processor
    first = processor.process_streamed_message(tool_chunk([call("lock", "f", '{"a":"x', index: 0)]))
    reader, writer = IO.pipe
    thread = Thread.new { reader.read(4, first.parameters[:a]) }
    Thread.pass until thread.status == "sleep"
    begin
      # rb_str_cat raises "can't modify string; temporarily locked" here.
      expect(processor.process_streamed_message(tool_chunk([fragment(0, "yz")]))).to be_nil
    ensure
      writer.write("read")
      thread.join
      [reader, writer].each(&:close)
    end
    expect(stopped(processor)).to contain_exactly(include(id: "lock", name: "f",
                                                          message: /RuntimeError.*temporarily locked/))
    # Not left busy: every later call works, and the call completes in full.
    last = processor.process_streamed_message(tool_chunk([fragment(0, '!"}')], finish: "tool_calls"))
    expect(last).to equal(first)
    expect([last.parameters, last.partial?]).to eq([{ a: "xyz!" }, false])
    expect(processor.finish).to eq([])
  end

  it "a frozen parameters Hash stops that call's updates only; both calls complete" do
    processor = partial_processor
    first = processor.process_streamed_message(tool_chunk([call("a", "f", '{"x":"1', index: 0),
                                                           call("b", "g", '{"y":"2', index: 1)]))
    frozen, other = first
    frozen.parameters.freeze
    # A new key for the frozen Hash, more text for the other call.
    items = processor.process_streamed_message(tool_chunk([fragment(0, '","z":"3'), fragment(1, "2")]))
    expect(items).to equal(other)
    expect(other.parameters).to eq(y: "22")
    expect(stopped(processor)).to contain_exactly(include(id: "a", message: /FrozenError/))
    # No further progress for the frozen call, none lost for the other.
    expect(processor.process_streamed_message(tool_chunk([fragment(0, '4"}'), fragment(1, '2"}')])))
      .to equal(other)
    done = processor.finish
    expect(done).to eq([frozen, other])
    expect(done.map { |c| [c.id, c.parameters, c.partial?] })
      .to eq([["a", { x: "1", z: "34" }, false], ["b", { y: "222" }, false]])
    expect(done.first).to equal(frozen)
  end

  it "a ToolCall class whose partial= raises: no partial updates, complete calls at the end" do
    refusing = Class.new(DiscourseAiStream::ToolCall) do
      def partial=(_value)
        raise ArgumentError, "no partial tool calls here"
      end
    end
    processor = partial_processor(tool_call_class: refusing)
    streamed = [tool_chunk([call("a", "f", '{"q":"o', index: 0)]), tool_chunk([fragment(0, 'k"}')]),
                tool_chunk([call("b", "g", '{"n":', index: 1)]), tool_chunk([fragment(1, "1}")])]
    items = stream_items(processor, streamed)
    expect(items.map { |c| [c.class, c.id, c.parameters, c.partial?] })
      .to eq([[refusing, "a", { q: "ok" }, false], [refusing, "b", { n: 1 }, false]])
    expect(stopped(processor).map { |a| a[:id] }).to eq(%w[a b])
    expect(stopped(processor).first[:message]).to match(/ArgumentError \(no partial tool calls here\)/)
  end

  it "a ToolCall class whose new needs parameters: partial updates stop, completion builds it" do
    strict = Class.new(DiscourseAiStream::ToolCall) do
      def initialize(id:, name:, parameters:)
        super(id: id, name: name, parameters: parameters)
      end
    end
    processor = partial_processor(tool_call_class: strict)
    items = stream_items(processor, [tool_chunk([call("s", "f", '{"k":"', index: 0)]),
                                     tool_chunk([fragment(0, 'v"}')], finish: "tool_calls")])
    expect(items.map { |c| [c.class, c.id, c.parameters, c.partial?] }).to eq([[strict, "s", { k: "v" }, false]])
    expect(stopped(processor)).to contain_exactly(include(id: "s", message: /ArgumentError.*parameters/))
  end

  it "a ToolCall class whose new always raises: ToolCallError with the read's other items" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: raising_for_bad_ids)
    chunk = tool_chunk([call("ok1", "f", "{}", index: 0), call("bad", "g", '{"a":1}', index: 1),
                        call("ok2", "h", "{}", index: 2), call("bad2", "i", "{}", index: 3)], finish: "tool_calls")
    expect { processor.process_streamed_message(chunk) }.to raise_error(DiscourseAiStream::ToolCallError) { |e|
      expect(e).to be_a(DiscourseAiStream::Error)
      expect([e.tool_id, e.tool_name, e.error.class, e.error.message]).to eq(["bad", "g", KeyError, "no bad"])
      expect(e.tool_ids).to eq(%w[bad bad2])
      expect(e.message).to match(/KeyError \(no bad\).*"g".*"bad".*1 more call/)
      expect(ids_in(e.items)).to eq(%w[ok1 ok2])
    }
    expect(processor.process_streamed_message(text_chunk("usable"))).to eq("usable")
    expect(processor.finish).to eq([])
  end

  it "a ToolCall class that raises in a read that also raises a StreamError: the call is an anomaly, not lost" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: raising_for_bad_ids, strict: true)
    calls = sse([tool_chunk([call("ok", "f", "{}", index: 0), call("bad", "g", '{"a":1}', index: 1)],
                            finish: "tool_calls")], done: false)
    read = "#{calls}data: {\"choices\": [}\n\n"
    expect { processor.decode_chunk(read) }.to raise_error(DiscourseAiStream::StreamError) { |e|
      expect(ids_in(e.items)).to eq(%w[ok])
    }
    expect(processor.anomalies).to include(include(kind: :tool_call_failed, id: "bad", name: "g",
                                                   message: /KeyError \(no bad\).*not returned/))
  end

  it "lets an exception that is not a StandardError through, and the processor stays usable" do
    interrupting = Class.new(DiscourseAiStream::ToolCall) do
      def initialize(**kwargs)
        super
        # Only the partial ToolCall (built without parameters) is interrupted.
        raise Interrupt if parameters.empty?
      end
    end
    processor = partial_processor(tool_call_class: interrupting)
    expect { processor.process_streamed_message(tool_chunk([call("stop", "f", '{"a":"b', index: 0)])) }
      .to raise_error(Interrupt)
    expect(processor.process_streamed_message(text_chunk("usable"))).to eq("usable")
    expect(processor.process_streamed_message(tool_chunk([fragment(0, 'c"}')]))).to be_nil
    expect(processor.finish.map { |c| [c.id, c.parameters] }).to eq([["stop", { a: "bc" }]])
  end
end
