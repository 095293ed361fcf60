# frozen_string_literal: true

module DiscourseAiStream
  module Audit
    # Totals per provider over many responses, and the rows that lost most.
    class Report
      # worst: [[lost, requested, row_id], ...], most lost first.
      Stats = Struct.new(:provider, :responses, :requested, :dropped, :responses_with_loss, :skipped,
                         :other_protocol, :errors, :worst, keyword_init: true)

      COUNTS = %i[responses requested dropped responses_with_loss skipped other_protocol].freeze
      HEADER = ["provider", "responses", "tool calls", "dropped by legacy", "responses with loss"].freeze

      attr_reader :worst_rows

      def initialize(worst_rows: WORST_ROWS)
        @worst_rows = worst_rows
        @stats = {}
      end

      # result: an Audit::Result, or nil for a row that is not a stream.
      def add(provider, row_id, result)
        stats = stats_of(provider)
        return stats[result ? :other_protocol : :skipped] += 1 if result.nil? || result.other_protocol

        stats.responses += 1
        stats.requested += result.requested.size
        stats.errors << row_id unless result.errors.empty?
        return unless result.lost?

        stats.dropped += result.lost.size
        stats.responses_with_loss += 1
        rank(stats.worst, [result.lost.size, result.requested.size, row_id])
      end

      def providers = @stats.values.sort_by { |stats| stats.provider.to_s }

      def total(name) = providers.sum { |stats| stats[name] }

      def lines
        return ["no streamed responses found"] if %i[responses skipped other_protocol].sum { |key| total(key) }.zero?

        table + worst_lines + notes
      end

      private

      def stats_of(provider)
        @stats[provider] ||= Stats.new(provider:, **COUNTS.to_h { [_1, 0] }, errors: [], worst: [])
      end

      def table
        rows = [HEADER, *providers.map { |stats| row(stats.provider, stats) }, row("total", nil)]
        widths = HEADER.each_index.map { |i| rows.map { |cells| cells[i].length }.max }
        rows.map { |cells| format_row(cells, widths) }
      end

      # Most lost first, then most requested; among equals the earlier row.
      def rank(worst, entry)
        position = worst.index { |lost, requested, _| [lost, requested].<=>(entry.first(2)).negative? }
        worst.insert(position || worst.size, entry)
        worst.pop while worst.size > worst_rows
      end

      def row(label, stats)
        values = %i[responses requested dropped responses_with_loss].map { |key| stats ? stats[key] : total(key) }
        [label.to_s, *values.map(&:to_s)]
      end

      def format_row(cells, widths)
        cells.each_with_index.map { |cell, i| i.zero? ? cell.ljust(widths[i]) : cell.rjust(widths[i]) }.join("  ")
      end

      def worst_lines
        providers.reject { |stats| stats.worst.empty? }.map do |stats|
          rows = stats.worst.map { |lost, requested, id| "#{id} (#{lost} of #{requested} lost)" }
          "worst rows, #{stats.provider}: #{rows.join(", ")}"
        end
      end

      def notes
        notes = []
        skipped = total(:skipped)
        notes << "skipped #{skipped} row(s) whose payload is not a stream" if skipped.positive?
        other = total(:other_protocol)
        if other.positive?
          notes << "skipped #{other} streamed row(s) with no chat completion chunk (Responses API streams): " \
                   "the audit does not count the stock Responses processor's losses"
        end
        errors = providers.flat_map(&:errors)
        unless errors.empty?
          notes << "#{errors.size} response(s) raised while decoding (counted as far as they went): " \
                   "#{errors.first(worst_rows * 2).join(", ")}#{", ..." if errors.size > worst_rows * 2}"
        end
        notes
      end
    end
  end
end
