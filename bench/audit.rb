# frozen_string_literal: true

# What the audit costs on a big ai_api_audit_logs (docs/audit.md states the
# figures). It starts a throwaway PostgreSQL cluster
# (spec/support/postgres_server.rb), fills the table Discourse's way: one row
# per LLM request, ids in time order over 90 days, providers mixed (a fifth
# of them not OpenAI-compatible), a fifth of the responses not streamed,
# response and request payloads of 1 to 50 KB each. Then it runs the audit
# (Audit.run_task, as the rake task does) in a fresh Ruby process, for all
# of time and for 30 days, at 20,000 rows and again at 100,000: rows per
# second and the process's peak RSS. Last, EXPLAIN (ANALYZE, BUFFERS) of the
# audit's queries, and of the query the audit made before (a LIKE on every
# payload of the period, in find_each's batches) for comparison.
#
#   ruby bench/audit.rb                       # 20,000 then 100,000 rows
#   ruby bench/audit.rb --rows 5000,20000     # other sizes
#
# On another Ruby of the matrix, with YJIT (the audits run with it too):
#
#   bin/with-ruby 3.3 ruby --yjit bench/audit.rb
#
# It reports; it never fails on a number.

require "json"
require "optparse"
require "rbconfig"
require_relative "../spec/support/audit_database"
require_relative "workloads"

