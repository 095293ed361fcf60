# frozen_string_literal: true

require "timeout"
require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/responses_streams"

# An exception that is not the gem's own, raised in or landing on Ruby code
# the processor calls while it builds a read's items (the ToolCall class,
# the on_anomaly hook), reaches the caller as it is, and the read loses
# nothing: its items come out of the next read or of finish, each call
# named by an :interrupted anomaly. What docs/reliability.md promises.
RSpec.describe "interrupted reads" do
  # Not a StandardError, as a job runner's shutdown.
  shutdown = Class.new(Exception) # rubocop:disable Lint/InheritException
  # A StandardError a caller's deadline raises (Timeout.timeout(t, klass)).
  deadline = Class.new(StandardError)

  let(:inside) { Queue.new }

  # A ToolCall class that, building the call `id`, says so on `inside`, then
  # waits until an exception from another thread is pending. The processor
  # defers those while its callbacks run, so it lands once the read's items
  # are built; without that, it would land in the `sleep`.
  def waiting(id)
    queue = inside
    Class.new(DiscourseAiStream::ToolCall) do
      define_method(:initialize) do |**kwargs|
        if kwargs[:id] == id
          queue << true
          sleep 0.01 until Thread.pending_interrupt?
        end
        super(**kwargs)
      end
    end
  end

  # Runs the block on a thread, does `land` to it once a callback is inside,
  # and returns what the block raised (nil when it returned).
  def on_thread(land)
    thread = Thread.new do
      yield
      nil
    rescue Exception => e # rubocop:disable Lint/RescueException
      e
    end
    inside.pop
    land.call(thread)
    thread.value
  end

  def three_calls_sse
    sse([tool_chunk([call("call_0", "f", "{}", index: 0), call("call_1", "f", "{}", index: 1),
                     call("call_2", "f", "{}", index: 2)], finish: "tool_calls")], done: false)
  end

  # A read whose one call has no id: the generated id is an anomaly.
  def nameless_sse
    sse([tool_chunk([{ index: 0, function: { name: "f", arguments: "{}" } }], finish: "tool_calls")])
  end

  def interrupted(processor)
    processor.anomalies.select { |a| a[:kind] == :interrupted }
  end

  describe "a whole read lost without a trace" do
    # Timeout's clock starts before the read: under GC.stress it can run out
    # before the read begins (the other examples wait for the callback).
    it "keeps the calls of a read a Timeout interrupted for finish, and names them", gc_stress: false do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: waiting("call_1"))
      expect { Timeout.timeout(0.2) { processor.decode_chunk(three_calls_sse) } }.to raise_error(Timeout::Error)
      expect(processor.finish.map(&:id)).to eq(%w[call_0 call_1 call_2])
      expect(interrupted(processor).map { |a| a[:id] }).to eq(%w[call_0 call_1 call_2])
      expect(interrupted(processor).first[:message]).to match(/interrupted this read/)
    end

    it "keeps the result of a read whose on_anomaly hook raised a non-StandardError" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: ->(_) { raise Interrupt })
      expect { processor.decode_chunk(nameless_sse) }.to raise_error(Interrupt)
      done = processor.finish
      expect(done.map(&:name)).to eq(["f"])
      expect(interrupted(processor)).to contain_exactly(include(id: done.first.id, message: /Interrupt/))
    end

    it "keeps them when the thread is killed, for finish on another thread" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: waiting("call_0"))
      expect(on_thread(:kill.to_proc) { processor.decode_chunk(three_calls_sse) }).to be_nil
      expect(processor.finish.map(&:id)).to eq(%w[call_0 call_1 call_2])
    end

    it "raises a Thread#raise as the same object, and the next read returns the items before its own" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: waiting("call_2"))
      stop = shutdown.new("shutting down")
      raised = on_thread(->(t) { t.raise(stop) }) { processor.decode_chunk(three_calls_sse) }
      expect(raised).to equal(stop)
      GC.start
      GC.compact if GC.respond_to?(:compact)
      later = processor.decode_chunk(sse([text_chunk("after")], done: false))
      expect(later.map { |i| i.is_a?(String) ? i : i.id }).to eq(%w[call_0 call_1 call_2 after])
      expect(processor.finish).to eq([])
    end

    it "lets a throw out of the hook reach its catch, and keeps the result" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: ->(_) { throw :stop })
      expect(catch(:stop) { processor.decode_chunk(nameless_sse) }).to be_nil
      expect(processor.finish.map(&:name)).to eq(["f"])
    end

    it "does not count an interrupted finish as finished: the next finish returns its calls" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: waiting("b"))
      processor.process_streamed_message(tool_chunk([call("a", "f", '{"x":1}', index: 0),
                                                     call("b", "g", '{"y":2}', index: 1)]))
      expect(on_thread(->(t) { t.raise(shutdown) }) { processor.finish }).to be_a(shutdown)
      expect(processor.finish.map { |c| [c.id, c.parameters] }).to eq([["a", { x: 1 }], ["b", { y: 2 }]])
      # And the next stream is a stream of its own.
      expect(processor.process_message(message([call("c", "h", "{}")])).map(&:id)).to eq(["c"])
    end

    it "keeps the Responses processor's calls the same way" do
      processor = DiscourseAiStream::OpenAiResponsesMessageProcessor.new(tool_call_class: waiting("call_a"))
      bytes = ResponsesStreams.sse(ResponsesStreams.two_interleaved_calls)
      expect(on_thread(->(t) { t.raise(shutdown) }) { processor.decode_chunk(bytes) }).to be_a(shutdown)
      expect(processor.finish.map(&:id)).to eq(%w[call_a call_b])
      expect(interrupted(processor).map { |a| a[:id] }).to eq(%w[call_a call_b])
    end

    it "returns a partial ToolCall held from an interrupted read once, where it was held" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, tool_call_class: waiting("p"))
      first = tool_chunk([call("p", "f", '{"a":"x', index: 0)])
      expect(on_thread(->(t) { t.raise(shutdown) }) { processor.process_streamed_message(first) }).to be_a(shutdown)
      item = processor.process_streamed_message(tool_chunk([fragment(0, 'y"}')], finish: "tool_calls"))
      expect(item).to be_a(DiscourseAiStream::ToolCall)
      expect([item.id, item.parameters, item.partial?]).to eq(["p", { a: "xy" }, false])
    end

    it "counts a non-StandardError a ToolCall class raises itself as its failure for that call only" do
      failing = Class.new(DiscourseAiStream::ToolCall) do
        def initialize(**kwargs)
          raise Interrupt if kwargs[:id] == "call_1"

          super
        end
      end
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: failing)
      expect { processor.decode_chunk(three_calls_sse) }.to raise_error(Interrupt)
      expect(processor.finish.map(&:id)).to eq(%w[call_0 call_2])
      expect(processor.anomalies).to include(include(kind: :tool_call_failed, id: "call_1", message: /Interrupt/))
      expect(interrupted(processor).map { |a| a[:id] }).to eq(%w[call_0 call_2])
    end

    it "calls no callback after a throw out of the ToolCall class, and names the calls it did not build" do
      throwing = Class.new(DiscourseAiStream::ToolCall) do
        def initialize(**kwargs)
          throw :out if kwargs[:id] == "call_1"

          super
        end
      end
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: throwing)
      catch(:out) { processor.decode_chunk(three_calls_sse) }
      expect(processor.finish.map(&:id)).to eq(%w[call_0])
      failed = processor.anomalies.select { |a| a[:kind] == :tool_call_failed }
      expect(failed.map { |a| a[:id] }).to eq(%w[call_1 call_2])
      expect(failed.last[:message]).to match(/not called/)
    end
  end

  # An instrumentation wrapper gone wrong: Thread.handle_interrupt that
  # does not yield. The read is built all the same (unmasked).
  it "builds a read's items when Thread.handle_interrupt does not yield", gc_stress: false do
    swallowing = Module.new do
      def handle_interrupt(*args, &) = Thread.current[:das_swallow] ? :swallowed : super
    end
    Thread.singleton_class.prepend(swallowing)
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    Thread.current[:das_swallow] = true
    items = processor.decode_chunk(three_calls_sse)
    expect(items.map(&:id)).to eq(%w[call_0 call_1 call_2])
  ensure
    Thread.current[:das_swallow] = nil
  end

  describe "asynchronous StandardErrors" do
    it "raises a Timeout's own class landing while a partial ToolCall is built, not an anomaly", gc_stress: false do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, tool_call_class: waiting("p"))
      chunk = tool_chunk([call("p", "f", '{"a":"x', index: 0)])
      expect { Timeout.timeout(0.2, deadline) { processor.process_streamed_message(chunk) } }
        .to raise_error(deadline)
      expect(processor.anomalies.map { |a| a[:kind] }).not_to include(:partial_arguments_broken)
      held = processor.process_streamed_message(tool_chunk([fragment(0, "z")]))
      expect([held.id, held.parameters, held.partial?]).to eq(["p", { a: "xz" }, true])
    end

    it "raises a Thread#raise of a StandardError landing while a completed call is built as itself" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: waiting("call_0"))
      raised = on_thread(->(t) { t.raise(deadline, "too late") }) { processor.decode_chunk(three_calls_sse) }
      expect(raised).to be_a(deadline)
      expect(raised).not_to be_a(DiscourseAiStream::Error)
      expect(processor.finish.map(&:id)).to eq(%w[call_0 call_1 call_2])
    end

    it "raises one landing in the on_anomaly hook instead of warning about it" do
      queue = inside
      hook = lambda do |_|
        queue << true
        sleep 0.01 until Thread.pending_interrupt?
      end
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: hook)
      raised = nil
      expect { raised = on_thread(->(t) { t.raise(deadline) }) { processor.decode_chunk(nameless_sse) } }
        .not_to output.to_stderr
      expect(raised).to be_a(deadline)
      expect(processor.finish.map(&:name)).to eq(["f"])
    end
  end

  describe "a Fiber suspended inside a callback" do
    it "keeps the processor refused while it is suspended, and frees it when it is raised into" do
      suspending = Class.new(DiscourseAiStream::ToolCall) do
        def initialize(**kwargs)
          Fiber.yield if kwargs[:id] == "call_1"
          super
        end
      end
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: suspending)
      fiber = Fiber.new { processor.decode_chunk(three_calls_sse) }
      fiber.resume
      # Nothing is asserted while it is suspended: its thread (this one)
      # defers Thread#raise and Thread#kill until it resumes.
      busy = begin
        processor.finish
      rescue DiscourseAiStream::ConcurrencyError => e
        e
      end
      raised = begin
        fiber.raise(Interrupt)
      rescue Interrupt => e
        e
      end
      expect([busy.message, busy.retryable?]).to match([/Fiber suspended/, true])
      expect(raised).to be_a(Interrupt)
      expect(processor.finish.map(&:id)).to eq(%w[call_0 call_2])
      expect(processor.anomalies).to include(include(kind: :tool_call_failed, id: "call_1"))
    end
  end
end
