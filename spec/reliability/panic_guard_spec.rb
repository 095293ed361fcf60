# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/child_process"

# A panic in Rust must never reach Ruby as `fatal` (which ends the process):
# it becomes DiscourseAiStream::InternalError, and the processor it happened
# in refuses to be used again, through every entry point.
#
# The hooks that panic on purpose exist only in a process started with
# DISCOURSE_AI_STREAM_TEST_HOOKS=1, so these examples run a child Ruby.
RSpec.describe "panic guard" do
  lib = File.expand_path("../../lib", __dir__)
  hooks_env = { "DISCOURSE_AI_STREAM_TEST_HOOKS" => "1" }

  # Runs `body` in a child Ruby with the hooks; returns what it printed as JSON.
  def self.child_script(body)
    <<~RUBY
      require "json"
      require "discourse_ai_stream"
      def text_chunk(text) = { choices: [{ index: 0, delta: { content: text } }] }
      def message(calls) = { choices: [{ index: 0, message: { role: "assistant", tool_calls: calls } }] }
      def sse(chunks) = chunks.map { |c| "data: \#{JSON.generate(c)}\n\n" }.join
      def outcome
        [:ok, yield.inspect]
      rescue Exception => e # rubocop:disable Lint/RescueException
        [e.class.name, e.message, e.is_a?(DiscourseAiStream::Error), e.is_a?(StandardError)]
      end
      result = (#{body})
      puts JSON.generate(result)
    RUBY
  end

  define_method(:run_child) do |body|
    JSON.parse(ChildProcess.ruby!(hooks_env, "-I", lib, "-e", self.class.child_script(body)))
  end

  it "defines no panic hook in a normal process" do
    skip "this process was started with the test hooks" if ENV["DISCOURSE_AI_STREAM_TEST_HOOKS"] == "1"

    expect(DiscourseAiStream::Native).not_to respond_to(:panic_for_tests)
    expect(DiscourseAiStream::Native.singleton_class.private_method_defined?(:panic_for_tests)).to be(false)
    processor_class = DiscourseAiStream::OpenAiMessageProcessor
    expect(processor_class.private_method_defined?(:__panic_for_tests)).to be(false)
    expect { DiscourseAiStream::OpenAiMessageProcessor.new.__send__(:__panic_for_tests) }.to raise_error(NoMethodError)
    expect(DiscourseAiStream::OpenAiResponsesMessageProcessor.private_method_defined?(:__panic_for_tests)).to be(false)
  end

  it "turns a panic in a native function into InternalError, and the process keeps running" do
    results = run_child(<<~RUBY)
      [*Array.new(3) { outcome { DiscourseAiStream::Native.panic_for_tests("boom") } },
       outcome { DiscourseAiStream::OpenAiMessageProcessor.new.decode_chunk(sse([text_chunk("ok")])) }]
    RUBY
    panicked = ["DiscourseAiStream::InternalError", "internal error in discourse_ai_stream: boom", true, true]
    expect(results).to eq([panicked, panicked, panicked, ["ok", '["ok"]']])
  end

  it "poisons the processor a panic happened in, every entry point of it but the anomaly readers, and only that one" do
    results = run_child(<<~RUBY)
      broken = DiscourseAiStream::OpenAiMessageProcessor.new
      healthy = DiscourseAiStream::OpenAiMessageProcessor.new
      broken.process_streamed_message({ choices: [{ delta: { tool_calls: [{ index: 3, function: { arguments: "x" } }] } }] })
      calls = { process_streamed_message: [text_chunk("x")], process_message: [message([])],
                decode_chunk: ["data: {}\\n\\n"], finish: [], prompt_tokens: [], completion_tokens: [],
                cache_read_tokens: [], cache_write_tokens: [], cached_tokens: [], partial_tool_calls?: [],
                max_line_bytes: [], usage_mode: [], legacy_tool_call_ids: [] }
      { panic: outcome { broken.__send__(:__panic_for_tests) },
        after: calls.to_h { |name, args| [name, outcome { broken.public_send(name, *args) }[0..1]] },
        anomalies: outcome { broken.anomalies.map { |a| a[:kind] } },
        dropped: outcome { broken.dropped_anomalies },
        inspect: broken.inspect,
        healthy: outcome { healthy.process_streamed_message(text_chunk("x")) } }
    RUBY
    expect(results["panic"]).to eq(["DiscourseAiStream::InternalError",
                                    "internal error in discourse_ai_stream: deliberate panic for tests", true, true])
    expect(results["after"].keys.size).to eq(13)
    expect(results["after"].values.uniq).to eq([["DiscourseAiStream::InternalError",
                                                 "internal error in discourse_ai_stream: " \
                                                 "this processor stopped after an earlier internal error"]])
    # What it recorded before the error stays readable: it explains the error.
    expect(results["anomalies"]).to eq(["ok", "[:orphan_fragment]"])
    expect(results["dropped"]).to eq(%w[ok 0])
    expect(results["inspect"]).to eq("#<DiscourseAiStream::OpenAiMessageProcessor (busy or stopped)>")
    expect(results["healthy"]).to eq(["ok", '"x"'])
  end

  it "poisons a Responses processor the same way: every entry point refused, its anomalies still readable" do
    results = run_child(<<~RUBY)
      broken = DiscourseAiStream::OpenAiResponsesMessageProcessor.new
      broken.process_streamed_message({ type: "response.function_call_arguments.delta", item_id: "nope",
                                        output_index: 9, delta: "x" })
      calls = { process_streamed_message: [{ type: "response.output_text.delta", delta: "x" }],
                decode_chunk: ["data: {}\\n\\n"], finish: [], prompt_tokens: [], completion_tokens: [] }
      { panic: outcome { broken.__send__(:__panic_for_tests) },
        after: calls.to_h { |name, args| [name, outcome { broken.public_send(name, *args) }[0..1]] },
        anomalies: outcome { broken.anomalies.map { |a| a[:kind] } },
        dropped: outcome { broken.dropped_anomalies } }
    RUBY
    expect(results["panic"][0]).to eq("DiscourseAiStream::InternalError")
    expect(results["after"].values.uniq).to eq([["DiscourseAiStream::InternalError",
                                                 "internal error in discourse_ai_stream: " \
                                                 "this processor stopped after an earlier internal error"]])
    expect(results["anomalies"]).to eq(["ok", "[:orphan_fragment]"])
    expect(results["dropped"]).to eq(%w[ok 0])
  end
end
