# frozen_string_literal: true

# Endpoints common to both generations, on top of legacy.rb or current.rb.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

module DiscourseAi
  module Completions
    module Endpoints
      # Discourse picks the endpoint class by the model's provider name, from
      # a fixed list, with each class's can_contact?. There is no Azure
      # class: OpenAi answers for "azure" too.
      class Base
        PICKED_FROM = %w[OpenAi Vllm SambaNova Mistral OpenRouter Anthropic OpenAiResponses].freeze

        def self.endpoint_for(provider)
          found = PICKED_FROM.map { |name| Endpoints.const_get(name) }.detect { |klass| klass.can_contact?(provider) }
          found or raise ArgumentError, "no endpoint for #{provider.inspect}"
        end

        def self.can_contact?(_provider)
          false
        end
      end

      # Both generations keep the processor method in the class, private and
      # memoized.
      class OpenAi < Base
        def self.can_contact?(provider)
          %w[open_ai azure].include?(provider)
        end

        private

        def responses_api?
          llm_model.lookup_custom_param("enable_responses_api") ? true : false
        end

        def processor
          @processor ||=
            if responses_api?
              OpenAiResponsesMessageProcessor.new(partial_tool_calls: partial_tool_calls)
            else
              OpenAiMessageProcessor.new(partial_tool_calls: partial_tool_calls)
            end
        end
      end

      # Inherits everything.
      class Mistral < OpenAi
        def self.can_contact?(provider)
          provider == "mistral"
        end

        def provider_id
          AiApiAuditLog::Provider::Mistral
        end
      end

      # Decodes the stream itself: one process_streamed_message per event,
      # each result wrapped with Array(), and every ToolCall tagged with the
      # response id in provider_data.
      class Vllm < OpenAi
        def self.can_contact?(provider)
          provider == "vllm"
        end

        def provider_id
          AiApiAuditLog::Provider::Vllm
        end

        private

        def decode(raw)
          json = JSON.parse(raw, symbolize_names: true)
          tag_tool_calls(processor.process_message(json), json[:id])
        end

        def decode_chunk(raw)
          @decoder ||= JsonStreamDecoder.new
          items = []
          (@decoder << raw).each do |json|
            @batch_id = json[:id] if json[:id].is_a?(String) && !json[:id].empty?
            items.concat(tag_tool_calls(Array(processor.process_streamed_message(json)), @batch_id))
          end
          each_tool_call_once(items)
        end

        def decode_chunk_finish
          tag_tool_calls(processor.finish, @batch_id)
        end

        def tag_tool_calls(items, batch_id)
          return items unless batch_id

          items.each do |item|
            next unless item.is_a?(ToolCall)

            vllm = (item.provider_data[:vllm] || {}).merge(tool_batch_id: batch_id)
            item.provider_data = item.provider_data.merge(vllm: vllm)
          end
        end
      end

      # An endpoint with a processor method of its own (as older OpenRouter
      # had), memoized in an ivar of its own; decode_chunk is inherited.
      class OpenRouter < OpenAi
        def self.can_contact?(provider)
          provider == "open_router"
        end

        def provider_id
          AiApiAuditLog::Provider::OpenRouter
        end

        private

        # rubocop:disable Naming/MemoizedInstanceVariableName
        def processor
          @router_processor ||= OpenAiMessageProcessor.new(partial_tool_calls: partial_tool_calls)
        end
        # rubocop:enable Naming/MemoizedInstanceVariableName
      end

      # As older Endpoints::OpenAi had it: decode_chunk_finish reads the
      # memoized ivar instead of calling `processor`.
      class OlderOpenAi < OpenAi
        private

        def decode_chunk_finish
          @processor.finish
        end
      end

      # Not an OpenAi subclass: its own processor and its own decode_chunk
      # (as older SambaNova had).
      class SambaNova < Base
        def self.can_contact?(provider)
          provider == "samba_nova"
        end

        def provider_id
          AiApiAuditLog::Provider::SambaNova
        end

        def final_log_update(log)
          log_usage(log, :prompt_tokens, :completion_tokens)
        end

        private

        def processor
          @processor ||= OpenAiMessageProcessor.new(partial_tool_calls: partial_tool_calls)
        end

        def decode_chunk(raw)
          @json_decoder ||= JsonStreamDecoder.new
          (@json_decoder << raw).flat_map { |json| Array(processor.process_streamed_message(json)) }
        end

        def decode_chunk_finish
          processor.finish
        end
      end

      # The Responses API endpoint (an OpenAI model whose URL is
      # /v1/responses): its own processor, memoized, and its own copy of the
      # stock decode methods over JsonStreamDecoder (the `event:` lines are
      # not read).
      class OpenAiResponses < Base
        class_eval(&STOCK_OPENAI_METHODS)

        def self.can_contact?(provider)
          provider == "open_ai_responses"
        end

        def final_log_update(log)
          log_usage(log, :prompt_tokens, :completion_tokens, :cache_read_tokens)
        end

        private

        def processor
          @processor ||= OpenAiResponsesMessageProcessor.new(partial_tool_calls: partial_tool_calls,
                                                             output_thinking: output_thinking)
        end
      end

      # Another provider's processor: must pass through.
      class Anthropic < Base
        def self.can_contact?(provider)
          provider == "anthropic"
        end

        def provider_id
          AiApiAuditLog::Provider::Anthropic
        end

        private

        def processor
          @processor ||= AnthropicMessageProcessor.new
        end

        def decode_chunk(raw)
          @decoder ||= JsonStreamDecoder.new
          (@decoder << raw).flat_map { |json| processor.process_message(json) }
        end
      end
    end
  end
end
