# frozen_string_literal: true

# The newest generation's tool loop, as docs/discourse-contract.md describes
# it ("The tool loop"): the Prompt, a request over HTTP
# (Endpoints::Base#perform_completion!), Llm#generate, and the AI bot's loop
# (Agents::Bot#reply). Loaded after newest.rb and dialects.rb.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

require "net/http"
require "uri"

module DiscourseAi
  module Completions
    # The messages of a conversation, checked as they are pushed.
    class Prompt
      INVALID_TURN = Class.new(StandardError)
      TYPES = %i[system user model tool tool_call].freeze
      KEYS = %i[type content id name thinking thinking_provider_info thinking_signature redacted_thinking_signature
                provider_data].freeze

      attr_reader :messages, :tools
      attr_accessor :skip_trim, :tool_choice

      def initialize(system_text = nil, messages: [], tools: [])
        @messages = system_text ? [{ type: :system, content: system_text }] : []
        @messages.concat(messages)
        @messages.each { |message| validate(message) }
        @messages.each_cons(2) { |before, after| validate_turn(before, after) }
        @tools = tools
      end

      # Adds one message: name and id as Strings, provider_data with Symbol
      # keys all the way down, thinking_provider_info normalized as
      # Thinking's. A :system message is not pushed.
      def push(type:, content:, id: nil, name: nil, thinking: nil, thinking_provider_info: nil, provider_data: nil)
        return if type == :system

        message = { type: type, content: content }
        message[:name] = name.to_s if name
        message[:id] = id.to_s if id
        message[:thinking] = thinking if thinking
        unless provider_data.nil?
          raise ArgumentError, "provider_data must be a hash" unless provider_data.is_a?(Hash)

          message[:provider_data] = JSON.parse(JSON.generate(provider_data), symbolize_names: true)
        end
        message[:thinking_provider_info] = Thinking.normalize_provider_info(thinking_provider_info) if
          thinking_provider_info
        validate(message)
        validate_turn(messages.last, message)
        messages << message
      end

      # The items of a response, in order. Whole Thinking items wait (merged:
      # texts joined by a blank line, provider_info deep-merged) for the
      # next message pushed, a call (:tool_call, with its provider_data) or
      # text (:model; text right after a :model message is appended to it
      # and takes no thinking). Thinking still waiting at the end goes onto
      # the last message of this response. Partial items are skipped.
      def push_model_response(response)
        @pending = nil
        last = nil
        Array(response).each do |item|
          last = push_item(item) || last unless item.respond_to?(:partial?) && item.partial?
        end
        attach(last, @pending) if @pending && last
      ensure
        @pending = nil
      end

      private

      # The message an item of a response went into, or nil (Thinking waits).
      def push_item(item)
        case item
        when Thinking then @pending = merged(@pending, item)
        when ToolCall
          push(type: :tool_call, content: { arguments: item.parameters }.to_json, id: item.id, name: item.name,
               provider_data: item.provider_data, **taken)
        when String
          if messages.last&.dig(:type) == :model
            messages.last[:content] += item
          else
            push(type: :model, content: item, **taken)
          end
        else raise ArgumentError, "unexpected message type: #{item.class}"
        end
        messages.last unless item.is_a?(Thinking)
      end

      # The waiting Thinking as a message's keys, taken.
      def taken
        return {} unless @pending

        info = @pending.provider_info
        attrs = { thinking: @pending.message, thinking_provider_info: info.empty? ? nil : info }
        @pending = nil
        attrs
      end

      def merged(existing, incoming)
        return incoming unless existing

        copy = existing.dup
        copy.message = joined(copy.message, incoming.message)
        copy.merge_provider_info!(incoming.provider_info)
        copy
      end

      def joined(text, more)
        return text if Dialects::BLANK.call(more)
        return more if Dialects::BLANK.call(text)

        "#{text}\n\n#{more}"
      end

      def attach(message, thinking)
        message[:thinking] = joined(message[:thinking], thinking.message) unless Dialects::BLANK.call(thinking.message)
        return if thinking.provider_info.empty?

        message[:thinking_provider_info] = Thinking.merge_provider_info(message[:thinking_provider_info],
                                                                        thinking.provider_info)
      end

      def validate(message)
        raise ArgumentError, "message type must be one of #{TYPES}" unless TYPES.include?(message[:type])

        invalid = message.keys - KEYS
        raise ArgumentError, "message contains invalid keys: #{invalid}" unless invalid.empty?

        content = message[:content]
        return if content.is_a?(String) || (content.is_a?(Array) && content.all?(String))

        raise ArgumentError, "Message content must be a string or an array"
      end

      # A result follows its call; no two :model messages in a row; nothing
      # but users after the system message. Calls may follow calls.
      def validate_turn(before, after)
        raise INVALID_TURN if after[:type] == :system
        raise INVALID_TURN if before[:type] == :system && %i[tool tool_call model].include?(after[:type])
        raise INVALID_TURN if after[:type] == :tool && before[:type] != :tool_call
        raise INVALID_TURN if after[:type] == :model && before[:type] == :model
      end
    end

    # One generation: the dialect and the endpoint of the model's provider.
    class Llm
      attr_reader :llm_model

      def initialize(llm_model)
        @llm_model = llm_model
      end

      def generate(prompt, output_thinking: false, partial_tool_calls: false, &blk)
        dialect = Dialects::Dialect.dialect_for(llm_model).new(prompt, llm_model)
        endpoint = Endpoints::Base.endpoint_for(llm_model.provider).new(llm_model)
        endpoint.perform_completion!(dialect, nil, output_thinking: output_thinking,
                                                   partial_tool_calls: partial_tool_calls, &blk)
      end
    end

    module Endpoints
      # The request itself: the dialect's translation POSTed as JSON to the
      # model's URL; a status other than 200 raises CompletionFailed with
      # the body; each read of a 200 body goes to decode_chunk as it arrives,
      # then decode_chunk_finish (perform_stream), every item to the block.
      # Returns the text of the response only, as the host's streaming mode
      # does.
      class Base
        CompletionFailed = Class.new(StandardError)

        def perform_completion!(dialect, _user, _model_params = {}, partial_tool_calls: false, output_thinking: false,
                                &blk)
          uri = URI(llm_model.url)
          request = Net::HTTP::Post.new(uri, "Content-Type" => "application/json")
          request.body = JSON.generate(payload(dialect))
          text = +""
          Net::HTTP.start(uri.host, uri.port) do |http|
            http.request(request) do |response|
              raise CompletionFailed, response.body unless response.code == "200"

              reads = Enumerator.new { |body| response.read_body { |read| body << read } }
              perform_stream(reads, partial_tool_calls: partial_tool_calls, output_thinking: output_thinking) do |item|
                text << item if item.is_a?(String)
                blk&.call(item)
              end
            end
          end
          text
        end

        private

        def payload(dialect)
          body = { model: llm_model.name, messages: dialect.translate, stream: true,
                   stream_options: { include_usage: true } }
          body[:tools] = dialect.tools unless dialect.tools.empty?
          body
        end
      end
    end
  end

  module Agents
    # The AI bot's tool loop: each completion asks for thinking; whole
    # Thinking items are collected as they stream; each whole ToolCall of a
    # known tool is run at once, inside the stream: its :tool_call message
    # is pushed (with the call's provider_data, and, for the first call
    # after thinking arrived, that thinking: texts joined by a blank line,
    # provider_info merged), then its :tool result. Text is never pushed
    # into the prompt here. The loop ends after a completion without a call
    # and returns that completion's text.
    class Bot
      MAX_COMPLETIONS = 6

      # tools: { "name" => callable(parameters) -> a result to send as JSON }.
      def initialize(llm_model, tools:)
        @llm = Completions::Llm.new(llm_model)
        @tools = tools
      end

      def reply(prompt)
        prompt.skip_trim = true
        MAX_COMPLETIONS.times do
          thinking = []
          called = false
          text = @llm.generate(prompt, output_thinking: true) do |partial|
            case partial
            when Completions::Thinking then thinking << partial unless partial.partial?
            when Completions::ToolCall
              next if partial.partial? || !@tools.key?(partial.name)

              called = true
              run(prompt, partial, thinking)
            end
          end
          return text unless called
        end
        raise "no answer after #{MAX_COMPLETIONS} completions"
      end

      private

      def run(prompt, call, thinking)
        output = JSON.generate(@tools[call.name].call(call.parameters))
        message = { type: :tool_call, id: call.id, name: call.name, content: { arguments: call.parameters }.to_json }
        result = { type: :tool, id: call.id, name: call.name, content: output }
        unless call.provider_data.empty?
          message[:provider_data] = call.provider_data
          result[:provider_data] = call.provider_data
        end
        prompt.push(**message, **collected(thinking))
        prompt.push(**result)
      end

      # The thinking collected so far as a message's keys, then none.
      def collected(thinking)
        text = thinking.map(&:message).reject { |part| Completions::Dialects::BLANK.call(part) }.join("\n\n")
        info = thinking.reduce({}) { |all, item| Completions::Thinking.merge_provider_info(all, item.provider_info) }
        thinking.clear
        { thinking: (text unless text.empty?), thinking_provider_info: (info unless info.empty?) }.compact
      end
    end
  end
end
