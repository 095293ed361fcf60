# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/child_process"

# On the smallest machine stacks Ruby gives a thread or a fiber (128 KB), the
# deepest nesting the gem accepts decodes, and one level more is a clear
# error: never a crash, never a hang (Ruby 3.1's crash reporter deadlocks on
# a stack overflow in native code). A child Ruby runs each case in a Thread
# and in a Fiber, with and without partial tool calls, and is killed if it
# hangs. docs/reliability.md has what each level of nesting costs.
RSpec.describe "small machine stacks" do
  lib = File.expand_path("../../lib", __dir__)
  small = { "RUBY_THREAD_MACHINE_STACK_SIZE" => "131072", "RUBY_FIBER_MACHINE_STACK_SIZE" => "131072" }
  script = <<~'RUBY'
    require "json"
    require "discourse_ai_stream"
    # `n` Hashes, each the only value of the one before: {k: {k: ... {v: 1}}}.
    def nest(n) = (n - 1).times.reduce({ v: 1 }) { |inner, _| { k: inner } }
    def gen(value) = JSON.generate(value, max_nesting: false)
    def depth(value) = value.is_a?(Hash) ? 1 + depth(value.values.first) : 0
    def call(arguments) = { choices: [{ delta: { tool_calls: [{ index: 0, id: "c", function: { name: "f", arguments: arguments } }] } }] }
    # A chunk Hash is 7 levels deep at its arguments; so is the JSON line.
    cases = {
      "Hash arguments" => [DiscourseAiStream::OpenAiMessageProcessor, 121, ->(p, n) { p.process_streamed_message(call(nest(n))) }],
      "JSON line, arguments string" => [DiscourseAiStream::OpenAiMessageProcessor, 128, ->(p, n) { p.decode_chunk("data: #{gen(call(gen(nest(n))))}\n\n") }],
      "JSON line, arguments object" => [DiscourseAiStream::OpenAiMessageProcessor, 120, ->(p, n) { p.decode_chunk("data: #{gen(call(nest(n)))}\n\n") }],
      "Hash arguments string" => [DiscourseAiStream::OpenAiMessageProcessor, 128, ->(p, n) { p.process_streamed_message(call(gen(nest(n)))) }],
      "Responses event" => [DiscourseAiStream::OpenAiResponsesMessageProcessor, 127, ->(p, n) { p.process_streamed_message({ type: "response.created", response: nest(n) }) }]
    }
    results = cases.flat_map do |name, (klass, deepest, read)|
      [Thread, Fiber].product([false, true], [deepest, deepest + 1]).map do |where, partial, n|
        run = lambda do
          processor = klass.new(partial_tool_calls: partial)
          items = [*read.call(processor, n), *processor.finish]
          ["ok", depth(items.first&.parameters)]
        rescue DiscourseAiStream::Error => e
          [e.class.name.split("::").last, e.respond_to?(:kind) ? e.kind.to_s : e.message[/nested deeper than \d+ levels/]]
        end
        [name, where.name, partial, n, where == Thread ? Thread.new(&run).value : Fiber.new(&run).resume]
      end
    end
    puts JSON.generate(results)
  RUBY

  it "decodes the deepest nesting the gem accepts, and refuses one level more with a clear error" do
    output = ChildProcess.run!(small, RbConfig.ruby, "-I", lib, "-e", script, timeout: 120)
    results = JSON.parse(output.lines.last)
    expect(results.size).to eq(40)
    results.each do |name, where, partial, n, outcome|
      label = "#{name}, #{n} levels, in a #{where}#{" with partial tool calls" if partial}"
      deepest = results.filter_map { |r| r[3] if r[0] == name }.min
      if n == deepest
        expect(outcome).to eq(["ok", name == "Responses event" ? 0 : n]), label
      else
        too_deep = %w[StreamError too_deep]
        too_deep = ["ToolArgumentsError", "nested deeper than 128 levels"] if name.include?("string")
        expect(outcome).to eq(too_deep), label
      end
    end
  end
end
