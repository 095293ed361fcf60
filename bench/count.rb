# frozen_string_literal: true

# The driver bench/count runs under callgrind: STREAMS runs of one
# workload's streams through one of bin/bench's paths (bench/paths.rb).
#
#   ruby bench/count.rb WORKLOAD STREAMS PATH
#
# PATH: raw, floor, hash, or stock (the processor of
# DISCOURSE_STOCK_PROCESSOR on the hash path). Prints the events of one run
# on stderr.

ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift(File.join(ROOT, "lib"), __dir__)

require "discourse_ai_stream"
require "workloads"
require "paths"

name, streams, path = ARGV
abort "PATH is raw, floor, hash or stock" unless %w[raw floor hash stock].include?(path)
workload = Bench::Workloads.named(ROOT, name) or abort("no workload #{name}")
require File.expand_path(ENV.fetch("DISCOURSE_STOCK_PROCESSOR")) if path == "stock"
events = workload.reads.sum do |reads|
  count = 0
  Bench::Paths::Lines.each_data(reads) { count += 1 }
  count
end
warn "events #{events}"
Integer(streams).times { Bench::Paths.public_send(path, workload) }
