# frozen_string_literal: true

require "benchmark/ips"

module Bench
  # Time and allocations of one path on one workload.
  Result = Struct.new(:seconds, :allocations, keyword_init: true) do
    def us_per_event(workload)
      seconds * 1e6 / workload.events
    end

    def mb_per_s(workload)
      workload.bytes / seconds / 1e6
    end

    def allocations_per_event(workload)
      allocations.to_f / workload.events
    end
  end

  # Measures paths with benchmark-ips. Each round measures every path of a
  # workload one after the other, so a burst of load on the machine hits all
  # of them alike; a path's time is the median of its rounds.
  class Measure
    def initialize(rounds:, time:, warmup:)
      @rounds = rounds
      @time = time
      @warmup = warmup
    end

    # { path => Result } for `paths` (Symbols of Bench::Paths).
    def run(workload, paths)
      workload.reads
      times = paths.to_h { |path| [path, []] }
      @rounds.times do
        report = ips(workload, paths)
        paths.each { |path| times[path] << (1.0 / report.fetch(path.to_s).ips) }
      end
      paths.to_h { |path| [path, Result.new(seconds: median(times[path]), allocations: allocations(workload, path))] }
    end

    private

    def ips(workload, paths)
      report = Benchmark.ips(quiet: true) do |x|
        x.config(time: @time, warmup: @warmup)
        paths.each { |path| x.report(path.to_s) { Paths.public_send(path, workload) } }
      end
      report.entries.to_h { |entry| [entry.label, entry] }
    end

    # Objects allocated by one whole stream (the mean of a few, after one
    # warm-up stream).
    def allocations(workload, path)
      Paths.public_send(path, workload)
      streams = (20_000 / workload.events).clamp(1, 20)
      before = GC.stat(:total_allocated_objects)
      streams.times { Paths.public_send(path, workload) }
      (GC.stat(:total_allocated_objects) - before).fdiv(streams)
    end

    def median(values)
      sorted = values.sort
      mid = sorted.size / 2
      sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
    end
  end
end
