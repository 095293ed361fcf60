# frozen_string_literal: true

module DiscourseAiStream
  # `rake discourse_ai_stream:check`, on a Discourse site: which generation
  # of Discourse AI it runs, how many calls of the bug report's streams its
  # stock processors return beside the gem's, what install! decided, and
  # what the admin dashboard says (Discourse::Health, the same words).
  # `run` returns the exit status (docs/discourse.md#check-a-site). It runs
  # without the native extension too (discourse_ai_stream/host), to say so.
  module Check
    IN_USE = 0 # the gem is in use, and its processors returned every call
    LOST = 1 # a processor of the gem lost a call: a bug to report
    # the native extension did not load, install! did not run, is switched
    # off, or left a stock processor in place
    NOT_IN_USE = 2
    GENERATIONS = {
      legacy: "legacy, the one-call processor: drops every call of a chunk after the first",
      current: "current, the per-call processor: keeps every call of a chunk",
      newest: "newest, the per-call processor with stop_reason: keeps every call of a chunk, " \
              "drops those cut by the output limit"
    }.freeze
    VERDICTS = { IN_USE => "The gem is in use and returned every call.",
                 LOST => "THE GEM LOST A CALL: please report it, with this output.",
                 NOT_IN_USE => "The gem is not in use for every stock processor: see above." }.freeze

    module_function

    def run(io = $stdout)
      io.puts "discourse_ai_stream #{VERSION} on this site",
              "Discourse AI generation: #{GENERATIONS.fetch(Discourse.generation, "none (no stock processor loaded)")}"
      every_call = DiscourseAiStream.load_error ? not_loaded(io) : calls(io, apis)
      installed(io)
      replay(io)
      status = health(io).include?(:not_in_use) ? NOT_IN_USE : IN_USE
      status = LOST unless every_call
      io.puts "", VERDICTS.fetch(status)
      status
    end

    # Each API: the stock class's name, the gem's class, and its streams
    # (run by parsed chunks, the path both classes have). Named when used:
    # without the native extension there are no classes of the gem's.
    def apis
      { "chat" => [Discourse::STOCK_PROCESSOR, OpenAiMessageProcessor, BugReport],
        "Responses" => [Discourse::STOCK_RESPONSES_PROCESSOR, OpenAiResponsesMessageProcessor, BugReport::Responses] }
    end

    def not_loaded(io)
      io.puts "", "Tool calls streamed in one chunk: not run, the gem's native extension did not load (below)"
      true
    end

    # The bug report's streams through each stock processor and the gem's;
    # true when the gem's returned every call.
    def calls(io, apis)
      io.puts "", "Tool calls streamed in one chunk (the bug report's streams), stock beside the gem:"
      losing = []
      every_call = apis.flat_map do |api, (stock_name, ours, streams)|
        stock = Discourse.lookup(stock_name)
        BugReport::CASES.map do |count, partial|
          stock_ids = streams.streamed(stock, count, partial) if stock
          gem_ids = streams.streamed(ours, count, partial)
          losing |= [api] if stock_ids && BugReport.returned(stock_ids) < count
          io.puts "  #{"#{api}, #{count} calls, partial_tool_calls: #{partial}:".ljust(48)}" \
                  "stock #{tally(stock_ids, count)}, gem #{tally(gem_ids, count)}"
          BugReport.returned(gem_ids) == count && gem_ids.size == count
        end
      end.all?
      io.puts(losing.empty? ? "Stock returns every call here." : "Stock loses calls here (#{losing.join(", ")}).") if
        Discourse.generation
      every_call
    end

    # "N of M", and whatever came instead of a call (an error, wrong parameters).
    def tally(ids, count)
      ids ? ["#{BugReport.returned(ids)} of #{count}", *ids.grep_v(/\Acall_/)].join(" ") : "not loaded"
    end

    # What install! decided per stock processor.
    def installed(io)
      status = Discourse.status
      return io.puts("", "install!: not run here (is the plugin installed?); stock in use") if status.empty?

      io.puts "", "install!:"
      status.slice(*Discourse::STOCK_PROCESSORS).each do |name, decision|
        io.puts "  #{name}: #{decision[:replaced] ? replaced : "left stock: #{decision[:reason]}"}"
      end
    end

    # A replaced processor passes everything to the stock code while the
    # gem is switched off (install!'s enabled:).
    def replaced
      Discourse.installed? ? "replaced by the gem's" : "replaced by the gem's, which is switched off: stock decodes"
    end

    # Per dialect of the ChatGpt family, whether the gem sends reasoning
    # back with its tool-call turns, and why not; then whether it does now.
    def replay(io)
      dialects = Discourse.status.except(*Discourse::STOCK_PROCESSORS)
      return if dialects.empty?

      io.puts "", "Reasoning sent back with tool-call turns (install!'s replay:):"
      dialects.each { |name, decision| io.puts "  #{name}: #{decision[:replaced] ? "by the gem" : decision[:reason]}" }
      io.puts "  #{replay_now(dialects)}"
    end

    def replay_now(dialects)
      return "not in use: the gem is switched off" unless Discourse.installed?
      return "not in use: by no dialect (above)" if dialects.values.none? { |decision| decision[:replaced] }
      return "in use" if Discourse.replay?

      "not in use now: switched off (install!'s replay:, the discourse_ai_stream_reasoning_replay setting)"
    end

    # What the admin dashboard says, in its words; the topics it has found.
    def health(io)
      io.puts "", "The admin dashboard (the plugin's problem checks):"
      found = Discourse::Health::TOPICS.filter_map do |topic|
        problem = Discourse::Health.problem(topic) or next
        io.puts "  #{problem.text}"
        problem.cause&.each_line { |line| io.puts "    #{line.chomp}" }
        io.puts "  What to do: #{problem.url}"
        topic
      end
      io.puts "  nothing to report" if found.empty?
      found
    end
    private_class_method :apis, :not_loaded, :calls, :tally, :installed, :replaced, :replay, :replay_now, :health
  end
end
