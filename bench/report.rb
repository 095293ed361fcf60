# frozen_string_literal: true

module Bench
  # The table of one run, the scaling pairs and the targets (docs/decisions.md).
  class Report
    PATHS = %i[raw hash floor].freeze
    # The scaling pairs: [large, small].
    PAIRS = Workloads::LARGE.map { |small, large| [large, small] }.freeze
    # Each Responses API workload and the chat workload with the same texts
    # or arguments.
    TWINS = [%w[responses_text_2k text_2k], %w[responses_tools_4k tools_4k],
             %w[responses_tools_4k_partial tools_4k_partial]].freeze

    # `results`: { workload => { path => Result } }; `scalings`:
    # { [large, small] => { path => ratio } } (Measure#scaling).
    def initialize(results, scalings = {}, out: $stdout)
      @results = results
      @scalings = scalings
      @out = out
      @stock = results.values.any? { |r| r.key?(:stock) }
    end

    def print
      table
      scaling
      twins
      targets
    end

    private

    def by_name(name)
      @results.find { |workload, _| workload.name == name }
    end

    def table
      @out.puts header
      @out.puts "-" * header.size
      @results.each { |workload, paths| @out.puts row(workload, paths) }
      @out.puts
    end

    def header
      format("%-18s %6s %7s |%s| %6s %6s | %7s%s", "workload", "events", "KB",
             PATHS.map { |p| format(" %-5s %7s %6s %5s ", p, "MB/s", "us/ev", "al/ev") }.join("|"),
             "raw x", "hash x", "share", @stock ? format(" | %6s %7s %5s", "stock", "stk-sh", "sh/st") : "")
    end

    def row(workload, paths)
      cells = PATHS.map do |path|
        r = paths.fetch(path)
        format(" %5s %7.1f %6.2f %5.2f ", "", r.mb_per_s(workload), r.us_per_event(workload),
               r.allocations_per_event(workload))
      end
      format("%-18s %6d %7.0f |%s| %5.1fx %5.2fx | %7.2f%s", workload.name, workload.events, workload.bytes / 1024.0,
             cells.join("|"), speedup(paths, :raw), speedup(paths, :hash), share(workload, paths, :hash),
             stock_cells(workload, paths))
    end

    def stock_cells(workload, paths)
      return "" unless @stock
      return format(" | %6s %7s %5s", "-", "-", "-") unless paths.key?(:stock)

      format(" | %6.2f %7.2f %5.2f", paths[:stock].us_per_event(workload), share(workload, paths, :stock),
             share(workload, paths, :hash) / share(workload, paths, :stock))
    end

    # Throughput as a multiple of the floor's.
    def speedup(paths, path)
      paths.fetch(:floor).seconds / paths.fetch(path).seconds
    end

    # What a path costs beyond the floor, in µs per event (measured against
    # the floor's neighbouring streams; see Measure#shares).
    def share(workload, paths, path)
      paths.fetch(path).share_us_per_event(workload) ||
        (paths.fetch(path).us_per_event(workload) - paths.fetch(:floor).us_per_event(workload))
    end

    def scaling
      @out.puts "Scaling (cost of one large stream / one small one, streams run in turn; 10.0 is linear):"
      PAIRS.each do |large, small|
        ratios = pair_ratios(large, small)
        next @out.puts("  #{large} / #{small}: not run") unless ratios

        @out.puts format("  %-17s / %-16s bytes %5.2fx   raw %5.2fx   hash %5.2fx   floor %5.2fx",
                         large, small, *ratios)
      end
      @out.puts
    end

    # [bytes ratio, raw, hash, floor], or nil when the pair was not run.
    def pair_ratios(large, small)
      ratios = @scalings[[large, small]]
      return nil unless ratios

      [by_name(large)[0].bytes.fdiv(by_name(small)[0].bytes)] + PATHS.map { |p| ratios.fetch(p) }
    end

    # Time per event of each Responses workload over its chat twin's, on the
    # raw path and the floor: the ratios to the floor differ as much as the
    # floors do.
    def twins
      @out.puts "Responses API / chat, time per event (1.00x is the same time):"
      TWINS.each do |names|
        pair = names.map { |name| by_name(name) }
        next @out.puts("  #{names.join(" / ")}: not run") unless pair.all?

        raw, floor = %i[raw floor].map do |path|
          pair.map { |workload, paths| paths.fetch(path).us_per_event(workload) }
        end
        @out.puts format("  %-26s / %-16s raw %5.2f / %5.2f us = %4.2fx   floor %5.2f / %5.2f us = %4.2fx",
                         *names, *raw, raw[0] / raw[1], *floor, floor[0] / floor[1])
      end
      @out.puts
    end

    def targets
      @out.puts "Targets:"
      Targets.new(self, @results).each { |line| @out.puts "  #{line}" }
    end

    public :speedup, :share, :pair_ratios
  end

  # The targets (docs/decisions.md), each checked against this run.
  class Targets
    include Enumerable

    def initialize(report, results)
      @report = report
      @results = results.to_h { |workload, paths| [workload.name, [workload, paths]] }
    end

    def each(&)
      lines = speedups + allocations + hash_shares + scalings
      lines.each(&)
    end

    private

    def mark(pass, text)
      return "n/a   #{text}" if pass.nil?

      "#{pass ? "PASS" : "FAIL"}  #{text}"
    end

    def speedups
      # The Responses API workloads have the chat processor's targets.
      [["text_2k", 10], ["tools_4k", 15], ["tools_4k_partial", 10], ["responses_text_2k", 10],
       ["responses_tools_4k", 15], ["responses_tools_4k_partial", 10]].map do |name, floor|
        next mark(nil, "raw #{name} >= #{floor}x the floor: not run") unless @results[name]

        x = @report.speedup(@results[name][1], :raw)
        mark(x >= floor, format("raw %s: %.1fx the floor's throughput (target >= %dx)", name, x, floor))
      end
    end

    def allocations
      [["text_2k", 2.0, "<="], ["tools_4k", 0.1, "<"], ["responses_text_2k", 2.0, "<="],
       ["responses_tools_4k", 0.1, "<"]].map do |name, limit, op|
        next mark(nil, "raw #{name} allocations: not run") unless @results[name]

        workload, paths = @results[name]
        per = paths[:raw].allocations_per_event(workload)
        mark(per.public_send(op, limit), format("raw %s: %.3f Ruby allocations per event (target %s %s)",
                                                name, per, op, limit))
      end
    end

    def hash_shares
      %w[text_2k tools_4k tools_4k_partial
         responses_text_2k responses_tools_4k responses_tools_4k_partial].filter_map do |name|
        next unless @results[name]

        workload, paths = @results[name]
        share = @report.share(workload, paths, :hash)
        next mark(nil, format("hash %s: share %.2f us/event; stock not measured (bench/README.md)", name, share)) \
          unless paths[:stock]

        stock = @report.share(workload, paths, :stock)
        mark(share <= stock, format("hash %s: processor share %.2f us/event, stock's %.2f (%.2f of it; " \
                                    "target <= 1)", name, share, stock, share / stock))
      end
    end

    def scalings
      Report::PAIRS.map do |large, small|
        ratios = @report.pair_ratios(large, small)
        next mark(nil, "scaling #{large} / #{small}: not run") unless ratios

        mark(ratios[1] <= 11.0, format("scaling raw %s / %s: %.2fx for %.2fx the bytes (target about 10x, <= 11)",
                                       large, small, ratios[1], ratios[0]))
      end
    end
  end
end
