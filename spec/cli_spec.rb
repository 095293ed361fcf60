# frozen_string_literal: true

require "fileutils"
require "open3"
require "rbconfig"
require "discourse_ai_stream/cli"
require_relative "support/broken_build"

RSpec.describe DiscourseAiStream::CLI do
  fixtures = File.expand_path("fixtures/audit", __dir__)
  define_method(:fixture) { |name| File.join(fixtures, name) }

  let(:stdout) { StringIO.new }
  let(:stderr) { StringIO.new }

  def cli(*argv, stdin: StringIO.new)
    described_class.new(stdin: stdin, stdout: stdout, stderr: stderr).run(argv)
  end

  describe "replay" do
    it "prints the text, every tool call, the usage and the anomalies" do
      expect(cli("replay", fixture("mistral_parallel.sse"))).to eq(0)
      expect(stdout.string).to eq(<<~TEXT)
        protocol: chat
        text: ""
        tool call 1: get_weather (id bM0Xl0KSh) {"city":"Paris"}
        tool call 2: get_local_time (id kgOYVL46d) {"timezone":"Europe/Paris"}
        usage (as_sent): prompt_tokens 172, completion_tokens 23, cache_read_tokens 0, cache_write_tokens 0
        anomalies: none
      TEXT
    end

    it "prints machine-readable JSON with --json" do
      expect(cli("replay", "--json", fixture("openai_sequential.sse"))).to eq(0)
      out = JSON.parse(stdout.string, symbolize_names: true)
      expect(out[:tool_calls]).to eq([
                                       { id: "call_weather1", name: "get_weather", parameters: { city: "Paris" } },
                                       { id: "call_time1", name: "get_local_time",
                                         parameters: { timezone: "Europe/Paris" } }
                                     ])
      expect(out[:usage]).to eq(prompt_tokens: 120, completion_tokens: 40, cache_read_tokens: 64,
                                cache_write_tokens: 0, mode: "as_sent")
      expect(out).to include(protocol: "chat", text: "", anomalies: [], error: nil)
      expect(out).not_to have_key(:partial_updates)
    end

    it "shows the partial updates as they stream with --partial" do
      expect(cli("replay", "--partial", "--json", fixture("openai_sequential.sse"))).to eq(0)
      out = JSON.parse(stdout.string, symbolize_names: true)
      expect(out[:partial_updates].map { |call| [call[:id], call[:parameters]] })
        .to eq([["call_weather1", { city: "Pa" }], ["call_weather1", { city: "Paris" }],
                ["call_time1", { timezone: "Europe/Paris" }]])
      expect(out[:tool_calls].map { |call| call[:id] }).to eq(%w[call_weather1 call_time1])
    end

    it "reports prompt_tokens net of cache with --usage net_of_cache (or its former name, current)" do
      %w[net_of_cache current].each do |mode|
        cli("replay", "--usage", mode, fixture("openai_sequential.sse"))
        expect(stdout.string).to include("usage (net_of_cache): prompt_tokens 56, completion_tokens 40, " \
                                         "cache_read_tokens 64")
      end
    end

    it "detects a Responses API stream and prints its calls; --protocol overrides" do
      item = { type: "function_call", id: "fc_1", call_id: "call_1", name: "search", arguments: "" }
      events = [{ type: "response.output_item.added", output_index: 0, item: item },
                { type: "response.function_call_arguments.delta", output_index: 0, item_id: "fc_1",
                  delta: '{"q":"x"}' },
                { type: "response.output_item.done", output_index: 0, item: item.merge(arguments: '{"q":"x"}') }]
      sse = events.map { |event| "event: #{event[:type]}\ndata: #{JSON.generate(event)}\n\n" }.join
      expect(cli("replay", "-", stdin: StringIO.new(sse))).to eq(0)
      expect(stdout.string).to start_with("protocol: responses\n")
      expect(stdout.string).to include(%(tool call 1: search (id call_1) {"q":"x"}), "usage (net_of_cache)")

      stdout.truncate(0)
      stdout.rewind
      expect(cli("replay", "--protocol", "chat", "-", stdin: StringIO.new(sse))).to eq(1)
      expect(stdout.string).to include("protocol: chat\n", "tool calls: none",
                                       "anomaly wrong_protocol: no chat completion chunk")
    end

    # The error event is both APIs' (the chat processor reads it as its own),
    # so the stream's other events decide.
    it "detects a Responses API stream that ends in an error event" do
      item = { type: "function_call", id: "fc_1", call_id: "call_1", name: "search", arguments: "" }
      events = [{ type: "response.output_item.added", output_index: 0, item: item },
                { type: "response.function_call_arguments.delta", output_index: 0, item_id: "fc_1", delta: "{}" },
                { type: "error", code: "server_error", message: "boom" }]
      sse = events.map { |event| "event: #{event[:type]}\ndata: #{JSON.generate(event)}\n\n" }.join
      expect(cli("replay", "-", stdin: StringIO.new(sse))).to eq(1)
      expect(stdout.string).to start_with("protocol: responses\n")
      expect(stdout.string).to include("error: DiscourseAiStream::ProviderError: boom")

      stdout.truncate(0)
      stdout.rewind
      early = [{ type: "response.created", response: { id: "resp_1", status: "in_progress" } },
               { type: "error", code: "rate_limit_exceeded", message: "slow down" }]
      sse = early.map { |event| "event: #{event[:type]}\ndata: #{JSON.generate(event)}\n\n" }.join
      expect(cli("replay", "-", stdin: StringIO.new(sse))).to eq(1)
      expect(stdout.string).to start_with("protocol: responses\n")
      expect(stdout.string).to include("error: DiscourseAiStream::ProviderError: slow down")

      # A chat stream that fails with an error of no type (either API's) is
      # the chat API's: the Responses processor skipped its chunk.
      stdout.truncate(0)
      stdout.rewind
      chunk = { object: "chat.completion.chunk", choices: [{ index: 0, delta: { role: "assistant", content: "" } }] }
      sse = [chunk, { error: { message: "overloaded", code: 503 } }].map { |e| "data: #{JSON.generate(e)}\n\n" }.join
      expect(cli("replay", "-", stdin: StringIO.new(sse))).to eq(1)
      expect(stdout.string).to start_with("protocol: chat\n")
      expect(stdout.string).to include("error: DiscourseAiStream::ProviderError: overloaded")
    end

    it "prints every error of the stream, not only the first" do
      calls = [{ index: 0, id: "c1", function: { name: "a", arguments: "[1,2" } },
               { index: 1, id: "c2", function: { name: "b", arguments: "{}" } }]
      sse = "data: #{JSON.generate(choices: [{ delta: { tool_calls: calls }, finish_reason: "tool_calls" }])}\n\n" \
            "data: #{JSON.generate(error: { message: "overloaded" })}\n\n"
      expect(cli("replay", "-", stdin: StringIO.new(sse))).to eq(1)
      expect(stdout.string).to include("error: DiscourseAiStream::ToolArgumentsError: ",
                                       "error: DiscourseAiStream::ProviderError: overloaded")
      stdout.truncate(0)
      stdout.rewind
      cli("replay", "--json", "-", stdin: StringIO.new(sse))
      outcome = JSON.parse(stdout.string)
      expect(outcome["error"]["class"]).to eq("DiscourseAiStream::ToolArgumentsError")
      expect(outcome["errors"].map { |error| error["class"] })
        .to eq(%w[DiscourseAiStream::ToolArgumentsError DiscourseAiStream::ProviderError])
    end

    it "reports a stream of neither protocol, and exits 1" do
      anthropic = "event: content_block_delta\ndata: " \
                  "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"text\":\"Hi\"}}\n\n"
      expect(cli("replay", "-", stdin: StringIO.new(anthropic))).to eq(1)
      expect(stdout.string).to start_with("protocol: chat\n")
      expect(stdout.string).to include("anomaly wrong_protocol: ")
    end

    it "prints the help for --help after a command" do
      expect(cli("replay", "--help")).to eq(0)
      expect(cli("audit", "-h")).to eq(0)
      expect(stdout.string.scan("Usage:").size).to eq(2)
      expect(stdout.string).to include("--protocol chat|responses", "Exit status")
    end

    it "prints text and the provider's error, and exits 1" do
      expect(cli("replay", fixture("provider_error.sse"))).to eq(1)
      expect(stdout.string).to start_with(%(protocol: chat\ntext: "Let me "\n))
      expect(stdout.string).to end_with("error: DiscourseAiStream::ProviderError: Rate limit reached for requests\n")
    end

    it "lists anomalies" do
      cli("replay", "-", stdin: StringIO.new("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3," \
                                             "\"function\":{\"arguments\":\"x\"}}]}}]}\n\n"))
      expect(stdout.string).to include("anomaly orphan_fragment: a tool call fragment matched no call " \
                                       "and carried no name to start one (index 3)")
    end

    it "reads stdin for -" do
      expect(cli("replay", "-", stdin: StringIO.new(File.binread(fixture("text_only.sse"))))).to eq(0)
      expect(stdout.string).to start_with(%(protocol: chat\ntext: "Paris is sunny.\\n"\ntool calls: none\n))
    end

    it "rejects a missing file, no file or two files with exit status 2" do
      expect(cli("replay", fixture("nope.sse"))).to eq(2)
      expect(cli("replay")).to eq(2)
      expect(cli("replay", fixture("text_only.sse"), fixture("text_only.sse"))).to eq(2)
      expect(cli("replay", "--bogus", fixture("text_only.sse"))).to eq(2)
      expect(stderr.string).to include("no such file", "exactly one FILE", "invalid option: --bogus")
    end

    it "reads a pipe, refuses a directory, and takes a file name that is not UTF-8" do
      reader, writer = IO.pipe
      writer.write(File.binread(fixture("text_only.sse")))
      writer.close
      expect(cli("replay", "/dev/fd/#{reader.fileno}")).to eq(0)
      expect(stdout.string).to include(%(text: "Paris is sunny.\\n"))
      reader.close
      expect(cli("replay", fixtures)).to eq(2)
      expect(stderr.string).to include("#{fixtures}: is a directory")
      Dir.mktmpdir do |dir|
        name = File.join(dir, "x\xFF.sse".b)
        File.binwrite(name, File.binread(fixture("text_only.sse")))
        expect(cli("replay", name.dup.force_encoding(Encoding::UTF_8))).to eq(0)
      end
    end
  end

  describe "audit" do
    it "counts what the legacy processor lost and exits 1" do
      status = cli("audit", fixture("mistral_three_calls.sse"), fixture("openai_sequential.sse"),
                   fixture("not_streamed.json"))
      expect(status).to eq(1)
      expect(stdout.string.lines.map(&:chomp)).to eq([
                                                       "#{fixture("mistral_three_calls.sse")}: 3 tool call(s) " \
                                                       "requested, the legacy processor ran 1, lost 2: " \
                                                       "Ex4fG5hI6, Rt7jK8lM9",
                                                       "#{fixture("openai_sequential.sse")}: 2 tool call(s) " \
                                                       "requested, the legacy processor ran 2, lost 0",
                                                       "#{fixture("not_streamed.json")}: not a streamed response, " \
                                                       "skipped",
                                                       "audit: 3 response(s) (1 skipped, not streamed chat " \
                                                       "completions), 5 tool " \
                                                       "call(s) requested, 2 lost by the legacy processor in 1 " \
                                                       "response(s)"
                                                     ])
    end

    it "exits 0 when nothing was lost" do
      expect(cli("audit", fixture("openai_sequential.sse"), fixture("text_only.sse"))).to eq(0)
      expect(stdout.string.lines.last)
        .to eq("audit: 2 response(s), 2 tool call(s) requested, 0 lost by the legacy processor in 0 response(s)\n")
    end

    it "reads one response from stdin, with - or no FILE at all" do
      [["audit", "-"], ["audit"]].each do |argv|
        stdout.truncate(0)
        stdout.rewind
        expect(cli(*argv, stdin: StringIO.new(File.binread(fixture("mistral_parallel.sse"))))).to eq(1)
        expect(stdout.string).to start_with("stdin: 2 tool call(s) requested, the legacy processor ran 1, lost 1")
      end
    end

    it "refuses to wait on a terminal" do
      terminal = StringIO.new
      terminal.define_singleton_method(:tty?) { true }
      expect(cli("audit", stdin: terminal)).to eq(2)
      expect(stderr.string).to include("audit needs FILE")
    end

    it "takes an export of audit log rows as one response per line" do
      expect(cli("audit", fixture("rows.jsonl"))).to eq(1)
      lines = stdout.string.lines
      expect(lines[1]).to start_with("#{fixture("rows.jsonl")} (id 102, provider 9): 3 tool call(s) requested, " \
                                     "the legacy processor ran 1, lost 2")
      expect(lines.last).to start_with("audit: 5 response(s) (1 skipped, not streamed chat completions), " \
                                       "7 tool call(s) requested, " \
                                       "3 lost by the legacy processor in 2 response(s)")
    end

    it "rejects a broken export line" do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "rows.jsonl")
        File.write(path, %({"id":1,"raw_response_payload":"data: {}\\n\\n"}\nnot json\n))
        expect(cli("audit", path)).to eq(2)
        expect(stderr.string).to include("rows.jsonl:2: not a JSON object with raw_response_payload")
      end
    end

    it "prints JSON with --json" do
      expect(cli("audit", "--json", fixture("mistral_parallel.sse"), fixture("provider_error.sse"))).to eq(1)
      out = JSON.parse(stdout.string, symbolize_names: true)
      expect(out[:responses].first).to include(requested: %w[bM0Xl0KSh kgOYVL46d], ran: %w[bM0Xl0KSh],
                                               lost: %w[kgOYVL46d], streamed: true)
      expect(out[:responses].last[:errors]).to eq(["ProviderError: Rate limit reached for requests"])
      expect(out[:summary]).to eq(responses: 2, skipped: 0, requested: 2, ran: 1, lost: 1, responses_with_loss: 1)
      Dir.mktmpdir do |dir|
        name = File.join(dir, "x\xFF.sse".b)
        File.binwrite(name, File.binread(fixture("mistral_parallel.sse")))
        stdout.truncate(0)
        stdout.rewind
        expect(cli("audit", "--json", name.dup.force_encoding(Encoding::UTF_8))).to eq(1)
        expect(JSON.parse(stdout.string)["responses"].first["name"]).to eq(File.join(dir, "x\uFFFD.sse"))
      end
    end
  end

  it "prints its usage for help, and exits 2 on an unknown command" do
    expect(cli("help")).to eq(0)
    expect(stdout.string).to include("discourse-ai-stream replay FILE", "discourse-ai-stream audit")
    expect(cli("frobnicate")).to eq(2)
    expect(cli).to eq(2)
    expect(stderr.string).to include('unknown command "frobnicate"', "no command given")
  end

  it "says, without a backtrace, that the native extension did not load, and exits 2" do
    Dir.mktmpdir("no-build-") do |dir|
      # A checkout with no build: its lib/ and exe/.
      BrokenBuild.copy_lib(File.join(dir, "lib"))
      FileUtils.mkdir_p(File.join(dir, "exe"))
      FileUtils.cp(File.expand_path("../exe/discourse-ai-stream", __dir__), File.join(dir, "exe"))
      # Without a caller's bundler (`bundle exec rspec`), which would load this checkout's lib/.
      clean = { "RUBYOPT" => nil, "RUBYLIB" => nil, "BUNDLE_GEMFILE" => nil }
      out, status = Open3.capture2e(clean, RbConfig.ruby, File.join(dir, "exe", "discourse-ai-stream"), "help")
      expect(status.exitstatus).to eq(2), out
      expect(out).to start_with("discourse-ai-stream: discourse_ai_stream #{DiscourseAiStream::VERSION} has no " \
                                "native extension that loads")
      expect(out).not_to include("from ")
    end
  end

  it "runs as exe/discourse-ai-stream with the exit status of the command" do
    exe = File.expand_path("../exe/discourse-ai-stream", __dir__)
    out, status = Open3.capture2e(RbConfig.ruby, exe, "audit", fixture("mistral_three_calls.sse"))
    expect(status.exitstatus).to eq(1), out
    expect(out).to end_with("2 lost by the legacy processor in 1 response(s)\n")
    out, status = Open3.capture2e(RbConfig.ruby, exe, "replay", fixture("mistral_parallel.sse"))
    expect(status.exitstatus).to eq(0), out
    expect(out).to include("tool call 2: get_local_time (id kgOYVL46d)")
  end
end
