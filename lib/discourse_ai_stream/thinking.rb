# frozen_string_literal: true

module DiscourseAiStream
  # Reasoning text, shaped like DiscourseAi::Completions::Thinking, for use
  # outside Discourse. Inside Discourse the Responses processor builds
  # Discourse's own class instead.
  class Thinking
    attr_accessor :message, :signature, :redacted, :partial, :provider_info

    def initialize(message:, signature: nil, redacted: false, partial: false, provider_info: nil)
      @message = message
      @signature = signature
      @redacted = redacted
      @partial = partial
      @provider_info = provider_info || {}
    end

    def partial? = !!@partial

    def ==(other)
      other.respond_to?(:provider_info) && message == other.message && signature == other.signature &&
        redacted == other.redacted && partial == other.partial && provider_info == other.provider_info
    end

    def dup
      self.class.new(message: message.dup, signature: signature.dup, redacted: redacted, partial: partial,
                     provider_info: Marshal.load(Marshal.dump(provider_info)))
    end

    def to_s = "#{message} - #{signature} - #{redacted} - #{partial}"
  end
end
