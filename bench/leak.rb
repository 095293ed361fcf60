# frozen_string_literal: true

# The leak check (docs/reliability.md#leaks): 100 000 streams, each through
# a fresh processor, mixing text, tool calls (partial and not, several per chunk),
# the Hash path and the raw path, and streams that end in an error (a
# provider error event, invalid JSON, broken tool arguments). Process RSS
# (VmRSS in /proc/self/status) is sampled after a GC every 10 000 streams;
# the first 10 000 are the warm-up (allocator arenas, Ruby heap pages,
# lazily built constants). "No growth" means: RSS after the last stream is
# at most BOUND_MB above the sample after the warm-up.
#
#   bin/bench --leak [STREAMS]

ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift(File.join(ROOT, "lib"), __dir__)

require "discourse_ai_stream"
require "json"
require "workloads"

module Bench
  # Runs the streams and prints the samples.
  class Leak
    BOUND_MB = 4.0
    EVERY = 10_000

    W = Workloads

    def initialize(streams)
      @streams = streams
      @kinds = build_kinds
      @errors = 0
    end

    def run
      puts "bin/bench --leak: #{@streams} streams through fresh processors; RSS after GC.start every #{EVERY}"
      samples = []
      (1..@streams).each do |n|
        one(n)
        samples << sample(n) if (n % EVERY).zero?
      end
      verdict(samples)
    end

    private

    # [sse, partial] pairs of small streams of every kind.
    def build_kinds
      text = W.text(20, seed: 3).sse
      tools = W.tools("t", "", calls: 2, size: 300, partial: false, step: 7).sse
      [[text, false], [tools, false], [tools, true], [W.mistral.sse, true],
       [provider_error, false], ["#{text.byteslice(0, 400)}\ndata: {\"choices\": [}\n\n", false],
       [broken_arguments, true]]
    end

    def provider_error
      "event: error\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":529}}\n\n"
    end

    def broken_arguments
      head = W.delta({ tool_calls: [{ index: 0, id: "c1", function: { name: "f", arguments: "{\"a\": tru" } }] })
      "#{head}#{W.delta({}, finish_reason: "tool_calls")}data: [DONE]\n\n"
    end

    def one(number)
      sse, partial = @kinds[number % @kinds.size]
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
      number.even? ? raw(processor, sse) : hash(processor, sse)
      processor.finish
    rescue DiscourseAiStream::Error, JSON::ParserError
      @errors += 1
    end

    def raw(processor, sse)
      (0...sse.bytesize).step(512) { |at| processor.decode_chunk(sse.byteslice(at, 512)) }
    end

    def hash(processor, sse)
      sse.each_line do |line|
        next unless line.start_with?("data: {")

        processor.process_streamed_message(JSON.parse(line.byteslice(6..), symbolize_names: true))
      end
    end

    def sample(number)
      GC.start
      rss = File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i / 1024.0
      puts format("  %7d streams  RSS %7.1f MB", number, rss)
      rss
    end

    def verdict(samples)
      return puts("  too few streams for a verdict (need #{2 * EVERY})") if samples.size < 2

      growth = samples.last - samples.first
      puts format("  growth after the warm-up (%d -> %d streams): %+.1f MB; bound %.1f MB: %s",
                  EVERY, @streams, growth, BOUND_MB, growth <= BOUND_MB ? "PASS (no growth)" : "FAIL")
      puts "  #{@errors} streams ended in an error, as designed"
    end
  end
end

Bench::Leak.new(Integer(ARGV.fetch(0, 100_000))).run
