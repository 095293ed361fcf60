# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # Logs what one response's processor reports, at warn level. Some servers
    # repeat an anomaly on every delta (Poolside's integer ids, for one), so
    # only the first anomaly of each kind in a response gets a line; at the
    # end of the response one more line counts the ones left out. Argument
    # excerpts are not logged: they may hold user data. A kind that means
    # something was lost or refused (Health::COUNTED) is counted once per
    # response, for the admin dashboard (Tally).
    class Reporter
      # interruptions: the :interrupted anomalies the hook was given.
      attr_reader :label, :interruptions

      def initialize(label)
        @label = label
        @logged = Set.new
        @unlogged = Hash.new(0)
        @errors = Set.new.compare_by_identity
        @counted = Set.new
        @interruptions = 0
      end

      # The processor's on_anomaly hook. Then hands the anomaly on to the
      # process-wide DiscourseAiStream.on_anomaly, which an instance hook
      # would otherwise shadow; the processor warns when that raises.
      def anomaly(anomaly)
        kind = anomaly[:kind]
        # An interrupted read's items came out of this read: nothing lost.
        kind == :interrupted ? @interruptions += 1 : count(kind)
        if @logged.add?(kind)
          Discourse.warn_log("discourse_ai_stream: #{label}: #{kind}: #{anomaly[:message]}#{call_of(anomaly)}")
        else
          @unlogged[kind] += 1
        end
        DiscourseAiStream.on_anomaly&.call(anomaly)
      end

      # An error of the gem's that fails the request, counted under `kind`
      # (Session::FAILED) and logged, once per error object, however many
      # wrappers it passes through.
      def failed(error, kind)
        return unless @errors.add?(error)

        count(kind)
        why = " (#{error.kind})" if error.respond_to?(:kind) && error.kind
        what = kind == :provider_error ? "provider error in the stream" : "the request failed: #{error.class}#{why}"
        Discourse.warn_log("discourse_ai_stream: #{label}: #{what}: #{error.message}")
      end

      # An error whose items are delivered before it is raised; `host`: in
      # an event of a read the endpoint's own decode_chunk makes.
      def deferred(error, host: false)
        what = if host
                 "in an event of a read made by the endpoint's own decode_chunk: delivering the read's items first"
               else
                 "in a read that also produced #{error.items.size} item(s): delivering them first"
               end
        Discourse.warn_log("discourse_ai_stream: #{label}: #{error.class.name} #{what}, raising on the next read: " \
                           "#{error.message}")
      end

      # Counts this response under `kind` once, when the kind means that
      # something was lost or refused.
      def count(kind)
        return unless Health::COUNTED.key?(kind) && !@counted.include?(kind)

        Discourse.tally.add(label, kind, new_stream: @counted.empty?)
        @counted << kind
      end

      def flush
        return if @unlogged.empty?

        counts = @unlogged.map { |kind, count| "#{kind} x#{count}" }.join(", ")
        Discourse.warn_log("discourse_ai_stream: #{label}: more anomalies in this response, not logged: #{counts}")
        @unlogged.clear
      end

      private

      def call_of(anomaly)
        details = { tool: anomaly[:name], id: anomaly[:id], index: anomaly[:index] }.compact
        return "" if details.empty?

        " (#{details.map { |key, value| "#{key} #{value}" }.join(", ")})"
      end
    end
  end
end
