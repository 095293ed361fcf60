# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # What a host's decode_chunk (Discourse's own, vLLM's) gets from the
    # processor, which it calls once per event of a read. (The fast path
    # never calls process_streamed_message: it decodes a read whole.)
    #
    # An error of the gem's out of one event would end the host's read, and
    # the items of the read's earlier events, held by the host, would go with
    # it; the stock processor, which drops errors sent in the stream, hands
    # them out. So the first such error of a read is kept here and the
    # event's items returned; the read goes on, and the session raises the
    # error on the next read or at finish, as on the fast path.
    #
    # With partial tool calls, the host hands each call out once per read,
    # where it first came: a call's partial update before its reasoning put
    # the call in front of it, and the AI bot, which takes the reasoning that
    # came before a call, sent the call back without it. So the items of
    # each event are logged, and each reasoning item goes back in front of
    # the first of the calls that came after it (`order`).
    class HostRead
      def initialize(processor, order:)
        read = self
        @log = order ? [] : nil
        processor.define_singleton_method(:process_streamed_message) do |json|
          read.keep(super(json))
        rescue DiscourseAiStream::Error => e
          raise if e.is_a?(DiscourseAiStream::ConcurrencyError)

          read.failed(e)
        end
      end

      # A read begins.
      def start
        @log&.clear
        @error = nil
      end

      # The result of one event, logged when the read is ordered.
      def keep(result)
        if @log
          result.is_a?(Array) ? @log.concat(result) : (@log << result unless result.nil?)
        end
        result
      end

      # An event's error: the first of the read is kept; the items the
      # event produced are its result.
      def failed(error)
        @error ||= error
        items = error.items.compact
        keep(items.size > 1 ? items : items.first)
      end

      # The error the read kept, once.
      def take_error = @error.tap { @error = nil }

      # The read's `items` with each reasoning item in front of the first of
      # the calls that came after it, where one of them came first.
      def order(items)
        return items unless @log && items.is_a?(Array)

        led = @log.slice_before { |item| thinking?(item) }.select { |group| thinking?(group.first) }
        @log.clear
        led.reduce(items) { |list, (thinking, *after)| moved(list, thinking, after) }
      end

      private

      # `list` with `thinking` in front of the first of the calls `after`
      # it, when one of them comes first.
      def moved(list, thinking, after)
        at = position(list, thinking)
        to = after.filter_map { |item| position(list, item) if item.respond_to?(:parameters) }.min
        return list unless at && to && to < at

        list.dup.tap { |moved| moved.insert(to, moved.delete_at(at)) }
      end

      def position(list, object) = list.index { |item| item.equal?(object) }

      def thinking?(item) = item.respond_to?(:provider_info) && !item.respond_to?(:parameters)
    end
  end
end
