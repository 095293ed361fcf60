# frozen_string_literal: true

require "fileutils"
require "pathname"
require "rake"
require_relative "support/sse_fixtures"

RSpec.describe DiscourseAiStream::Audit do
  fixtures = File.expand_path("fixtures/audit", __dir__)
  define_method(:fixture) { |name| File.binread(File.join(fixtures, name)) }

  # Just enough of an ActiveRecord relation: where/select chain, find_each
  # in batches. `log` records every call, shared along the chain.
  let(:relation_class) do
    Class.new do
      attr_reader :log

      def initialize(rows, log = [])
        @rows = rows
        @log = log
      end

      def where(*args, **kwargs)
        @log << [:where, args, kwargs]
        self
      end

      def select(*columns)
        @log << [:select, columns]
        self
      end

      def find_each(batch_size:, &block)
        @rows.each_slice(batch_size) do |batch|
          @log << [:batch, batch.size]
          batch.each(&block)
        end
      end
    end
  end

  let(:rows) do
    [[101, 9, "mistral_parallel.sse"], [102, 9, "mistral_three_calls.sse"], [103, 1, "openai_sequential.sse"],
     [104, 1, "text_only.sse"], [105, 1, "not_streamed.json"],
     [106, 5, "provider_error.sse"]].map do |id, provider, file|
      { id: id, provider_id: provider, raw_response_payload: fixture(file).dup.force_encoding(Encoding::UTF_8) }
    end
  end

  describe ".analyze" do
    it "finds the call the legacy processor dropped from the bug report's chunk" do
      result = described_class.analyze(fixture("mistral_parallel.sse"))
      expect(result.requested).to eq(%w[bM0Xl0KSh kgOYVL46d])
      expect(result.ran).to eq(%w[bM0Xl0KSh])
      expect(result.lost).to eq(%w[kgOYVL46d])
    end

    it "finds 2 of 3 calls lost when three come in one chunk" do
      result = described_class.analyze(fixture("mistral_three_calls.sse"))
      expect([result.requested.size, result.ran.size]).to eq([3, 1])
      expect(result.lost).to eq(%w[Ex4fG5hI6 Rt7jK8lM9])
      expect(result).to be_lost
    end

    # Rule 14: a header that shares an id starts a call of its own.
    it "counts calls that share an id one by one" do
      calls = (0..2).map { |i| { index: i, id: "dup", type: "function", function: { name: "f#{i}", arguments: "{}" } } }
      chunk = { choices: [{ index: 0, delta: { tool_calls: calls }, finish_reason: "tool_calls" }] }
      result = described_class.analyze("data: #{JSON.generate(chunk)}\n\ndata: [DONE]\n\n")
      expect([result.requested, result.ran, result.lost]).to eq([%w[dup dup dup], %w[dup], %w[dup dup]])
    end

    it "finds nothing lost when the calls come one after the other" do
      result = described_class.analyze(fixture("openai_sequential.sse"))
      expect(result.requested).to eq(%w[call_weather1 call_time1])
      expect(result.lost).to eq([])
      expect(result.errors).to eq([])
    end

    it "counts no calls in a text answer and skips a payload that is not a stream" do
      expect(described_class.analyze(fixture("text_only.sse")).requested).to eq([])
      expect(described_class.analyze(fixture("not_streamed.json"))).to be_nil
      expect(described_class.analyze(nil)).to be_nil
    end

    # The processor refused the stream's one chunk (a line over the limit):
    # that is an error to count, not another API's stream to skip.
    it "reports a chat stream whose only chunk is refused, instead of skipping it as another API's" do
      chunk = { choices: [{ delta: { content: "x" * (9 * 1024 * 1024) } }] }
      result = described_class.analyze("data: #{JSON.generate(chunk)}\n\ndata: [DONE]\n\n")
      expect(result.other_protocol).to be(false)
      expect(result.errors).to eq(["StreamError: SSE line longer than 8388608 bytes (at least 9437228 bytes " \
                                   "without a line end)"])
    end

    # The chat processor reads the error event as its own: the other events
    # say whose stream it is.
    it "skips a Responses API stream that ends in an error event, as another API's" do
      events = [{ type: "response.created", response: { id: "resp_1", status: "in_progress" } },
                { type: "error", code: "rate_limit_exceeded", message: "slow down" }]
      sse = events.map { |event| "event: #{event[:type]}\ndata: #{JSON.generate(event)}\n\n" }.join
      expect(described_class.analyze(sse).other_protocol).to be(true)
      expect(described_class.analyze(fixture("provider_error.sse")).other_protocol).to be(false)
    end

    it "skips a Responses API stream, which holds no chat completion chunk, and says why" do
      responses = "event: response.output_item.added\ndata: #{JSON.generate(
        type: "response.output_item.added", output_index: 0,
        item: { type: "function_call", id: "fc_1", call_id: "call_1", name: "search", arguments: "" }
      )}\n\n"
      result = described_class.analyze(responses)
      expect(result.other_protocol).to be(true)
      expect(described_class.analyze(fixture("mistral_parallel.sse")).other_protocol).to be(false)

      report = described_class::Report.new
      report.add("OpenAI", 7, result)
      report.add("OpenAI", 8, described_class.analyze(fixture("mistral_parallel.sse")))
      expect(report.total(:requested)).to eq(2)
      expect(report.lines.last).to eq("skipped 1 streamed row(s) with no chat completion chunk (Responses API " \
                                      "streams): the audit does not count the stock Responses processor's losses")
    end

    it "records a provider error and keeps going" do
      result = described_class.analyze(fixture("provider_error.sse"))
      expect(result.errors).to eq(["ProviderError: Rate limit reached for requests"])
      expect(result.requested).to eq([])
    end

    it "counts a call whose arguments do not parse as requested" do
      calls = [{ index: 0, id: "ok", function: { name: "f", arguments: "{}" } },
               { index: 1, id: "bad", function: { name: "f", arguments: '{"a": tru' } }]
      chunk = { choices: [{ delta: { tool_calls: calls }, finish_reason: "tool_calls" }] }
      result = described_class.analyze("data: #{JSON.generate(chunk)}\n\ndata: [DONE]\n\n")
      expect(result.requested).to contain_exactly("ok", "bad")
      expect(result.lost).to eq(["bad"])
      expect(result.errors.first).to start_with("ToolArgumentsError")
    end

    it "counts integer ids (Poolside) as calls the legacy code ran, as Ruby's present? holds for them" do
      result = described_class.analyze(SseFixtures.fixture_bytes("poolside_integer_ids"))
      expect(result.requested).to eq(%w[7 8])
      expect(result.ran).to eq(%w[7 8])
      expect(result.lost).to eq([])
    end

    context "when the legacy code would have raised JSON::ParserError (the request failed)" do
      let(:good_chunk) do
        call = { index: 0, id: "call_ok", function: { name: "f", arguments: '{"a":1}' } }
        "data: #{JSON.generate(choices: [{ delta: { tool_calls: [call] }, finish_reason: "tool_calls" }])}\n\n"
      end

      {
        "interleaved_aggregator" => %w[call_agA call_agB], # fragments of both calls in one buffer
        "tgi_object_arguments" => %w[0],                    # Ruby's to_s of a Hash; and data: without a space
        "truncated" => %w[call_tr1]                         # no closing brace at the end of the stream
      }.each do |name, ids|
        it "counts every call of #{name} as lost" do
          result = described_class.analyze(SseFixtures.fixture_bytes(name))
          expect(result.requested).to eq(ids)
          expect(result.ran).to eq([])
          expect(result.lost).to eq(ids)
        end
      end

      it "counts every call as lost after a complete data line the stock decoder cannot parse" do
        result = described_class.analyze("#{good_chunk}data: {\"choices\": [oops]}\n\ndata: [DONE]\n\n")
        expect(result.requested).to eq(%w[call_ok])
        expect(result.ran).to eq([])
        expect(result.errors.first).to start_with("StreamError")
      end

      it "counts a bad line hidden in a comment, which the stock pattern still matched" do
        result = described_class.analyze(": keep-alive data: {nope}\n\n#{good_chunk}")
        expect(result.ran).to eq([])
      end

      it "counts every call as lost after a line nested deeper than JSON.parse's 100 levels, which the gem reads" do
        [101, 127].each do |depth|
          deep = "{\"choices\":[],\"extra\":#{"[" * (depth - 1)}0#{"]" * (depth - 1)}}"
          result = described_class.analyze("data: #{deep}\n\n#{good_chunk}data: [DONE]\n\n")
          expect(result.errors).to eq([])
          expect(result.requested).to eq(%w[call_ok])
          expect(result.ran).to eq([]), "nested #{depth} deep"
        end
        shallow = "{\"choices\":[],\"extra\":#{"[" * 99}0#{"]" * 99}}"
        expect(described_class.analyze("data: #{shallow}\n\n#{good_chunk}data: [DONE]\n\n").ran).to eq(%w[call_ok])
      end

      it "lets a bad last line through, as the stock decoder kept it in its buffer" do
        expect(described_class.analyze("#{good_chunk}data: {\"cut\": ").ran).to eq(%w[call_ok])
        expect(described_class.analyze("#{good_chunk}data: {\"cut\": }\n").ran).to eq(%w[call_ok])
      end

      it "still counts the calls the legacy processor ran from a good stream" do
        expect(described_class.analyze("#{good_chunk}data: [DONE]\n\n").ran).to eq(%w[call_ok])
      end
    end

    it "does not call the process-wide anomaly hook" do
      seen = []
      DiscourseAiStream.on_anomaly = ->(anomaly) { seen << anomaly }
      described_class.analyze("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":4,\"function\":" \
                              "{\"arguments\":\"x\"}}]}}]}\n\n")
      expect(seen).to eq([])
    ensure
      DiscourseAiStream.on_anomaly = nil
    end
  end

  describe ".run" do
    let(:names) { { 1 => "OpenAI", 5 => "Vllm", 9 => "Mistral" } }

    it "aggregates per provider, in batches, with the worst rows first" do
      relation = relation_class.new(rows)
      report = described_class.run(relation, provider_names: names, batch_size: 4)
      expect(relation.log).to eq([[:batch, 4], [:batch, 2]])
      mistral, open_ai, vllm = report.providers.map(&:to_h)
      expect(mistral).to include(provider: "Mistral", responses: 2, requested: 5, dropped: 3, responses_with_loss: 2,
                                 worst: [[2, 3, 102], [1, 2, 101]])
      expect(open_ai).to include(responses: 2, requested: 2, dropped: 0, skipped: 1)
      expect(vllm).to include(responses: 1, errors: [106])
      expect(report.total(:dropped)).to eq(3)
    end

    it "prints a table, the worst rows and notes" do
      lines = described_class.run(relation_class.new(rows), provider_names: names).lines
      expect(lines).to eq([
                            "provider  responses  tool calls  dropped by legacy  responses with loss",
                            "Mistral           2           5                  3                    2",
                            "OpenAI            2           2                  0                    0",
                            "Vllm              1           0                  0                    0",
                            "total             5           7                  3                    2",
                            "worst rows, Mistral: 102 (2 of 3 lost), 101 (1 of 2 lost)",
                            "skipped 1 row(s) whose payload is not a stream",
                            "1 response(s) raised while decoding (counted as far as they went): 106"
                          ])
    end

    it "keeps only the worst rows asked for" do
      many = (1..10).map { |i| { id: i, provider_id: 9, raw_response_payload: fixture("mistral_three_calls.sse") } }
      report = described_class.run(many, provider_names: names,
                                         report: DiscourseAiStream::Audit::Report.new(worst_rows: 3))
      expect(report.providers.first.worst).to eq([[2, 3, 1], [2, 3, 2], [2, 3, 3]])
    end

    it "walks in_batches relations and plain collections of rows too" do
      batched = Object.new
      batches = rows.each_slice(2).to_a
      batched.define_singleton_method(:in_batches) { |of:, &block| batches.each(&block) if of }
      expect(described_class.run(batched, provider_names: names).total(:dropped)).to eq(3)
      structs = rows.map { |row| Struct.new(*row.keys).new(*row.values) }
      expect(described_class.run(structs).providers.map(&:provider)).to include("provider 9")
    end

    it "says so when there is nothing to audit" do
      expect(described_class.run([]).lines).to eq(["no streamed responses found"])
    end
  end

  describe ".parse_since" do
    let(:now) { Time.utc(2026, 3, 31, 12) }

    it "reads dates, days back and all" do
      expect(described_class.parse_since(nil, now: now)).to eq(now - (30 * 86_400))
      expect(described_class.parse_since("7d", now: now)).to eq(now - (7 * 86_400))
      expect(described_class.parse_since("all", now: now)).to be_nil
      expect(described_class.parse_since("2026-01-15", now: now)).to eq(Time.parse("2026-01-15"))
    end

    it "rejects anything else" do
      expect { described_class.parse_since("last tuesday-ish") }.to raise_error(ArgumentError, /SINCE must be/)
    end

    # Time.parse reads "30" as the 30th of this month, "6h" as 06:00 today:
    # a forgotten d gave a period with no rows, and an all-clear.
    it "takes a date only as one written year first, and none in the future" do
      expect(described_class.parse_since("2026-03-30T10:00:00Z", now: now)).to eq(Time.utc(2026, 3, 30, 10))
      expect(described_class.parse_since("2026-03-30 10:00+02:00", now: now)).to eq(Time.utc(2026, 3, 30, 8))
      ["30", "3", "6h", "30/03/2026", "2026-01-15 sept", "2026-01-15junk", "2026-01-15 10:00 CET",
       "2026-02-30"].each do |text|
        expect { described_class.parse_since(text, now: now) }.to raise_error(ArgumentError, /SINCE must be/)
      end
      expect { described_class.parse_since("2026-04-02", now: now) }
        .to raise_error(ArgumentError, /SINCE is in the future: "2026-04-02"/)
    end
  end

  describe "the rake task" do
    let(:rake) { Rake::Application.new }
    let!(:recorded_metadata) { Rake::TaskManager.record_task_metadata }

    before do
      Rake::TaskManager.record_task_metadata = true
      Rake.application = rake
      rake.define_task(Rake::Task, :environment)
      load File.expand_path("../lib/tasks/discourse_ai_stream.rake", __dir__)
    end

    after do
      Rake.application = Rake::Application.new
      Rake::TaskManager.record_task_metadata = recorded_metadata
    end

    it "is described for rake -T" do
      expect(rake["discourse_ai_stream:audit"].comment).to include("SINCE", "PROVIDER")
      expect(rake["discourse_ai_stream:audit"].arg_names).to eq(%i[since provider])
    end
  end

  describe "the railtie" do
    let(:railtie_base) do
      Class.new do
        def self.rake_tasks(&block)
          (@rake_tasks ||= []) << block if block
          @rake_tasks
        end
      end
    end

    # The task names a Rails app rooted at `root` gets from the railtie.
    def rails_tasks(root)
      rails = Module.new
      rails.define_singleton_method(:root) { Pathname(root) }
      stub_const("Rails", rails)
      stub_const("Rails::Railtie", railtie_base)
      load File.expand_path("../lib/discourse_ai_stream/railtie.rb", __dir__)
      Rake.application = Rake::Application.new
      DiscourseAiStream::Railtie.rake_tasks.each(&:call)
      Rake.application.tasks.map(&:name)
    ensure
      DiscourseAiStream.send(:remove_const, :Railtie) if DiscourseAiStream.const_defined?(:Railtie, false)
      Rake.application = Rake::Application.new
    end

    it "hands the audit and check tasks to a Discourse with Discourse AI, whose audit log model is in a plugin" do
      Dir.mktmpdir do |root|
        FileUtils.mkdir_p(File.join(root, "plugins/discourse-ai/app/models"))
        File.write(File.join(root, "plugins/discourse-ai/app/models/ai_api_audit_log.rb"), "")
        expect(rails_tasks(root)).to include("discourse_ai_stream:audit", "discourse_ai_stream:check")
      end
    end

    it "gives another Rails app no task, unless AiApiAuditLog is loaded there" do
      Dir.mktmpdir do |root|
        expect(rails_tasks(root)).to eq([])
        stub_const("AiApiAuditLog", Class.new)
        expect(rails_tasks(root)).to include("discourse_ai_stream:audit")
      end
    end
  end
end
