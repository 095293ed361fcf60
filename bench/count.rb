# frozen_string_literal: true

# The driver bench/count runs under callgrind: STREAMS whole streams of one
# workload through one path, after splitting the payloads (not counted).
#
#   ruby bench/count.rb WORKLOAD STREAMS PATH
#
# PATH: raw (decode_chunk on 512-byte reads), floor (JSON.parse of each
# payload), hash (JSON.parse + process_streamed_message), stock (the same
# with the processor of DISCOURSE_STOCK_PROCESSOR). Prints the events of one
# stream on stderr.

ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift(File.join(ROOT, "lib"), __dir__)

require "discourse_ai_stream"
require "workloads"
require "paths"

name, streams, path = ARGV
workload = Bench::Workloads.all(ROOT, scale: false).find { |w| w.name == name } or abort("no workload #{name}")
reads = workload.reads.first
payloads = []
Bench::Paths::Lines.each_data(reads) { |payload| payloads << payload.dup }
warn "events #{payloads.size}"

make = if path == "stock"
         require File.expand_path(ENV.fetch("DISCOURSE_STOCK_PROCESSOR"))
         -> { DiscourseAi::Completions::OpenAiMessageProcessor.new(partial_tool_calls: workload.partial) }
       else
         -> { Bench::Paths.processor(workload) }
       end

Integer(streams).times do
  case path
  when "raw"
    processor = make.call
    reads.each { |read| processor.decode_chunk(read) }
    processor.finish
  when "floor"
    payloads.each { |payload| JSON.parse(payload, symbolize_names: true) }
  when "hash", "stock"
    processor = make.call
    payloads.each { |payload| processor.process_streamed_message(JSON.parse(payload, symbolize_names: true)) }
    processor.finish
  else
    abort "PATH is raw, floor, hash or stock"
  end
end
