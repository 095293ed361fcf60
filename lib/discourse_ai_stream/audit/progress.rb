# frozen_string_literal: true

module DiscourseAiStream
  module Audit
    # What an audit that takes minutes shows while it runs, on `io` (stderr;
    # the report goes to stdout): rows done of the estimated total, the
    # rate and the time left. On a terminal one line, redrawn at most every
    # REDRAW seconds; elsewhere (a log, a pipe) one line every `every` rows.
    # Both end with a line for the whole run.
    class Progress
      REDRAW = 0.25
      EVERY = 5_000

      attr_reader :done, :total

      def initialize(io: $stderr, total: 0, every: EVERY, tty: io.respond_to?(:tty?) && io.tty?,
                     clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
        @io = io
        @total = total
        @every = every
        @tty = tty
        @clock = clock
        @started = clock.call
        @done = 0
        @shown_at = nil
        @next_line = every
      end

      def advance(rows = 1)
        @done += rows
        # Rows added to the period while the audit runs.
        @total = @done if @done > @total
        @tty ? redraw : lines
      end

      def finish
        @io.print("\r\e[K") if @tty
        @io.puts("discourse_ai_stream audit: #{@done} rows in #{duration(elapsed)} (#{rate.round} rows/s)")
      end

      # With the time left once the rate is known.
      def line
        speed = rate
        text = "discourse_ai_stream audit: #{@done} of #{@total} rows (#{percent}%), #{speed.round} rows/s"
        speed.positive? ? "#{text}, #{duration((@total - @done) / speed)} left" : text
      end

      def rate
        seconds = elapsed
        seconds.positive? ? @done / seconds : 0.0
      end

      private

      def redraw
        now = @clock.call
        return if @shown_at && now - @shown_at < REDRAW && @done < @total

        @shown_at = now
        @io.print("\r#{line}\e[K")
        @io.flush
      end

      def lines
        return if @done < @next_line

        @io.puts(line)
        @next_line = ((@done / @every) + 1) * @every
      end

      def elapsed = @clock.call - @started

      def percent = @total.zero? ? 100 : (100 * @done / @total)

      def duration(seconds)
        seconds = seconds.round
        return "#{seconds}s" if seconds < 60
        return format("%<m>dm%<s>02ds", m: seconds / 60, s: seconds % 60) if seconds < 3600

        format("%<h>dh%<m>02dm", h: seconds / 3600, m: (seconds % 3600) / 60)
      end
    end
  end
end
