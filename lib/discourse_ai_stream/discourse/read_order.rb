# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # A host's decode_chunk (Discourse's own, vLLM's) calls the processor
    # once per event and hands each call out once per read, where it first
    # came. With partial tool calls a call comes out as a partial update,
    # then whole with its reasoning in front of it: a read holding both gave
    # the call before its reasoning, and the AI bot, which takes the
    # reasoning that came before a call, sent the call back without it.
    # This keeps what the processor returns per event of a read, and puts
    # each reasoning item back in front of the call it led to. (The fast
    # path never calls process_streamed_message, and decodes a read whole.)
    class ReadOrder
      def initialize(processor)
        log = @log = []
        processor.define_singleton_method(:process_streamed_message) do |json|
          super(json).tap { |result| result.is_a?(Array) ? log.concat(result) : (log << result unless result.nil?) }
        end
      end

      # A read begins.
      def start = @log.clear

      # The read's `items` with each reasoning item in front of the call it
      # led to, where the call came first.
      def apply(items)
        led = @log.each_cons(2).select { |thinking, call| thinking?(thinking) && call.respond_to?(:parameters) }
        @log.clear
        led.reduce(items) do |list, (thinking, call)|
          at = list.index { |item| item.equal?(thinking) }
          to = list.index { |item| item.equal?(call) }
          next list unless at && to && to < at

          list.dup.tap { |moved| moved.insert(to, moved.delete_at(at)) }
        end
      end

      private

      def thinking?(item) = item.respond_to?(:provider_info) && !item.respond_to?(:parameters)
    end
  end
end
