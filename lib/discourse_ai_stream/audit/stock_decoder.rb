# frozen_string_literal: true

require "json"

module DiscourseAiStream
  module Audit
    # What Discourse's JsonStreamDecoder did with a raw payload before the
    # legacy processor saw any chunk. It takes the JSON of a line with an
    # unanchored `data: ({.*})\s*$` (so `data:{` without the space is never
    # read) and parses it without a rescue, except for the last line of a
    # read, which it keeps and tries again with the next read. So a complete
    # line that matches and does not parse raised JSON::ParserError, failing
    # the request, as soon as anything followed its newline, whatever the
    # reads were; only a bad last line of the whole payload got through.
    module StockDecoder
      LINE = /data: (\{.*\})\s*$/n
      # Kinds of anomaly the gem reports for lines it could not read.
      LINE_ANOMALIES = %i[non_json_data unreadable_event truncated_event unexpected_payload unprefixed_data
                          unknown_sse_field].freeze
      # `data: {` after something else on its line (a comment, another field).
      MID_LINE = /[^\n]data: \{/n
      # JSON.parse's default max_nesting: a line nested deeper raised in the
      # stock decoder, while the gem reads it.
      MAX_NESTING = 100

      module_function

      # True when the legacy site ran no call of the payload: the decoder
      # read no line at all, or raised on one.
      def ran_nothing?(payload, gem_errors: [], anomaly_kinds: [])
        text = payload.b
        !LINE.match?(text) || (suspect?(text, gem_errors, anomaly_kinds) && raises?(text))
      end

      # Parsing every line in Ruby costs a few times the gem's decoding: only
      # when the gem itself found a line it could not read, a `data: {`
      # that does not start its line, or more opening brackets than
      # JSON.parse accepts levels, can the stock decoder have raised.
      def suspect?(text, gem_errors, anomaly_kinds)
        !gem_errors.empty? || anomaly_kinds.intersect?(LINE_ANOMALIES) || MID_LINE.match?(text) ||
          text.count("[{") > MAX_NESTING
      end

      def raises?(text)
        lines = text.split("\n", -1)
        # The last element follows the last newline; the line before it
        # raises only when that is not empty.
        complete = lines.last.empty? ? lines.size - 2 : lines.size - 1
        lines.first(complete).any? { |line| unparsable?(line) }
      end

      def unparsable?(line)
        match = LINE.match(line)
        return false unless match

        JSON.parse(match[1].force_encoding(Encoding::UTF_8))
        false
      rescue JSON::ParserError
        true
      end
    end
  end
end
