# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # The streams that lost or refused something (Health::COUNTED), per anomaly
    # kind and endpoint, for the last 24 hours: one Redis hash per hour
    # (`discourse_ai_stream:lost_or_refused:<hour>`), a field per kind and
    # endpoint plus one counting the streams, each hash expiring a day after
    # its last write. So a stream costs nothing unless it lost something,
    # then an HINCRBY per kind (and one for the stream) and an EXPIRE; a
    # count reads 24 hashes; and what is kept is bounded by hours x kinds x
    # endpoints.
    #
    # In Discourse's Redis (Discourse.redis, per site) because the streams
    # run in Sidekiq and web processes and the dashboard's check, or the
    # check task, in another: a count kept in each process would show what
    # that one process saw, usually nothing. Without one (outside
    # Discourse) nothing is counted.
    class Tally
      KEY = "discourse_ai_stream:lost_or_refused"
      HOURS = 24
      STREAMS = "streams"

      def initialize(redis: nil, clock: -> { Time.now.to_i })
        @redis = redis
        @clock = clock
      end

      # Counts a stream of the endpoint `label` under `kind`, and among the
      # streams when it is `new_stream` (its first kind counted).
      def add(label, kind, new_stream:)
        return unless (store = self.store)

        key = "#{KEY}:#{hour}"
        store.hincrby(key, STREAMS, 1) if new_stream
        store.hincrby(key, "#{kind}\t#{label}", 1)
        store.expire(key, (HOURS + 1) * 3600)
      rescue StandardError => e
        Discourse.warn_log("discourse_ai_stream: could not count a stream that lost or refused something: " \
                           "#{e.class}: #{e.message}")
      end

      # [streams, { [kind, label] => streams }] over this hour and the 23
      # before it; nothing when they cannot be read.
      def counts
        sums = Hash.new(0)
        if (store = self.store)
          (hour - HOURS + 1..hour).each do |at|
            store.hgetall("#{KEY}:#{at}").each { |field, count| sums[field] += count.to_i }
          end
        end
        # A stream is among the streams of the hour of its first kind: one
        # whose later kinds came in the next hour still counts once that
        # hour has left the window.
        streams = [sums.delete(STREAMS) || 0, sums.values.max || 0].max
        [streams, sums.transform_keys { |field| row(field) }]
      rescue StandardError => e
        Discourse.warn_log("discourse_ai_stream: could not read the count of streams that lost or refused " \
                           "something: #{e.class}: #{e.message}")
        [0, {}]
      end

      # The Redis given, else the host's, else nil.
      def store = @redis || (::Discourse.redis if defined?(::Discourse.redis))

      private

      def hour = @clock.call / 3600

      # [kind, label] of a field.
      def row(field)
        kind, label = field.split("\t", 2)
        [kind.to_sym, label]
      end
    end
  end
end
