# frozen_string_literal: true

module DiscourseAiStream
  # A tool call, shaped like DiscourseAi::Completions::ToolCall, for use
  # outside Discourse (no ActiveSupport needed). Inside Discourse the
  # processor builds Discourse's own class instead.
  class ToolCall
    attr_reader :id, :name, :parameters, :provider_data

    def initialize(id:, name:, parameters: nil, provider_data: nil)
      @id = id
      @name = name
      self.parameters = parameters || {}
      self.provider_data = provider_data || {}
      @partial = false
    end

    attr_accessor :partial

    def partial? = !!@partial

    def parameters=(parameters)
      raise ArgumentError, "parameters must be a hash" unless parameters.is_a?(Hash)

      @parameters = parameters.transform_keys { |k| k.respond_to?(:to_sym) ? k.to_sym : k }
    end

    def provider_data=(data)
      raise ArgumentError, "provider_data must be a hash" unless data.is_a?(Hash)

      @provider_data = DiscourseAiStream::ToolCall.deep_symbolize(data)
    end

    def ==(other)
      other.respond_to?(:parameters) && id == other.id && name == other.name &&
        parameters == other.parameters && provider_data == other.provider_data
    end

    def to_s = "#{name} - #{id} (\n#{parameters.map(&:to_s).join("\n")}\n)"

    def dup
      copy = self.class.new(id: id, name: name, **Marshal.load(Marshal.dump({ parameters:, provider_data: })))
      copy.partial = partial
      copy
    end

    def self.deep_symbolize(value)
      case value
      when Hash then value.to_h { |k, v| [k.respond_to?(:to_sym) ? k.to_sym : k, deep_symbolize(v)] }
      when Array then value.map { |v| deep_symbolize(v) }
      else value
      end
    end
  end
end
