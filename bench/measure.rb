# frozen_string_literal: true

require "benchmark/ips"

module Bench
  # Time and allocations of one path on one workload.
  # `share`: seconds per stream beyond the floor (see Measure#shares), for
  # the paths measured against it.
  Result = Struct.new(:seconds, :allocations, :share, keyword_init: true) do
    def us_per_event(workload)
      seconds * 1e6 / workload.events
    end

    def share_us_per_event(workload)
      share && (share * 1e6 / workload.events)
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

    # Streams each pair of a path and the floor runs at least, for its share.
    MIN_TURNS = 7

    # { path => Result } for `paths` (Symbols of Bench::Paths); `shared`:
    # the paths whose share beyond the floor is measured.
    def run(workload, paths, shared: [])
      workload.reads
      times = paths.to_h { |path| [path, []] }
      @rounds.times do
        report = ips(workload, paths)
        paths.each { |path| times[path] << (1.0 / report.fetch(path.to_s).ips) }
      end
      shares = shares(workload, shared)
      paths.to_h do |path|
        [path, Result.new(seconds: median(times[path]), allocations: allocations(workload, path), share: shares[path])]
      end
    end

    # { path => cost of one `large` stream over one `small` one } for
    # `paths`: 10.0 is linear when `large` is 10 times `small`.
    #
    # Per path, one `large` stream and as many `small` streams as make the
    # same number of events run in turn (the order swapping each turn), for
    # as long as one workload's rounds take and at least MIN_TURNS turns;
    # the ratio is the median of the turns' ratios. Taken instead as the
    # ratio of two ips medians a minute apart, text_20k over text_2k on the
    # raw path came out 11.13x, 10.28x, 10.64x and 11.08x in four runs of
    # one build, as a major GC or a burst of load fell on one or the other.
    #
    # The `small` streams read copies of it in memory of their own (see
    # Workload#spread), as many bytes as the `large` one reads. The same
    # 0.5 MB read ten times stays in this machine's 2 MB of L2 cache per
    # core while 5 MB cannot, and that alone put the raw path's text ratio
    # at 10.8x to 11.0x instead of 9.8x to 9.9x: perf put the difference on
    # the line reader's first pass over the input. A decoder fed by a
    # socket gets freshly copied bytes whatever the stream's length.
    def scaling(large, small, paths)
      repeat = [large.events.fdiv(small.events).round, 1].max
      copies = small.spread(repeat)
      copies.reads
      paths.to_h do |path|
        times = in_turn(large: -> { Paths.public_send(path, large) }, small: -> { Paths.public_send(path, copies) })
        [path, median(times[:large].zip(times[:small]).map { |big, smalls| big / (smalls / repeat) })]
      end
    end

    private

    # { path => seconds per stream beyond the floor }. The floor and the
    # paths run one whole stream each, in turn (the order rotating), for
    # as long as the ips rounds took; a path's share is the median of its
    # differences to the floor's stream run next to it. A difference of two
    # medians taken seconds apart, as the ips times are, moved the Hash
    # path's share by a third from run to run on this shared machine: the
    # share is a few percent of the stream's time, smaller than the drift.
    def shares(workload, paths)
      return {} if paths.empty?

      times = in_turn(([:floor] + paths).to_h { |path| [path, -> { Paths.public_send(path, workload) }] })
      paths.to_h { |path| [path, median(times[path].zip(times[:floor]).map { |t, floor| t - floor })] }
    end

    # { name => [seconds of each run] } of `runs` ({ name => callable }),
    # taking turns (the order rotating each turn) for as long as the ips
    # rounds of a workload take, and at least MIN_TURNS turns.
    def in_turn(runs)
      times = runs.transform_values { [] }
      order = runs.keys
      deadline = now + (@time * @rounds)
      turn = 0
      while turn < MIN_TURNS || now < deadline
        order.rotate(turn % order.size).each { |name| times[name] << timed(&runs[name]) }
        turn += 1
      end
      times
    end

    def timed
      start = now
      yield
      now - start
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

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
