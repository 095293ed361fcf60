# frozen_string_literal: true

module DiscourseAiStream
  # Drop-in replacement for DiscourseAi::Completions::OpenAiResponsesMessageProcessor
  # (the Responses API). The decoding lives in Rust (defined by the native
  # extension, over the same core as OpenAiMessageProcessor); this file adds
  # the Ruby-side conveniences.
  class OpenAiResponsesMessageProcessor
    include ProcessorSupport

    # The key of provider_data (ToolCall) and provider_info (Thinking).
    PROVIDER_KEY = :open_ai_responses

    # partial_tool_calls: stream tool parameters as they arrive (the same
    #   ToolCall object, updated in place, partial? true until complete).
    # output_thinking: return reasoning summaries as Thinking objects
    #   (partial ones while they stream, a whole one per reasoning item).
    # max_line_bytes: longest SSE line decode_chunk accepts (8 MiB).
    # tool_call_class, thinking_class: the classes of returned items; by
    #   default DiscourseAiStream.tool_call_class / .thinking_class, resolved now.
    # on_anomaly: a callable receiving each anomaly Hash; by default
    #   DiscourseAiStream.on_anomaly.
    # strict: decode_chunk raises StreamError for an event it cannot read
    #   (by default it skips it with an :unreadable_event anomaly), as
    #   OpenAiMessageProcessor's.
    # output_limit: the calls still open at response.incomplete, and items
    #   whose status is "incomplete": :drop, :drop_cut or :keep
    #   (docs/responses-api.md); by default the host's.
    def initialize(partial_tool_calls: false, output_thinking: false, max_line_bytes: Native::MAX_LINE_BYTES,
                   tool_call_class: nil, thinking_class: nil, on_anomaly: nil, strict: false, output_limit: nil)
      @on_anomaly = on_anomaly
      self.thinking_class = thinking_class
      @output_limit = (output_limit || Discourse.output_limit(Discourse::STOCK_RESPONSES_PROCESSOR)).to_sym
      klass = tool_call_class || DiscourseAiStream.tool_call_class
      __setup(!!partial_tool_calls, !!output_thinking, Integer(max_line_bytes), klass, !!strict, @output_limit)
    end

    # Usage is reported as Discourse's Responses processor does: net of cache.
    def usage_mode = :net_of_cache

    private

    def inspect_options = "output_thinking=#{output_thinking?}"

    # Called by the native code for each thinking item: a partial delta, or
    # the whole summary of a finished reasoning item with its ids.
    def __thinking(message, partial, reasoning_id, encrypted_content)
      return thinking(message: message, partial: true) if partial

      info = { reasoning_id: reasoning_id, encrypted_content: encrypted_content }.compact
      thinking(message: message, partial: false, provider_info: { PROVIDER_KEY => info })
    end

    # Called by the native code for a web search (a message) or, with no
    # message, the response's output items for the next turn: `items`, or
    # nil for an empty provider_info.
    def __tool_thinking(message, items)
      info = items ? { PROVIDER_KEY => { output_items: items } } : {}
      thinking(message: message, partial: false, provider_info: info)
    end

    # Called by the native code when the message after a reasoning item
    # arrives: the Thinking returned earlier learns its id (a Thinking class
    # without provider_info, older Discourse's, has nowhere to keep it).
    def __link_thinking(thinking, message_id)
      info = thinking.provider_info if thinking.respond_to?(:provider_info)
      return unless info.is_a?(Hash)

      (info[PROVIDER_KEY] ||= {})[:next_message_id] = message_id
    end
  end
end
