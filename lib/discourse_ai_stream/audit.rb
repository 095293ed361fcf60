# frozen_string_literal: true

require "time"

module DiscourseAiStream
  # How many streamed tool calls would the legacy Discourse processor have
  # dropped? The raw SSE text of every streamed response sits in
  # AiApiAuditLog#raw_response_payload.
  # Each one is decoded again with a fresh processor that also follows the
  # stream as the legacy Discourse processor did (simulate_legacy): the
  # calls the stream requested, minus the calls the legacy processor ran,
  # are the calls the site dropped. When the legacy code would have raised
  # (JSON::ParserError on a data line or on a call's arguments), the request
  # failed and it ran none of them. A stream with no chat completion chunk
  # (a Responses API stream) is skipped: the audit models the chat
  # processor only. Used by `rake discourse_ai_stream:audit` and
  # `discourse-ai-stream audit`; needs neither Rails nor Discourse.
  module Audit
    # The OpenAI-compatible providers of AiApiAuditLog::Provider.
    PROVIDERS = %w[OpenAI Mistral Vllm OpenRouter SambaNova].freeze
    DEFAULT_DAYS = 30
    WORST_ROWS = 5
    # Rows per query. A batch's payloads (up to some 50 KB each) are in
    # memory two or three times over while it is read (libpq's result,
    # ActiveRecord's, the rows), so a batch sets the audit's memory: 100
    # keeps it a few MB above the process's own, whatever the table holds,
    # for a query per 100 rows that costs well under a millisecond.
    BATCH_SIZE = 100
    # A payload is a stream when a line starts with an SSE field.
    STREAM_LINE = /^(?:\xEF\xBB\xBF)?(?:data|event):/n
    QUIET = ->(_anomaly) {}
    OTHER_PROTOCOL = "no chat completion chunk (a Responses API stream?)"
    # What the report counts, and what that means on a site of each generation.
    MEASURES = "tool calls the legacy OpenAiMessageProcessor would have dropped"
    ON_LEGACY = "This site's stock processor is the legacy one: it dropped these calls wherever it served them " \
                "(not while this gem was installed)."
    ON_CURRENT = "This site's stock processor keeps every call of a chunk: only responses served before an " \
                 "upgrade from the legacy one lost these calls."

    # One response: ids of the calls the stream requested and of those the
    # legacy processor ran; errors the decoding raised ("Class: message");
    # other_protocol: no chat completion chunk was read (nothing counted).
    Result = Struct.new(:requested, :ran, :errors, :anomalies, :other_protocol, keyword_init: true) do
      # Each run call answers for one requested call of its id: calls that
      # share an id (rule 14) count one by one.
      def lost
        left = ran.tally
        requested.reject { |id| left[id].to_i.positive? && (left[id] -= 1) }
      end

      def lost? = !lost.empty?
    end

    module_function

    def streamed?(payload) = payload.is_a?(String) && STREAM_LINE.match?(payload.b)

    # The Result for one raw response, nil when it is not a stream.
    def analyze(payload)
      return unless streamed?(payload)

      # Strict: a line the legacy decoder raised on must be an error here too.
      processor = OpenAiMessageProcessor.new(simulate_legacy: true, tool_call_class: DiscourseAiStream::ToolCall,
                                             on_anomaly: QUIET, strict: true)
      result = Result.new(requested: [], ran: [], errors: [], anomalies: 0)
      [-> { processor.decode_chunk(payload) }, -> { processor.finish }].each { |step| run_step(result, &step) }
      result.ran = legacy_ran(processor, payload, result)
      result.anomalies = processor.anomalies.size
      result.other_protocol = other_protocol?(processor, payload, result)
      result
    end

    # A stream the processor refused is an error to report, not another
    # API's; but an error event is both APIs': a stream with no call whose
    # error the chat processor took for its own is the Responses API's when
    # that processor reads an event of its API in it, and skips none for
    # having no type (a chat chunk has none; an error may be either API's).
    def other_protocol?(processor, payload, result)
      return processor.anomalies.any? { |anomaly| anomaly[:kind] == :wrong_protocol } if result.errors.empty?
      return false unless result.requested.empty?

      responses = OpenAiResponsesMessageProcessor.new(tool_call_class: DiscourseAiStream::ToolCall, on_anomaly: QUIET)
      [-> { responses.decode_chunk(payload) }, -> { responses.finish }].each do |step|
        step.call
      rescue DiscourseAiStream::Error
        nil
      end
      responses_stream?(responses.anomalies)
    end

    # Whether the Responses processor whose anomalies these are read a
    # stream of its API: it found an event of its API (no wrong_protocol)
    # and skipped none for having no type (as chat chunks have none; an
    # error without a type may be either API's). Symbols or Strings.
    def responses_stream?(anomalies)
      anomalies.none? do |anomaly|
        kind = anomaly[:kind].to_s
        kind == "wrong_protocol" || (kind == "ignored_event" && anomaly[:message].to_s.include?("without a type"))
      end
    end

    # What the legacy site ran: nothing when its decoder raised on a line
    # or read none (StockDecoder), or when its processor raised on the
    # arguments (the simulation then emits nothing); otherwise the calls the
    # simulation emitted.
    def legacy_ran(processor, payload, result)
      kinds = processor.anomalies.map { |anomaly| anomaly[:kind] }
      return [] if StockDecoder.ran_nothing?(payload, gem_errors: result.errors, anomaly_kinds: kinds)

      Array(processor.legacy_tool_call_ids)
    end

    def run_step(result)
      result.requested.concat(call_ids(yield))
    rescue DiscourseAiStream::Error => e
      # Nothing is lost by the error: the items before it come with it, and
      # a call with bad arguments was still requested.
      result.requested.concat(call_ids(e.items))
      result.requested << e.tool_id if e.respond_to?(:tool_id) && e.tool_id
      result.errors << "#{e.class.name.split("::").last}: #{e.message}"
    end

    def call_ids(items) = items.filter_map { |item| item.id.to_s if item.respond_to?(:parameters) && !item.partial? }

    # Walks `scope` (an Audit::Table, an ActiveRecord relation, or anything
    # with find_each, in_batches or each) and adds every row to a Report;
    # `progress` (an Audit::Progress) counts the rows.
    def run(scope, provider_names: {}, batch_size: BATCH_SIZE, report: Report.new, progress: nil)
      each_row(scope, batch_size) do |row|
        provider = field(row, :provider_id)
        name = provider_names.fetch(provider) { "provider #{provider.inspect}" }
        report.add(name, field(row, :id), analyze(field(row, :raw_response_payload)))
        progress&.advance
      end
      report
    end

    def each_row(scope, batch_size, &)
      if scope.respond_to?(:find_each)
        scope.find_each(batch_size: batch_size, &)
      elsif scope.respond_to?(:in_batches)
        scope.in_batches(of: batch_size) { |batch| batch.each(&) }
      else
        scope.each(&)
      end
    end

    def field(row, name)
      return row.public_send(name) if row.respond_to?(name)

      row[name] || row[name.to_s] if row.respond_to?(:[])
    end

    # {provider_id => name} for the providers `model::Provider` defines.
    def provider_names(model)
      provider = model.const_get(:Provider, false)
      PROVIDERS.select { |name| provider.const_defined?(name, false) }.to_h { |name| [provider.const_get(name), name] }
    end

    # The rows to decode (an Audit::Table): the given providers' rows
    # created since `since` (nil: all).
    def table(model, since:, provider_ids: provider_names(model).keys, batch_size: BATCH_SIZE)
      Table.new(model, since: since, provider_ids: provider_ids, batch_size: batch_size)
    end

    # PROVIDER of the rake task: nil or empty for every OpenAI-compatible
    # provider, else one of their names (any case).
    def select_providers(names, provider)
      return names if provider.to_s.strip.empty?

      chosen = names.select { |_id, name| name.casecmp?(provider.to_s.strip) }
      return chosen unless chosen.empty?

      raise ArgumentError, "PROVIDER must be one of #{names.values.join(", ")}; got #{provider.inspect}"
    end

    # SINCE of the rake task: a date or time written year first
    # (2026-01-15, 2026-01-15T10:00Z), "30d" (days back), "all", or nothing
    # (DEFAULT_DAYS back). Not what else Time.parse takes: it reads "30" as
    # the 30th of this month.
    def parse_since(value, now: Time.now)
      text = value.to_s.strip
      return now - (DEFAULT_DAYS * 86_400) if text.empty?
      return nil if text.casecmp?("all")
      return now - (Integer(text[0...-1], 10) * 86_400) if text.match?(/\A\d+d\z/i)

      since = YEAR_FIRST.match(text) && Time.parse(text)
      unless since && since.strftime("%F") == text[0, 10]
        raise ArgumentError, "SINCE must be a date or time (year first), a number of days like 30d, or all; " \
                             "got #{value.inspect}"
      end
      raise ArgumentError, "SINCE is in the future: #{value.inspect}" if since > now

      since
    end

    # A date, then maybe a time and a UTC offset: what Time.parse reads
    # as written (it reads a month's name after a date, and drops a zone's).
    YEAR_FIRST = /\A\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?: ?(?:Z|UTC|[+-]\d{2}:?\d{2}))?)?\z/

    # The rake task: audit `model` (AiApiAuditLog), show progress on
    # `progress_io` and print the report on `io`, saying what the counts
    # mean on a site of `generation` (Discourse.generation).
    def run_task(model:, since: nil, provider: nil, io: $stdout, progress_io: $stderr, batch_size: BATCH_SIZE,
                 every: Progress::EVERY, generation: Discourse.generation)
      from = parse_since(since)
      names = select_providers(provider_names(model), provider)
      io.puts "discourse_ai_stream audit: #{MEASURES}, in the streamed chat completions of " \
              "#{names.values.join(", ")} #{from ? "since #{from.utc.iso8601}" : "of all time"}"
      io.puts(generation == :legacy ? ON_LEGACY : ON_CURRENT) if generation
      rows = table(model, since: from, provider_ids: names.keys, batch_size: batch_size)
      progress = Progress.new(io: progress_io, total: rows.estimate, every: every)
      report = run(rows, provider_names: names, progress: progress)
      progress.finish
      report.lines.each { |line| io.puts line }
      report
    end
  end
end

require_relative "audit/progress"
require_relative "audit/report"
require_relative "audit/stock_decoder"
require_relative "audit/table"
