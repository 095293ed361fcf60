# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/stressed_processor"

# Every path where the native code creates or holds Ruby objects. Each
# processor call runs with GC.stress on (a full collection at every
# allocation, so an object the native code holds without marking it is freed
# at once and the example fails or crashes), and collections and compactions
# run between steps. The rest of each example runs without stress, which
# keeps the file fast enough for every rspec run; bin/test also runs the
# whole file under DISCOURSE_AI_STREAM_GC_STRESS=1.
RSpec.describe "GC safety" do
  def stressed(processor)
    StressedProcessor.new(processor)
  end

  def churn
    GC.start(full_mark: true, immediate_sweep: true)
    GC.compact if GC.respond_to?(:compact)
  end

  it "keeps partial ToolCalls, their parameters and open containers alive between calls" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true))
    first = processor.process_streamed_message(tool_chunk([call("p", "f", '{"a":"x', index: 0)]))
    churn
    processor.process_streamed_message(tool_chunk([fragment(0, 'y","list":[{"k":"v')]))
    churn
    processor.process_streamed_message(tool_chunk([fragment(0, 'w"},2],"n":{"m":"z')]))
    churn
    last = processor.process_streamed_message(tool_chunk([fragment(0, '"}}')], finish: "stop"))
    expect(last).to equal(first)
    expect(last.parameters).to eq(a: "xy", list: [{ k: "vw" }, 2], n: { m: "z" })
    expect(last.partial?).to be(false)
  end

  it "keeps the items of a raw read and of errors alive" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true))
    items = processor.decode_chunk(sse([text_chunk("a"), tool_chunk([call("r", "f", '{"q":"', index: 0)])],
                                       done: false))
    churn
    expect(items.first).to eq("a")
    error = begin
      processor.decode_chunk(sse([text_chunk("b"), { error: { message: "no", detail: [1, { x: "y" }] } }]))
    rescue DiscourseAiStream::ProviderError => e
      e
    end
    churn
    expect(error.items).to eq(["b"])
    expect(error.payload).to eq(message: "no", detail: [1, { x: "y" }])
  end

  it "survives collections inside ToolCall construction and anomaly hooks" do
    collecting = Class.new(DiscourseAiStream::ToolCall) do
      def initialize(**kwargs)
        GC.start
        super
      end
    end
    seen = []
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(
                           partial_tool_calls: true, tool_call_class: collecting, on_anomaly: lambda { |a|
                             GC.start
                             seen << a
                           }
                         ))
    items = stream_items(processor, [tool_chunk([{ index: 0, function: { name: "f", arguments: '{"z":[1,' } },
                                                 call("b", "g", '{"s":"t"}', index: 1)]),
                                     tool_chunk([fragment(0, "2]}")], finish: "tool_calls")])
    churn
    expect(items.uniq.map(&:parameters)).to eq([{ z: [1, 2] }, { s: "t" }])
    expect(seen.map { |a| a[:kind] }).to eq([:generated_id])
  end

  it "reads Hashes whose values are collected right after" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
    3.times do |i|
      chunk = parsed(tool_chunk([call("h#{i}", "f", JSON.generate(v: "x" * 50), index: i)]))
      processor.process_streamed_message(chunk)
      churn
    end
    expect(processor.finish.map(&:id)).to eq(%w[h0 h1 h2])
  end

  it "raises ToolArgumentsError with its data intact" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
    processor.process_streamed_message(tool_chunk([call("ok", "f", "{}", index: 0), call("bad", "g", "{[", index: 1)]))
    error = begin
      processor.finish
    rescue DiscourseAiStream::ToolArgumentsError => e
      e
    end
    churn
    expect([error.tool_id, error.raw_arguments, error.items.map(&:id)]).to eq(["bad", "{[", ["ok"]])
  end
end
