# frozen_string_literal: true

module DiscourseAiStream
  class CLI
    # `audit FILE... | -`: one line per response, then a summary line. Exit
    # status 1 when any response lost calls.
    class AuditCommand
      EXPORT_KEY = "raw_response_payload"

      def initialize(cli)
        @cli = cli
        @json = false
      end

      def run(args)
        files = parser.parse(args)
        raise UsageError, "audit needs FILE... or - (stdin is a terminal)" if files.empty? && @cli.stdin.tty?

        files = ["-"] if files.empty?
        entries = files.flat_map { |file| responses(file) }.map { |name, payload| entry(name, payload) }
        summary = summarize(entries)
        lines = entries.map { |entry| line(entry) } << summary_line(summary)
        @cli.say(@json ? JSON.generate(responses: entries, summary: summary) : lines.join("\n"))
        summary[:lost].positive? ? 1 : 0
      end

      private

      def parser = OptionParser.new { |opts| opts.on("--json") { @json = true } }

      # [[name, payload], ...]: the file itself, or each row of an export.
      def responses(file)
        raw = @cli.read_input(file)
        # A name that is not UTF-8 is shown with U+FFFD where its bytes are
        # not text: JSON has no other way to say it.
        label = file == "-" ? "stdin" : String.new(file, encoding: Encoding::UTF_8).scrub
        rows = export_rows(raw, label)
        return [[label, raw]] unless rows

        rows.map do |row, line|
          id = row["id"] ? "id #{row["id"]}" : "line #{line}"
          provider = row["provider_id"] ? ", provider #{row["provider_id"]}" : ""
          ["#{label} (#{id}#{provider})", row[EXPORT_KEY].to_s]
        end
      end

      # JSON lines whose objects carry raw_response_payload, else nil.
      def export_rows(raw, label)
        return unless raw.lstrip.start_with?("{")

        lines = raw.each_line.with_index(1).reject { |line, _| line.strip.empty? }
        first = parse_row(lines.first.first)
        return unless first.is_a?(Hash) && first.key?(EXPORT_KEY)

        lines.map do |line, number|
          row = parse_row(line)
          raise UsageError, "#{label}:#{number}: not a JSON object with #{EXPORT_KEY}" unless row.is_a?(Hash)

          [row, number]
        end
      end

      def parse_row(line)
        JSON.parse(line)
      rescue JSON::ParserError
        nil
      end

      def entry(name, payload)
        result = Audit.analyze(payload)
        return { name: name, streamed: false } unless result
        return { name: name, streamed: false, skipped: Audit::OTHER_PROTOCOL } if result.other_protocol

        { name: name, streamed: true, requested: result.requested, ran: result.ran, lost: result.lost,
          errors: result.errors }
      end

      def summarize(entries)
        streamed = entries.select { |entry| entry[:streamed] }
        sums = %i[requested ran lost].to_h { |key| [key, streamed.sum { |entry| entry[key].size }] }
        { responses: entries.size, skipped: entries.size - streamed.size, **sums,
          responses_with_loss: streamed.count { |entry| entry[:lost].any? } }
      end

      def line(entry)
        return "#{entry[:name]}: #{entry[:skipped] || "not a streamed response"}, skipped" unless entry[:streamed]

        text = "#{entry[:name]}: #{entry[:requested].size} tool call(s) requested, " \
               "the legacy processor ran #{entry[:ran].size}, lost #{entry[:lost].size}"
        text += ": #{entry[:lost].join(", ")}" if entry[:lost].any?
        text += " (#{entry[:errors].join("; ")})" if entry[:errors].any?
        text
      end

      def summary_line(summary)
        skipped = summary[:skipped].positive? ? " (#{summary[:skipped]} skipped, not streamed chat completions)" : ""
        "audit: #{summary[:responses]} response(s)#{skipped}, #{summary[:requested]} tool call(s) requested, " \
          "#{summary[:lost]} lost by the legacy processor in #{summary[:responses_with_loss]} response(s)"
      end
    end
  end
end
