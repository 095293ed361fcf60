# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/responses_streams"

# A Thinking class that raises costs only the reasoning item it was
# building: a :thinking_failed anomaly, and every other item of the read,
# its tool calls first, is built as usual (docs/errors-and-anomalies.md).
RSpec.describe "Thinking failures" do
  include ResponsesStreams

  # A Thinking class that raises on its first `count` items.
  def refusing(count)
    Class.new(DiscourseAiStream::Thinking) do
      define_method(:initialize) do |**keywords|
        count -= 1
        raise ArgumentError, "thinking refused" if count >= 0

        super(**keywords)
      end
    end
  end

  def failed(processor) = processor.anomalies.select { |a| a[:kind] == :thinking_failed }

  it "keeps the call of a whole chat message whose reasoning the class refuses" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(output_thinking: true, thinking_class: refusing(1))
    body = { choices: [{ index: 0, message: { role: "assistant", reasoning_content: "let me think",
                                              tool_calls: [call("c1", "f", '{"a":1}')] },
                         finish_reason: "tool_calls" }] }
    expect(processor.process_message(body).map { |c| [c.id, c.parameters] }).to eq([["c1", { a: 1 }]])
    expect(failed(processor).map { |a| a[:message] }).to contain_exactly(include("ArgumentError (thinking refused)"))
  end

  it "keeps the call of a streamed read whose reasoning the class refuses" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(output_thinking: true, thinking_class: refusing(1))
    header = { reasoning_content: "hmm", tool_calls: [call("c1", "f", "", index: 0)] }
    chunks = [{ choices: [{ index: 0, delta: header }] }, tool_chunk([fragment(0, '{"a":1}')]), finish_chunk]
    items = processor.decode_chunk(chunks.map { |c| "data: #{JSON.generate(c)}\n\n" }.join) + processor.finish
    expect(items.map { |c| [c.id, c.parameters] }).to eq([["c1", { a: 1 }]])
    expect(failed(processor).size).to eq(1)
  end

  it "keeps a Responses call's partial updates in step when the reasoning before them is refused" do
    processor = DiscourseAiStream::OpenAiResponsesMessageProcessor.new(
      partial_tool_calls: true, output_thinking: true, thinking_class: refusing(1)
    )
    reasoning = { id: "rs_1", type: "reasoning", summary: [] }
    search = function_call("fc_a", "call_a", "search")
    summary = { type: "response.reasoning_summary_text.delta", output_index: 0, item_id: "rs_1", delta: "thinking" }
    reads = [[added(0, reasoning), summary, added(1, search),
              args_delta(1, "fc_a", '{"query":"ru')],
             [args_delta(1, "fc_a", 'by", "n": [1,')],
             [args_delta(1, "fc_a", "2]}"), done(1, search.merge(arguments: '{"query":"ruby", "n": [1,2]}')),
              completed({ input_tokens: 5, output_tokens: 1 })]]
    items = reads.flat_map { |events| processor.decode_chunk(sse(events)) } + processor.finish
    calls = items.grep(DiscourseAiStream::ToolCall).uniq(&:object_id)
    expect(calls.map { |c| [c.id, c.parameters, c.partial?] }).to eq([["call_a", { query: "ruby", n: [1, 2] }, false]])
    expect(failed(processor).size).to eq(1)
    expect(processor.anomalies.map { |a| a[:kind] }).not_to include(:partial_arguments_broken)
  end
end
