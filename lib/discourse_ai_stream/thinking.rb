# frozen_string_literal: true

module DiscourseAiStream
  # Reasoning text, shaped like the newest DiscourseAi::Completions::Thinking,
  # for use outside Discourse. Inside Discourse the Responses processor builds
  # Discourse's own class instead.
  class Thinking
    attr_accessor :message, :partial, :provider_info

    def initialize(message:, partial: false, provider_info: {})
      @message = message
      @partial = partial
      @provider_info = provider_info || {}
    end

    def partial? = !!@partial

    def ==(other)
      other.respond_to?(:provider_info) && message == other.message && partial == other.partial &&
        provider_info == other.provider_info
    end

    def dup
      self.class.new(message: message.dup, partial: partial, provider_info: Marshal.load(Marshal.dump(provider_info)))
    end

    def to_s = "#{message} - #{partial}"
  end
end
