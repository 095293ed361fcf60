# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # Discourse lets an error out of decode_chunk fail the request, so the
    # items one of the gem's errors carries (what the read produced besides
    # the error) would never reach the caller. Here decode_chunk returns
    # those items and the session keeps the error; the next decode_chunk or
    # decode_chunk_finish raises it before doing anything else. The request
    # still fails, after the caller saw everything the stream produced. An
    # error without items, or while uninstalled, is raised at once.
    module ErrorDelivery
      module_function

      # Around decode_chunk.
      def decoding(endpoint, &)
        raise_pending(endpoint)
        delivering(endpoint) { Session.reporting(endpoint, &) }
      end

      # Around decode_chunk_finish: a kept error is raised instead of finishing.
      def finishing(endpoint, &)
        raise_pending(endpoint)
        Session.reporting(endpoint, &)
      end

      def raise_pending(endpoint)
        session = Session.of(endpoint)
        error = session&.pending_error
        return unless error

        session.pending_error = nil
        raise error
      end

      def delivering(endpoint)
        yield
      rescue DiscourseAiStream::Error => e
        session = Session.of(endpoint)
        raise unless session && Discourse.installed? && !e.items.empty?

        session.pending_error = e
        session.reporter.deferred(e)
        Discourse.distinct_calls(e.items)
      end
      private_class_method :raise_pending, :delivering
    end
  end
end
