# frozen_string_literal: true

# The legacy generation (Discourse AI up to 2026.10), as
# docs/discourse-contract.md describes it.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

module DiscourseAi
  module Completions
    # One @tool at a time; of each streamed chunk only tool_calls[0] is read,
    # so a second call in the same chunk is never seen. Returns nil or one
    # item. Usage: the first value seen wins, prompt_tokens as sent.
    class OpenAiMessageProcessor
      attr_reader :prompt_tokens, :completion_tokens, :cached_tokens

      def initialize(partial_tool_calls: false)
        @partial_tool_calls = partial_tool_calls
        @tool = nil
        @arguments = nil
      end

      def process_streamed_message(json)
        record_usage(json[:usage])
        choice = json.dig(:choices, 0) || {}
        delta = choice[:delta] || {}
        first_call = delta[:tool_calls]&.first
        return follow(first_call) if first_call
        return complete_tool if @tool && (choice[:finish_reason] || delta[:tool_calls] == [])

        delta[:content] if text?(delta[:content])
      end

      def finish
        @tool ? [complete_tool] : []
      end

      private

      def follow(call)
        id = call[:id]
        name = call.dig(:function, :name)
        done = complete_tool if @tool && text?(id) && id != @tool.id
        if text?(id) && text?(name)
          @tool = ToolCall.new(id: id, name: name)
          @arguments = +""
        end
        return done unless @tool

        @arguments << call.dig(:function, :arguments).to_s
        done || progress
      end

      def progress
        return unless @partial_tool_calls

        @tool.partial = true
        @tool
      end

      def complete_tool
        tool = @tool
        @tool = nil
        tool.parameters = parse(@arguments) unless @arguments.empty?
        tool.partial = false
        tool
      end

      def record_usage(usage)
        return unless usage.is_a?(Hash)

        @prompt_tokens = usage[:prompt_tokens] if @prompt_tokens.nil?
        @completion_tokens = usage[:completion_tokens] if @completion_tokens.nil?
        @cached_tokens = usage.dig(:prompt_tokens_details, :cached_tokens) if @cached_tokens.nil?
      end
    end

    module Endpoints
      # Older Discourse: everything in the class; processor private and
      # memoized, the constants resolved from inside the namespace.
      class OpenAi < Base
        class_eval(&STOCK_OPENAI_METHODS)

        private

        def final_log_update(log)
          log_usage(log, :prompt_tokens, :completion_tokens, :cached_tokens)
        end
      end
    end
  end
end
