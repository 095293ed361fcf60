# frozen_string_literal: true

# Loaded by DiscourseStandIns#load_discourse_stand_ins into freshly stubbed
# DiscourseAi / AiApiAuditLog constants; not required anywhere else.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

require "json"
require "set"

class AiApiAuditLog
  # Discourse's names.
  # rubocop:disable Naming/ConstantName
  module Provider
    OpenAI = 1
    Anthropic = 2
    Vllm = 5
    SambaNova = 8
    Mistral = 9
    OpenRouter = 10
  end
  # rubocop:enable Naming/ConstantName
end

module DiscourseAi
  module Completions
    # Shaped as the contract describes DiscourseAi::Completions::ToolCall.
    class ToolCall
      attr_reader :id, :name, :parameters, :provider_data
      attr_accessor :partial

      def initialize(id:, name:, parameters: nil, provider_data: nil)
        @id = id
        @name = name
        @partial = false
        self.parameters = parameters || {}
        self.provider_data = provider_data || {}
      end

      def partial?
        @partial ? true : false
      end

      def parameters=(value)
        raise ArgumentError, "parameters must be a Hash" unless value.is_a?(Hash)

        @parameters = value.transform_keys(&:to_sym)
      end

      def provider_data=(value)
        raise ArgumentError, "provider_data must be a Hash" unless value.is_a?(Hash)

        @provider_data = JSON.parse(JSON.generate(value), symbolize_names: true)
      end

      def ==(other)
        other.is_a?(ToolCall) &&
          [id, name, parameters, provider_data] == [other.id, other.name, other.parameters, other.provider_data]
      end

      def to_s
        "#{name} - #{id} #{parameters}"
      end

      def dup
        copy = ToolCall.new(id: id, name: name, parameters: Marshal.load(Marshal.dump(parameters)),
                            provider_data: Marshal.load(Marshal.dump(provider_data)))
        copy.partial = partial
        copy
      end
    end

    # Buffers raw reads and yields the JSON objects of complete `data:` lines.
    class JsonStreamDecoder
      def initialize(line_regex: /\Adata: ?(\{.*\})\z/)
        @line_regex = line_regex
        @buffer = String.new(encoding: Encoding::BINARY)
      end

      def <<(raw)
        @buffer << raw.b
        lines = @buffer.split("\n", -1)
        @buffer = lines.pop || String.new(encoding: Encoding::BINARY)
        lines.filter_map { |line| parse(line.chomp("\r")) }
      end

      private

      def parse(line)
        match = @line_regex.match(line)
        match && JSON.parse(match[1].dup.force_encoding(Encoding::UTF_8), symbolize_names: true)
      rescue JSON::ParserError
        nil
      end
    end

    # The chat processor: both generations read a whole response alike and
    # parse arguments alike; the generation files add the streamed half, the
    # usage and the state, where they differ.
    class OpenAiMessageProcessor
      def process_message(json)
        message = json.dig(:choices, 0, :message) || {}
        items = []
        items << message[:content] if text?(message[:content])
        Array(message[:tool_calls]).each do |call|
          items << ToolCall.new(id: call[:id], name: call.dig(:function, :name),
                                parameters: parse(call.dig(:function, :arguments).to_s))
        end
        record_usage(json[:usage])
        items
      end

      private

      def parse(arguments)
        arguments.empty? ? {} : JSON.parse(arguments, symbolize_names: true)
      end

      def text?(value)
        value.is_a?(String) && !value.empty?
      end
    end

    # Shaped as the contract describes DiscourseAi::Completions::Thinking:
    # provider_info is normalized on the way in (blank is {}, keys Symbols
    # down through Hashes, also Hashes inside Arrays), and merged as
    # ActiveSupport's deep_merge does: nested Hashes merge, anything else
    # from the incoming side (an Array too) replaces what was there.
    class Thinking
      attr_accessor :message, :partial
      attr_reader :provider_info

      def self.normalize_provider_info(info)
        return {} if info.nil? || info.empty?

        info.to_h { |key, value| [key.to_sym, normalize_value(value)] }
      end

      def self.normalize_value(value)
        case value
        when Hash then normalize_provider_info(value)
        when Array then value.map { |item| item.is_a?(Hash) ? normalize_provider_info(item) : item }
        else value
        end
      end

      def self.merge_provider_info(existing, incoming)
        deep_merge(normalize_provider_info(existing), normalize_provider_info(incoming))
      end

      def self.deep_merge(base, other)
        base.merge(other) { |_, old, new| old.is_a?(Hash) && new.is_a?(Hash) ? deep_merge(old, new) : new }
      end

      def initialize(message:, partial: false, provider_info: {})
        @message = message
        @partial = partial
        self.provider_info = provider_info
      end

      def provider_info=(info)
        @provider_info = self.class.normalize_provider_info(info)
      end

      def provider_info_for(key) = provider_info[key.to_sym]

      def merge_provider_info!(info)
        @provider_info = self.class.merge_provider_info(provider_info, info)
      end

      def partial?
        @partial ? true : false
      end

      def ==(other)
        other.is_a?(Thinking) &&
          [message, partial, provider_info] == [other.message, other.partial, other.provider_info]
      end

      def dup
        Thinking.new(message: message&.dup, partial: partial, provider_info: Marshal.load(Marshal.dump(provider_info)))
      end
    end

    # The Responses API processor as docs/discourse-contract.md describes
    # it, defects included: one open call at a time (a second
    # output_item.added replaces the first; the first's done then appends to
    # arguments already consumed: NoMethodError), arguments that do not
    # parse leave the parameters {}, a usage without input_tokens raises
    # NoMethodError, and the first usage wins.
    class OpenAiResponsesMessageProcessor
      attr_reader :prompt_tokens, :completion_tokens, :cache_read_tokens
      # Read by the legacy endpoint's final_log_update (never set here).
      attr_reader :cached_tokens

      def initialize(partial_tool_calls: false, output_thinking: false)
        @partial_tool_calls = partial_tool_calls
        @output_thinking = output_thinking
        @tool = nil
        @arguments = +""
      end

      def process_message(json)
        items = Array(json[:output]).filter_map do |item|
          case item[:type]
          when "function_call" then build(item, parameters: parse(item[:arguments].to_s, strict: true))
          when "message" then texts(item)
          end
        end
        record_usage(json)
        items
      end

      def process_streamed_message(json)
        result = nil
        case json[:type]
        when "response.output_text.delta"
          result = json[:delta] unless json[:delta].to_s.empty?
        when "response.output_item.added"
          if json.dig(:item, :type) == "function_call"
            @tool = build(json[:item])
            @arguments = +""
          end
        when "response.output_item.done"
          result = complete(json[:item]) if json.dig(:item, :type) == "function_call"
        end
        record_usage(json)
        result
      end

      def finish
        return [] unless @tool

        tool = @tool
        @tool = nil
        tool.parameters = parse(@arguments.to_s) unless @arguments.to_s.empty?
        [tool]
      end

      private

      def build(item, parameters: nil)
        ToolCall.new(id: item[:call_id], name: item[:name], parameters: parameters,
                     provider_data: { open_ai_responses: { id: item[:id], call_id: item[:call_id] }.compact })
      end

      def complete(item)
        @arguments << item[:arguments].to_s
        @tool.parameters = parse(@arguments) unless @arguments.empty?
        @arguments = nil
        tool = @tool
        @tool = nil
        tool
      end

      def parse(text, strict: false)
        return {} if text.empty?

        JSON.parse(text, symbolize_names: true)
      rescue JSON::ParserError
        raise if strict

        {}
      end

      def texts(item)
        Array(item[:content]).select { |part| part[:type] == "output_text" }.map { |part| part[:text] }.join
      end

      def record_usage(json)
        usage = json.dig(:response, :usage) || json[:usage]
        return unless usage

        cached = usage.dig(:input_tokens_details, :cached_tokens).to_i
        @cache_read_tokens ||= cached
        @completion_tokens ||= usage[:output_tokens]
        @prompt_tokens ||= usage[:input_tokens] - cached
        nil
      end
    end

    # Another provider's processor, to check that it passes through too.
    class AnthropicMessageProcessor
      def initialize(streaming_mode: true)
        @streaming_mode = streaming_mode
      end

      def process_message(json)
        Array(json.dig(:delta, :text))
      end

      def finish
        []
      end
    end

    module Endpoints
      # The request loop of Endpoints::Base, reduced to what touches the
      # processor: every read of the body goes to decode_chunk, then
      # decode_chunk_finish, then final_log_update writes the audit log.
      class Base
        attr_reader :partial_tool_calls, :output_thinking, :llm_model

        def initialize(llm_model)
          @llm_model = llm_model
        end

        # reads: the Strings read from the HTTP body. Returns every item in
        # order, and hands each to the block as soon as it is decoded (as
        # Discourse hands partials to the caller's block).
        def perform_stream(reads, log: AiApiAuditLog.new, partial_tool_calls: false, output_thinking: false, &blk)
          @partial_tool_calls = partial_tool_calls
          @output_thinking = output_thinking
          raw = String.new(encoding: Encoding::BINARY)
          items = []
          deliver = ->(decoded) { decoded.each { |item| items << item.tap { blk&.call(item) } } }
          reads.each do |read|
            raw << read.b
            deliver.call(decode_chunk(read.b))
          end
          deliver.call(decode_chunk_finish)
          items
        ensure
          log.raw_response_payload = raw
          final_log_update(log)
        end

        # The non-streaming path: the whole body at once.
        def perform_request(body, log: AiApiAuditLog.new)
          decode(body)
        ensure
          final_log_update(log)
        end

        def final_log_update(log)
          # overridden by the endpoints that know their usage
        end

        protected

        def decode(_raw)
          raise NotImplementedError
        end

        def decode_chunk(_raw)
          raise NotImplementedError
        end

        def decode_chunk_finish
          []
        end

        # The audit-log column of each usage reader named otherwise.
        LOG_COLUMNS = { prompt_tokens: :request_tokens, completion_tokens: :response_tokens }.freeze

        private

        # What final_log_update does: each named usage reader of the processor
        # that has a value is written to its audit-log column.
        def log_usage(log, *readers)
          readers.each do |reader|
            value = processor.public_send(reader)
            log.public_send(:"#{LOG_COLUMNS.fetch(reader, reader)}=", value) if value
          end
        end

        # The items without nils, each ToolCall object once (a partial call
        # comes back with every delta).
        def each_tool_call_once(items)
          seen = Set.new.compare_by_identity
          items.compact.select { |item| !item.is_a?(ToolCall) || seen.add?(item) }
        end
      end

      # The stock OpenAI endpoint methods, the same in both generations but
      # kept in different places: in Endpoints::OpenAi itself (legacy), in
      # the OpenAiShared module (current). Each generation evaluates them
      # where it keeps them, so they are that place's own methods: the patch
      # knows the stock decode_chunk by its owner.
      STOCK_OPENAI_METHODS = proc do
        def provider_id
          AiApiAuditLog::Provider::OpenAI
        end

        private

        def decode(raw)
          processor.process_message(JSON.parse(raw, symbolize_names: true))
        end

        def decode_chunk(raw)
          @decoder ||= JsonStreamDecoder.new
          each_tool_call_once((@decoder << raw).flat_map { |json| Array(processor.process_streamed_message(json)) })
        end

        def decode_chunk_finish
          processor.finish
        end
      end
    end
  end
end
