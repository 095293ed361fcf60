# frozen_string_literal: true

require_relative "spec_helper"
require "open3"
require_relative "../examples/repro"

RSpec.describe "examples/repro.rb (bin/repro)" do
  it "prints every case of the bug report with every call returned" do
    io = StringIO.new
    expect(Repro.report(io)).to be(true)
    text = io.string
    expect(text).to include("stock processor: not loaded")
    expect(text.scan(/^  streamed:     (\d) of (\d) -> /)).to eq([%w[2 2], %w[2 2], %w[3 3], %w[3 3]])
    expect(text.scan(/^  non-streamed: (\d) of (\d) -> /)).to eq([%w[2 2], %w[2 2], %w[3 3], %w[3 3]])
    expect(text).to include('["call_1", "call_2", "call_3"]')
    expect(text).to end_with("every call came out\n")
  end

  it "prints the Responses API cases: calls added before either is done, deltas interleaved" do
    io = StringIO.new
    expect(Repro.report(io)).to be(true)
    text = io.string
    expect(text).to include("stock Responses processor: not loaded")
    ["events", "raw SSE", "whole"].each do |label|
      expect(text.scan(/^  responses #{label}: +(\d) of (\d) -> /)).to eq([%w[2 2], %w[2 2], %w[3 3], %w[3 3]]), label
    end
    expect(text).not_to include("wrong")
  end

  it "shows a site's stock processor beside the gem's when one is loaded" do
    # Stands in for the legacy processor's behaviour on this chunk: it keeps
    # tool_calls[0] and nothing else.
    first_only = Class.new do
      def initialize(partial_tool_calls: false)
        @partial = partial_tool_calls
      end

      def process_streamed_message(json)
        first = json.dig(:choices, 0, :delta, :tool_calls, 0)
        @tool = DiscourseAiStream::ToolCall.new(id: first[:id], name: first.dig(:function, :name))
        nil
      end

      def finish = [@tool].compact

      def process_message(json)
        json.dig(:choices, 0, :message, :tool_calls).map do |c|
          DiscourseAiStream::ToolCall.new(id: c[:id], name: "echo")
        end
      end
    end
    stub_const("DiscourseAi::Completions::OpenAiMessageProcessor", first_only)
    io = StringIO.new
    Repro.report(io)
    expect(io.string.scan(/^  stock streamed:     (\d) of (\d) -> (.*)$/).first).to eq(["1", "2", '["call_1"]'])
    expect(io.string.scan(/^  streamed:     (\d) of (\d)/).first).to eq(%w[2 2])
  end

  it "runs as bin/repro and exits 0" do
    root = File.expand_path("..", __dir__)
    out, status = Open3.capture2e(File.join(root, "bin", "repro"), chdir: root)
    expect(status).to be_success, out
    expect(out).to include("streamed:     3 of 3")
  end
end