# The synthetic rows of the benchmark, and the run that measures them.
module AuditBench
  ROOT = File.expand_path("..", __dir__)
  POOL = 400
  KB = 1024
  SIZES = (1 * KB)..(50 * KB)
  # provider_id shares (per cent): OpenAI, Anthropic, Gemini, Vllm, Mistral, OpenRouter, SambaNova.
  PROVIDER_SHARES = { 1 => 40, 2 => 15, 4 => 5, 5 => 10, 9 => 15, 10 => 10, 8 => 5 }.freeze
  # find_each's batch size in the old audit (before the keyset batches).
  BEFORE_BATCH = 500
  # The OpenAI-compatible ones, which the audit reads.
  PROVIDERS = [1, 9, 5, 10, 8].freeze

  # Response and request payloads shaped like Discourse's: SSE streams in
  # OpenAI's shape (bench/workloads.rb) and JSON bodies.
  module Payloads
    W = Bench::Workloads

    module_function

    # A streamed text answer of about `size` bytes.
    def text_stream(size, rng)
      sse = +W.delta({ role: "assistant", content: "" })
      while sse.bytesize < size
        words = Array.new(rng.rand(1..3)) { W::WORDS[rng.rand(W::WORDS.size)] }
        sse << W.delta({ content: "#{words.join(" ")} " })
      end
      sse << W.tail("stop")
    end

    # Tool calls one after the other (nothing lost), about `size` bytes.
    def tool_stream(size, rng)
      calls = rng.rand(1..3)
      sse = +W.delta({ role: "assistant", content: nil })
      calls.times { |i| sse << W.tool_call_deltas(i, [size / calls / 12, 40].max, 12, seed: rng.rand(1_000_000)) }
      sse << W.tail("tool_calls")
    end

    # Mistral's shape: text, then every call in one chunk (the legacy
    # processor ran only the first).
    def parallel_stream(size, rng)
      calls = Array.new(rng.rand(2..4)) do |i|
        { id: "call_#{rng.rand(10**9)}", type: "function",
          function: { name: "lookup", arguments: JSON.generate({ query: "item #{i}", limit: 5 + i }) } }
      end
      text = text_stream(size, rng).delete_suffix(W.tail("stop"))
      "#{text}#{W.delta({ content: "", tool_calls: calls }, finish_reason: "tool_calls")}data: [DONE]\n\n"
    end

    # A non-streamed chat completion body.
    def body(size, rng)
      content = +""
      content << W::WORDS[rng.rand(W::WORDS.size)] << " " while content.bytesize < size
      JSON.pretty_generate({ id: "chatcmpl-#{rng.rand(10**9)}", object: "chat.completion", model: "gpt-4o",
                             choices: [{ index: 0, message: { role: "assistant", content: content },
                                         finish_reason: "stop" }],
                             usage: { prompt_tokens: 900, completion_tokens: size / 4 } })
    end

    def request(size, rng)
      prompt = +""
      prompt << W::WORDS[rng.rand(W::WORDS.size)] << " " while prompt.bytesize < size
      JSON.generate({ model: "gpt-4o", stream: true, messages: [{ role: "system", content: "You are a bot." },
                                                                { role: "user", content: prompt }] })
    end

    # POOL payloads: 55 % text streams, 15 % sequential tool calls,
    # 10 % parallel calls in one chunk, 20 % not streamed; 1 to 50 KB.
    def responses(rng)
      Array.new(POOL) do
        size = rng.rand(SIZES)
        case rng.rand(100)
        when 0...55 then text_stream(size, rng)
        when 55...70 then tool_stream(size, rng)
        when 70...80 then parallel_stream(size, rng)
        else body(size, rng)
        end
      end
    end
  end

  # The table: a pool of payloads, then rows that take theirs from it, made
  # by the server (no payload crosses the socket per row).
  module Fill
    module_function

    def pools(connection)
      rng = Random.new(22)
      pg = connection.raw_connection
      pg.exec("CREATE TABLE pool_responses (n integer PRIMARY KEY, payload text)")
      pg.exec("CREATE TABLE pool_requests (n integer PRIMARY KEY, payload text)")
      Payloads.responses(rng).each_with_index do |payload, n|
        pg.exec_params("INSERT INTO pool_responses VALUES ($1, $2)", [n, payload])
      end
      POOL.times do |n|
        pg.exec_params("INSERT INTO pool_requests VALUES ($1, $2)", [n, Payloads.request(rng.rand(SIZES), rng)])
      end
    end

    # `total` rows, ids in time order over the 90 days before now.
    def rows(connection, total)
      connection.execute("TRUNCATE ai_api_audit_logs RESTART IDENTITY")
      connection.execute(<<~SQL)
        SELECT setseed(0.22);
        INSERT INTO ai_api_audit_logs (provider_id, user_id, request_tokens, response_tokens, raw_request_payload,
          raw_response_payload, created_at, updated_at, topic_id, post_id, feature_name, language_model,
          feature_context, duration_msecs)
        SELECT #{provider_case}, 1 + g % 500, 900, 300, q.payload, s.payload,
          now() - interval '90 days' + (g * interval '90 days' / #{total}), now(), g % 10000, g, 'bot', 'gpt-4o',
          '{"persona": 1}'::jsonb, 1000 + g % 9000
        FROM generate_series(1, #{total}) g
        CROSS JOIN LATERAL (SELECT floor(random() * 100)::int AS p, floor(random() * #{POOL})::int AS a,
                                   floor(random() * #{POOL})::int AS b, g AS keep) r
        JOIN pool_responses s ON s.n = r.a
        JOIN pool_requests q ON q.n = r.b
        ORDER BY g;
      SQL
      # A site's rows are old: their hint bits are set and the visibility
      # map is current, which the first read after a bulk load would do.
      connection.execute("VACUUM (ANALYZE) ai_api_audit_logs")
    end

    def provider_case
      upto = 0
      "CASE #{PROVIDER_SHARES.map { |id, share| "WHEN r.p < #{upto += share} THEN #{id}" }.join(" ")} END"
    end
  end

  # One audit in a Ruby process of its own (its peak RSS is the audit's):
  # "now" as the rake task runs it, or "before" as the old audit ran it
  # (find_each with a LIKE, before the keyset batches).
  module Child
    module_function

    def run(config_json, since, way)
      load_gems
      ActiveRecord::Base.establish_connection(JSON.parse(config_json, symbolize_names: true))
      AuditDatabase.define_model
      out = StringIO.new
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      report = way == "before" ? before(since, out) : now(since, out)
      seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
      rows = report.total(:responses) + report.total(:skipped)
      puts JSON.generate(rows: rows, seconds: seconds, cpu: cpu, rss_peak_kb: peak_rss_kb, report: out.string)
    end

    def load_gems
      verbose = $VERBOSE
      $VERBOSE = nil
      require "active_record"
      $VERBOSE = verbose
      $LOAD_PATH.unshift(File.join(ROOT, "lib"))
      require "discourse_ai_stream"
    end

    def now(since, out)
      DiscourseAiStream::Audit.run_task(model: AuditDatabase::AiApiAuditLog, since: since, io: out,
                                        progress_io: File.open(File::NULL, "w"))
    end

    def before(since, out)
      model = AuditDatabase::AiApiAuditLog
      scope = AuditBench.before_scope(model, DiscourseAiStream::Audit.parse_since(since))
      report = DiscourseAiStream::Audit.run(scope, provider_names: DiscourseAiStream::Audit.provider_names(model),
                                                   batch_size: BEFORE_BATCH)
      report.lines.each { |line| out.puts(line) }
      report
    end

    def peak_rss_kb
      File.read("/proc/self/status")[/^VmHWM:\s+(\d+)/, 1].to_i
    end
  end

  module_function

  # What the old audit read, before the keyset batches: the same columns,
  # with a LIKE on every payload, through find_each.
  def before_scope(model, since)
    scope = model.where(provider_id: PROVIDERS)
    scope = scope.where("created_at >= ?", since) if since
    scope.where("raw_response_payload LIKE ?", "%data:%").select(:id, :provider_id, :raw_response_payload)
  end

  def audit(server, since, way)
    command = [RbConfig.ruby, *("--yjit" if yjit?), __FILE__, "--child", JSON.generate(server.connection_config),
               since, way]
    JSON.parse(IO.popen(command, &:read), symbolize_names: true)
  end

  def explain(connection, sql)
    connection.select_values("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) #{sql}").join("\n")
  end

  def plans(connection, model)
    since = Time.now.utc - (30 * 86_400)
    table = DiscourseAiStream::Audit.table(model, since: since, provider_ids: PROVIDERS)
    middle = connection.select_value("SELECT max(id) FROM ai_api_audit_logs") - 5_000
    {
      "first id of the period" => first_id_sql(model, since),
      "estimate (rows of the period)" => table.estimate_sql,
      "first batch (#{table.batch_size} rows)" => table.batch_sql,
      "a batch in the middle" => table.batch_sql(middle),
      "before: its first batch (LIKE, find_each)" => before_scope(model, since).order(:id).limit(BEFORE_BATCH).to_sql,
      "before: a batch in the middle" => before_scope(model, since).where("id > ?", middle).order(:id)
                                                                   .limit(BEFORE_BATCH).to_sql
    }.map { |label, sql| "-- #{label}\n#{sql}\n#{explain(connection, sql)}" }
  end

  def first_id_sql(model, since)
    period = model.where(model.arel_table[:created_at].gteq(since)).select(:id).order(:created_at)
    model.unscoped.from(period, :period).select("min(id)").to_sql
  end

  def measure(connection, size, last:)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Fill.rows(connection, size)
    filled = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    bytes = connection.select_value("SELECT pg_total_relation_size('ai_api_audit_logs')").to_i
    puts format("\n%<n>d rows (filled in %<s>.0fs, %<mb>d MB on disk)", n: size, s: filled, mb: bytes / KB / KB)
    [%w[all now], %w[30d now], %w[30d before]].to_h do |since, way|
      result = audit(AuditDatabase.server, since, way)
      show(way, since, result)
      puts result[:report].lines.map { |line| "    #{line}" }.join if last
      [[way, since], result[:rss_peak_kb]]
    end
  end

  def show(way, since, result)
    rows = result[:rows]
    line = format("  %-6<way>s %-4<since>s %7<rows>d rows in %6.1<s>fs", way: way, since: since, rows: rows,
                                                                         s: result[:seconds])
    puts format("%<line>s: %6<rate>d rows/s (%<cpu>d per CPU second of Ruby), peak RSS %<rss>d MB",
                line: line, rate: (rows / result[:seconds]).round, cpu: (rows / result[:cpu]).round,
                rss: result[:rss_peak_kb] / KB)
  end

  # The server, the table and the pools; the connection.
  def start
    Child.load_gems
    raise AuditDatabase.unavailable if AuditDatabase.unavailable

    AuditDatabase.connect
    connection = ActiveRecord::Base.connection
    Fill.pools(connection)
    puts "Ruby #{RUBY_VERSION}#{" +YJIT" if yjit?}, PostgreSQL #{connection.select_value("SHOW server_version")}"
    connection
  end

  def sizes(argv)
    sizes = [20_000, 100_000]
    OptionParser.new { |o| o.on("--rows LIST") { |list| sizes = list.split(",").map { |n| Integer(n.delete("_")) } } }
                .parse!(argv)
    sizes
  end

  def yjit?
    defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
  end

  # Peak RSS at the largest size over that at the smallest, per run.
  def flat(first, last)
    first.each do |key, kb|
      puts format("peak RSS, %<run>s: %<ratio>.3f of the first size's", run: key.join(" "), ratio: last[key].to_f / kb)
    end
  end

  def main(argv)
    sizes = sizes(argv)
    connection = start
    peaks = sizes.map { |size| measure(connection, size, last: size == sizes.last) }
    peaks.first.each_key do |key|
      puts format("peak RSS, %<run>s: %<ratio>.3f of the first size's", run: key.join(" "),
                                                                        ratio: peaks.last[key].to_f / peaks.first[key])
    end
    puts "\nQuery plans at #{sizes.last} rows, 30d:"
    puts plans(connection, AuditDatabase.model)
  end
end

if ARGV.first == "--child"
  require "stringio"
  AuditBench::Child.run(ARGV[1], ARGV[2], ARGV[3])
else
  AuditBench.main(ARGV)
end
