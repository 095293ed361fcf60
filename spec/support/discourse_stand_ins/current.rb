# frozen_string_literal: true

# The current generation (later main), as docs/discourse-contract.md
# describes it.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

module DiscourseAi
  module Completions
    # Per-call state: every call of a chunk is read. Returns nil, one item,
    # or an Array. prompt_tokens is net of cache reads and writes.
    class OpenAiMessageProcessor
      attr_reader :prompt_tokens, :completion_tokens, :cache_read_tokens, :cache_write_tokens

      def initialize(partial_tool_calls: false)
        @partial_tool_calls = partial_tool_calls
        @calls = {}
        @last_key = nil
      end

      def process_streamed_message(json)
        choice = json.dig(:choices, 0) || {}
        delta = choice[:delta] || {}
        items = []
        Array(delta[:tool_calls]).each { |call| follow(call, items) }
        items.concat(finish) if text?(choice[:finish_reason])
        items.unshift(delta[:content]) if text?(delta[:content])
        record_usage(json[:usage])
        items.size > 1 ? items : items.first
      end

      def finish
        done = @calls.values.map { |state| complete(state) }
        @calls.clear
        @last_key = nil
        done
      end

      private

      def follow(call, items)
        key = call[:index] || call[:id] || @last_key
        state = @calls[key]
        if state.nil? && text?(call[:id]) && text?(call.dig(:function, :name))
          state = @calls[key] = { tool: ToolCall.new(id: call[:id], name: call.dig(:function, :name)), arguments: +"" }
        end
        return unless state

        @last_key = key
        state[:arguments] << call.dig(:function, :arguments).to_s
        return unless @partial_tool_calls

        state[:tool].partial = true
        items << state[:tool]
      end

      def complete(state)
        tool = state[:tool]
        tool.parameters = parse(state[:arguments]) unless state[:arguments].empty?
        tool.partial = false
        tool
      end

      def record_usage(usage)
        return unless usage.is_a?(Hash)

        reads = (usage.dig(:prompt_tokens_details, :cached_tokens) || usage[:prompt_cache_hit_tokens]).to_i
        writes = usage.dig(:prompt_tokens_details, :cache_write_tokens).to_i
        @prompt_tokens = usage[:prompt_tokens].to_i - reads - writes
        @completion_tokens = usage[:completion_tokens] if usage[:completion_tokens].to_i.positive?
        @cache_read_tokens = reads
        @cache_write_tokens = writes
      end
    end

    module Endpoints
      # Newer Discourse moved the OpenAI-style methods into a shared module.
      module OpenAiShared
        module_eval(&STOCK_OPENAI_METHODS)

        private

        def final_log_update(log)
          log_usage(log, :prompt_tokens, :completion_tokens, :cache_read_tokens, :cache_write_tokens)
        end
      end

      class OpenAi < Base
        include OpenAiShared
      end
    end
  end
end
