# frozen_string_literal: true

module DiscourseAiStream
  # Drop-in replacement for DiscourseAi::Completions::OpenAiMessageProcessor.
  # The decoding lives in Rust (defined by the native extension); this file
  # adds the Ruby-side conveniences.
  class OpenAiMessageProcessor
    include ProcessorSupport

    # The key of what the next request carries back (docs/discourse.md), in
    # provider_data (ToolCall) and provider_info (Thinking).
    PROVIDER_KEY = :chat_completions

    # What `usage:` takes, and the names it had before (still accepted).
    USAGE_MODES = { as_sent: :as_sent, net_of_cache: :net_of_cache, legacy: :as_sent, current: :net_of_cache }.freeze

    # partial_tool_calls: stream tool parameters as they arrive (the same
    #   ToolCall object, updated in place, partial? true until complete).
    # usage: :as_sent (prompt_tokens as the server sent it, cache reads
    #   included, as the legacy Discourse processor reports it) or
    #   :net_of_cache (net of cache reads and writes, as Discourse's per-call
    #   processor does). Default: DiscourseAiStream.default_usage, which
    #   follows the host.
    # max_line_bytes: longest SSE line decode_chunk accepts (8 MiB).
    # tool_call_class: the class of returned tool calls; by default
    #   DiscourseAiStream.tool_call_class, resolved now (not at load time).
    # on_anomaly: a callable receiving each anomaly Hash; by default
    #   DiscourseAiStream.on_anomaly.
    # simulate_legacy: also follow the stream as the legacy Discourse
    #   processor did; after finish, legacy_tool_call_ids lists what it ran.
    # strict: decode_chunk raises StreamError for an event it cannot read
    #   (JSON cut short or malformed, invalid UTF-8) instead of skipping it
    #   with an :unreadable_event anomaly.
    # output_limit: the calls still open after finish_reason "length":
    #   :drop, :drop_cut or :keep (docs/behaviour.md); by default the
    #   host's (Discourse.output_limit).
    # output_thinking: return the reasoning (reasoning_content, reasoning)
    #   as whole Thinking objects, each before the text or call it led to.
    # round_trip: hand out what the next request of a tool loop must carry
    #   back: each call's provider_data, and the Thinking's provider_info
    #   (docs/discourse.md#reasoning-models-in-a-tool-loop); false: today's
    #   items whatever the stream holds.
    # model: who the stream comes from (a String), stamped on what is
    #   carried back, so that it goes back to that model only.
    # thinking_class: the class of returned thinking; by default
    #   DiscourseAiStream.thinking_class, resolved now.
    def initialize(partial_tool_calls: false, usage: DiscourseAiStream.default_usage,
                   max_line_bytes: Native::MAX_LINE_BYTES, tool_call_class: nil, on_anomaly: nil,
                   simulate_legacy: false, strict: false, output_limit: nil, output_thinking: false,
                   round_trip: true, model: nil, thinking_class: nil)
      mode = USAGE_MODES.fetch(usage.to_sym) do
        raise ArgumentError, "usage must be one of #{USAGE_MODES.keys.inspect}, not #{usage.inspect}"
      end

      @on_anomaly = on_anomaly
      self.thinking_class = thinking_class
      klass = tool_call_class || DiscourseAiStream.tool_call_class
      @output_limit = (output_limit || Discourse.output_limit(Discourse::STOCK_PROCESSOR)).to_sym
      flags = [partial_tool_calls, simulate_legacy, strict, output_thinking, round_trip].map { _1 ? true : false }
      partial, legacy, strict, thinking, round_trip = flags
      __setup(partial, mode, Integer(max_line_bytes), klass, legacy, strict, @output_limit, thinking, round_trip,
              model&.to_s)
    end

    private

    def inspect_options = "usage=#{usage_mode}"

    # Called by the native code for the reasoning before an item: `info`,
    # what the next request carries back (nil without the round trip).
    def __thinking(message, info)
      thinking(message: message, partial: false, provider_info: info ? { PROVIDER_KEY => info } : {})
    end
  end
end
