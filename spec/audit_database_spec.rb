# frozen_string_literal: true

require "rake"
require_relative "support/audit_database"

# The audit against ai_api_audit_logs in a real PostgreSQL, which this run
# starts (spec/support/postgres_server.rb) and stops at its end.
if (missing = AuditDatabase.unavailable)
  # Debian's Ruby gets ActiveRecord and pg from bin/setup: there, a missing
  # one is a broken setup, not a reason to leave the specs out.
  raise LoadError, "the audit's database specs need ActiveRecord and pg: #{missing}" if RUBY_VERSION.start_with?("3.1.")

  message = "NOT RUN on Ruby #{RUBY_VERSION}: the audit's database specs (spec/audit_database_spec.rb, " \
            "tagged postgres) are excluded, as #{missing}"
  warn message
  RSpec.configure do |config|
    config.filter_run_excluding(postgres: true)
    config.after(:suite) { warn "\n#{message}" }
  end
end

RSpec.describe DiscourseAiStream::Audit, :postgres do
  fixtures = File.expand_path("fixtures/audit", __dir__)
  define_method(:fixture) { |name| File.read(File.join(fixtures, name)) }

  let(:model) { AuditDatabase.model }
  let(:now) { Time.now.utc }
  let(:open_ai) { AuditDatabase::PROVIDERS.fetch(:OpenAI) }
  let(:mistral) { AuditDatabase::PROVIDERS.fetch(:Mistral) }
  let(:names) { described_class.provider_names(model) }

  before { AuditDatabase.clear }

  def insert(provider, payload, created_at: Time.now.utc, **columns)
    AuditDatabase.insert([{ provider_id: provider, raw_response_payload: payload, created_at: created_at,
                            raw_request_payload: %({"model":"gpt-4o","stream":true}),
                            feature_name: "bot", language_model: "m" }.merge(columns)]).first
  end

  def ids_read(since:, provider_ids: names.keys, batch_size: 500)
    described_class.table(model, since: since, provider_ids: provider_ids, batch_size: batch_size).each.map(&:id)
  end

  # Every SQL statement ActiveRecord sends while the block runs.
  def statements
    seen = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      seen << payload[:sql] unless payload[:name] == "SCHEMA"
    end
    yield
    seen
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber)
  end

  describe "the period" do
    let!(:old) { insert(open_ai, fixture("openai_sequential.sse"), created_at: now - (40 * 86_400)) }
    let!(:recent) { insert(open_ai, fixture("openai_sequential.sse"), created_at: now - (10 * 86_400)) }
    let!(:today) { insert(mistral, fixture("mistral_parallel.sse"), created_at: now - 60) }

    it "reads the rows of the last 30 days for 30d" do
      expect(ids_read(since: described_class.parse_since("30d"))).to eq([recent, today])
    end

    it "reads the rows since a date" do
      date = (now - (20 * 86_400)).strftime("%Y-%m-%d")
      expect(ids_read(since: described_class.parse_since(date))).to eq([recent, today])
      expect(ids_read(since: described_class.parse_since((now - 3600).iso8601))).to eq([today])
    end

    it "reads every row for all" do
      expect(ids_read(since: described_class.parse_since("all"))).to eq([old, recent, today])
    end

    it "starts at the period's first id even when ids and times disagree" do
      # An older row inserted late, with a larger id, is still in no period
      # it does not belong to; an earlier id created inside the period is.
      late_old = insert(open_ai, fixture("text_only.sse"), created_at: now - (50 * 86_400))
      model.where(id: old).update_all(created_at: now - 3600)
      expect(ids_read(since: now - (20 * 86_400))).to eq([old, recent, today])
      expect(ids_read(since: nil)).to eq([old, recent, today, late_old])
    end

    it "reads nothing from an empty period" do
      expect(ids_read(since: now + 60)).to eq([])
      expect(described_class.table(model, since: now + 60, provider_ids: names.keys).estimate).to eq(0)
    end
  end

  describe "the providers" do
    it "reads the OpenAI-compatible providers only, or the one asked for" do
      ids = { OpenAI: 1, Anthropic: 2, Gemini: 4, Vllm: 5, SambaNova: 8, Mistral: 9, OpenRouter: 10 }
            .transform_values { |provider| insert(provider, fixture("text_only.sse")) }
      expect(ids_read(since: nil)).to eq(ids.values_at(:OpenAI, :Vllm, :SambaNova, :Mistral, :OpenRouter))
      chosen = described_class.select_providers(names, "mistral")
      expect(chosen).to eq(9 => "Mistral")
      expect(ids_read(since: nil, provider_ids: chosen.keys)).to eq([ids[:Mistral]])
    end

    it "refuses a provider that is not OpenAI-compatible" do
      expect { described_class.select_providers(names, "Anthropic") }
        .to raise_error(ArgumentError, /PROVIDER must be one of OpenAI, Mistral, Vllm, OpenRouter, SambaNova/)
    end
  end

  describe "batches" do
    it "reads every row once, in id order, across batch boundaries" do
      rows = (1..7).map { |i| { provider_id: i.even? ? 1 : 9, raw_response_payload: "data: #{i}" } }
      ids = AuditDatabase.insert(rows)
      sql = statements { expect(ids_read(since: nil, batch_size: 3)).to eq(ids) }
      batches = sql.grep(/LIMIT/)
      expect(batches.size).to eq(3)
      expect(batches.map { |query| query[/"id" > (\d+)/, 1].to_i }).to eq([ids.first - 1, ids[2], ids[5]])
    end

    it "stops after a full last batch with one query that finds nothing" do
      ids = AuditDatabase.insert((1..6).map { |i| { provider_id: 1, raw_response_payload: "data: #{i}" } })
      batches = statements { expect(ids_read(since: nil, batch_size: 3)).to eq(ids) }.grep(/LIMIT/)
      expect(batches.size).to eq(3)
    end

    it "loads three columns, never the request payload, and builds no model objects" do
      insert(open_ai, fixture("openai_sequential.sse"))
      instantiated = 0
      subscriber = ActiveSupport::Notifications.subscribe("instantiation.active_record") { instantiated += 1 }
      sql = statements { ids_read(since: now - 60) }
      ActiveSupport::Notifications.unsubscribe(subscriber)
      reads = sql.grep(/FROM "ai_api_audit_logs"/)
      expect(reads.grep(/LIMIT/).first).to start_with(
        'SELECT "ai_api_audit_logs"."id", "ai_api_audit_logs"."provider_id", ' \
        '"ai_api_audit_logs"."raw_response_payload" FROM'
      )
      expect(reads.join("\n")).not_to match(/raw_request_payload|\*|LIKE|OFFSET/)
      expect(instantiated).to eq(0)
    end
  end

  describe "the report" do
    # The rows of spec/audit_spec.rb's stand-in relation, now in the table,
    # with rows the stand-in could not hold.
    before do
      [[9, "mistral_parallel.sse"], [9, "mistral_three_calls.sse"], [1, "openai_sequential.sse"],
       [1, "text_only.sse"], [1, "not_streamed.json"], [5, "provider_error.sse"]].each do |provider, file|
        insert(provider, fixture(file))
      end
    end

    def audit(since: "all", provider: nil, batch_size: 2, generation: nil)
      out = StringIO.new
      err = StringIO.new
      report = described_class.run_task(model: model, since: since, provider: provider, io: out, progress_io: err,
                                        batch_size: batch_size, every: 2, generation: generation)
      [report, out.string, err.string]
    end

    it "counts what the stand-in relation counted, batch after batch" do
      _, out, = audit
      expect(out.lines.drop(1).map(&:chomp)).to eq(
        ["provider  responses  tool calls  dropped by legacy  responses with loss",
         "Mistral           2           5                  3                    2",
         "OpenAI            2           2                  0                    0",
         "Vllm              1           0                  0                    0",
         "total             5           7                  3                    2",
         "worst rows, Mistral: 2 (2 of 3 lost), 1 (1 of 2 lost)",
         "skipped 1 row(s) whose payload is not a stream",
         "1 response(s) raised while decoding (counted as far as they went): 6"]
      )
    end

    it "skips payloads that are not SSE and rows of responses that were not streamed" do
      insert(open_ai, nil)
      insert(open_ai, "")
      insert(open_ai, "<html><body>502 Bad Gateway</body></html>")
      call = { id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }
      insert(open_ai, JSON.generate(choices: [{ message: { tool_calls: [call] }, finish_reason: "tool_calls" }]))
      insert(open_ai, "{\"error\": {\"message\": \"data: none\"}}")
      report, out, = audit
      expect(report.providers.find { |stats| stats.provider == "OpenAI" }.to_h)
        .to include(responses: 2, requested: 2, skipped: 6)
      expect(out).to include("skipped 6 row(s) whose payload is not a stream")
    end

    it "goes on when a row it has not read yet is deleted while it runs" do
      doomed = model.where(provider_id: 5).pick(:id)
      progress = DiscourseAiStream::Audit::Progress.new(io: StringIO.new, total: 6, tty: false)
      deleting = Class.new(SimpleDelegator) do
        define_method(:advance) do |rows = 1|
          model_class = AuditDatabase.model
          model_class.where(id: doomed).delete_all if __getobj__.done == 1
          __getobj__.advance(rows)
        end
      end.new(progress)
      table = described_class.table(model, since: nil, provider_ids: names.keys, batch_size: 2)
      report = described_class.run(table, provider_names: names, progress: deleting)
      expect(report.total(:responses) + report.total(:skipped)).to eq(5)
      expect(report.providers.map(&:provider)).to eq(%w[Mistral OpenAI])
      expect(report.total(:dropped)).to eq(3)
      expect(progress.done).to eq(5)
    end

    it "says what the counts mean on a site whose stock processor drops calls, and on one that keeps them" do
      expect(audit(generation: :legacy)[1].lines[1]).to start_with("This site's stock processor is the legacy one: " \
                                                                   "it dropped these calls wherever it served them")
      %i[current per_call].each do |generation|
        expect(audit(generation: generation)[1].lines[1]).to start_with("This site's stock processor keeps every " \
                                                                        "call of a chunk: only responses served before")
      end
      expect(audit[1].lines[1]).to start_with("provider  responses"), "no generation known: no such line"
    end

    it "audits one provider when asked" do
      report, out, = audit(provider: "Mistral")
      expect(out.lines.first).to eq("discourse_ai_stream audit: tool calls the legacy OpenAiMessageProcessor " \
                                    "would have dropped, in the streamed chat completions of Mistral of all time\n")
      expect(report.providers.map(&:provider)).to eq(["Mistral"])
    end

    it "shows progress on the progress stream, a line every N rows off a terminal, and the report on stdout" do
      _, out, err = audit
      lines = err.lines.map(&:chomp)
      expect(lines.size).to eq(4)
      expect(lines.first(3)).to all(match(%r{\Adiscourse_ai_stream audit: [246] of 6 rows \(\d+%\), \d+ rows/s}))
      expect(lines.first(3).map { |line| line[/: (\d) of/, 1] }).to eq(%w[2 4 6])
      expect(lines.last).to match(%r{\Adiscourse_ai_stream audit: 6 rows in \d+s \(\d+ rows/s\)\z})
      expect(out).not_to include("rows/s")
    end
  end

  describe "the server" do
    it "runs from a data directory and socket of its own, and is gone with them after stop" do
      server = PostgresServer.new.start
      pid = File.read(File.join(server.data_dir, "postmaster.pid")).lines.first.to_i
      expect(server.root).to start_with(Dir.tmpdir)
      expect(Dir.children(server.socket_dir)).to include(".s.PGSQL.#{server.port}")
      expect(alive?(pid)).to be(true)
      server.stop
      expect(File.exist?(server.root)).to be(false)
      expect(alive?(pid)).to be(false)
    end

    # Neither running nor a zombie its parent has yet to reap.
    def alive?(pid)
      state = File.read("/proc/#{pid}/stat")[/\) (\S)/, 1]
      state != "Z"
    rescue Errno::ENOENT
      false
    end
  end

  describe "the rake task" do
    let(:rake) { Rake::Application.new }

    before do
      Rake.application = rake
      rake.define_task(Rake::Task, :environment)
      load File.expand_path("../lib/tasks/discourse_ai_stream.rake", __dir__)
      stub_const("AiApiAuditLog", model)
      insert(mistral, fixture("mistral_three_calls.sse"), created_at: now - (5 * 86_400))
      insert(mistral, fixture("mistral_parallel.sse"), created_at: now - (45 * 86_400))
    end

    after { Rake.application = Rake::Application.new }

    it "audits AiApiAuditLog for SINCE and PROVIDER, the report on stdout and progress on stderr" do
      expect { rake["discourse_ai_stream:audit"].invoke("30d", "Mistral") }
        .to output(/chat completions of Mistral since .*\n(?:.*\n)*Mistral +1 +3 +2 +1\n/).to_stdout
        .and output(/discourse_ai_stream audit: 1 rows in \d+s/).to_stderr
    end
  end
end
