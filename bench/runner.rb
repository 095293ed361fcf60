# frozen_string_literal: true

# The benchmark suite; run it with bin/bench (see bench/README.md).
#
#   ruby bench/runner.rb [--quick] [--only NAME,NAME] [--rounds N] [--time S] [--dump DIR]

require "etc"
require "fileutils"
require "optparse"

ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift(File.join(ROOT, "lib"), __dir__)

require "discourse_ai_stream"
require "workloads"
require "paths"
require "measure"
require "report"

module Bench
  # Parses the command line, runs every workload, prints the report.
  class Runner
    def initialize(argv)
      @options = { rounds: 3, time: 1.5, warmup: 0.3, only: nil, dump: nil }
      parser.parse!(argv)
      @stock = load_stock
    end

    def run
      workloads = Workloads.all(ROOT).select { |w| @options[:only].nil? || @options[:only].include?(w.name) }
      return dump(workloads) if @options[:dump]

      preamble(workloads)
      measure = Measure.new(**@options.slice(:rounds, :time, :warmup))
      results = workloads.to_h { |w| [w, measure.run(w, paths(w), shared: paths(w) & %i[hash stock])] }
      Report.new(results, scalings(measure, workloads)).print
    end

    private

    def parser
      OptionParser.new do |o|
        o.on("--quick", "one short round (a smoke run; numbers are rough)") do
          @options.merge!(rounds: 1, time: 0.2, warmup: 0.05)
        end
        o.on("--only NAMES", Array, "only these workloads") { |v| @options[:only] = v }
        o.on("--rounds N", Integer, "rounds per workload (median reported)") { |v| @options[:rounds] = v }
        o.on("--time SECONDS", Float, "benchmark-ips time per path and round") { |v| @options[:time] = v }
        o.on("--dump DIR", "write each workload's SSE body to DIR/NAME.sse and stop") { |v| @options[:dump] = v }
      end
    end

    # The stock Discourse processor, when DISCOURSE_STOCK_PROCESSOR names a
    # Ruby file that defines DiscourseAi::Completions::OpenAiMessageProcessor.
    def load_stock
      path = ENV.fetch("DISCOURSE_STOCK_PROCESSOR", nil)
      return false unless path && !path.empty?

      require File.expand_path(path)
      true
    end

    def paths(workload)
      list = %i[raw hash floor]
      list << :stock if @stock && workload.name != "recorded" && Paths.stock_class(workload)
      list
    end

    # { [large, small] => { path => ratio } } for the scaling pairs of this run.
    def scalings(measure, workloads)
      Report::PAIRS.filter_map do |names|
        large, small = names.map { |name| workloads.find { |w| w.name == name } }
        [names, measure.scaling(large, small, Report::PATHS)] if large && small
      end.to_h
    end

    def dump(workloads)
      FileUtils.mkdir_p(@options[:dump])
      workloads.each { |w| File.binwrite(File.join(@options[:dump], "#{w.name}.sse"), w.sse) }
      puts "wrote #{workloads.size} workloads to #{@options[:dump]}"
    end

    def preamble(workloads)
      puts "bin/bench: #{RUBY_DESCRIPTION}; #{Etc.nprocessors} cores; load average #{load_average}"
      puts "  #{@options[:rounds]} round(s) x #{@options[:time]} s per path " \
           "(benchmark-ips #{Benchmark::IPS::VERSION}), medians; raw = decode_chunk on 512-byte reads; " \
           "hash = JSON.parse + process_streamed_message; " \
           "floor = Ruby line splitter + JSON.parse"
      puts "  #{@stock ? "stock = the stock Ruby processor on the hash path" : "stock not measured"}; " \
           "al/ev = Ruby objects allocated per event; raw x / hash x = throughput over the floor's"
      puts "  share / stk-sh = time per event beyond the floor: median difference of streams run in turn " \
           "with the floor's, for as long as the rounds took"
      workloads.each { |w| puts format("  %-18s %s", w.name, w.description) }
      puts
    end

    def load_average
      File.read("/proc/loadavg").split.first(3).join(" ")
    rescue SystemCallError
      "?"
    end
  end
end

Bench::Runner.new(ARGV).run
