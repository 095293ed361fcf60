# frozen_string_literal: true

# The newest generation (commit 7a4684a2), as docs/discourse-contract.md
# describes it: the current one, plus a stop_reason reader on both
# processors, the output-limit rule, and Groq served by Endpoints::OpenAi.
# Loaded after current.rb and endpoints.rb.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

module DiscourseAi
  module Completions
    # A "length" finish hands out no tool call at all; text is kept.
    class OpenAiMessageProcessor
      attr_reader :stop_reason

      prepend(Module.new do
        def process_message(json)
          @stop_reason = json.dig(:choices, 0, :finish_reason)
          return super unless @stop_reason == "length"

          super(choices: [{ message: json.dig(:choices, 0, :message).except(:tool_calls) }], usage: json[:usage])
        end

        def process_streamed_message(json)
          @stop_reason = json.dig(:choices, 0, :finish_reason) || @stop_reason
          super
        end

        def finish
          return super unless @stop_reason == "length"

          @calls.clear
          []
        end
      end)
    end

    # response.incomplete drops the open call; an incomplete function_call
    # item is not run. notify_progress and current_tool_progress are public,
    # as the stock class's callbacks for its JSON tracker are.
    class OpenAiResponsesMessageProcessor
      attr_reader :stop_reason, :cache_write_tokens

      undef_method :cached_tokens

      def notify_progress(_key, _value); end

      def current_tool_progress; end

      prepend(Module.new do
        def process_message(json)
          @stop_reason = json.dig(:incomplete_details, :reason)
          kept = Array(json[:output]).reject { |item| item[:type] == "function_call" && item[:status] == "incomplete" }
          super(json.merge(output: kept))
        end

        def process_streamed_message(json)
          if json[:type] == "response.incomplete"
            @stop_reason = json.dig(:response, :incomplete_details, :reason)
            @tool = nil
          end
          return if json.dig(:item, :status) == "incomplete" && json.dig(:item, :type) == "function_call"

          super
        end
      end)
    end

    module Endpoints
      # Groq is a provider of Endpoints::OpenAi now.
      OpenAi.singleton_class.prepend(Module.new { def can_contact?(provider) = provider == "groq" || super })
    end
  end
end
