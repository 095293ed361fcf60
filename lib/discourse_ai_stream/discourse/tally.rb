# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # The streams that lost or refused something (Health::KINDS), per anomaly
    # kind and endpoint, for the last 24 hours: one Redis hash per hour
    # (`discourse_ai_stream:lost_or_refused:<hour>`), a field per kind and
    # endpoint plus one counting the streams, each hash expiring a day after
    # its last write. So a stream costs nothing unless it lost something,
    # then an HINCRBY and an EXPIRE per kind (and an HINCRBY for the stream); a
    # count reads 24 hashes; and what is kept is bounded by hours x kinds x
    # endpoints.
    #
    # In Discourse's Redis (Discourse.redis, per site) because the streams
    # run in Sidekiq and web processes and the dashboard's check, or the
    # check task, in another: a count kept in each process would show what
    # that one process saw, usually nothing. Without a host Redis (outside
    # Discourse), in this process, with the same three commands.
    class Tally
      KEY = "discourse_ai_stream:lost_or_refused"
      HOURS = 24
      STREAMS = "streams"

      def initialize(redis: nil, clock: -> { Time.now.to_i })
        @redis = redis
        @clock = clock
        @memory = Memory.new(clock)
      end

      # Counts a stream of the endpoint `label` under `kind`, and among the
      # streams when it is `new_stream` (its first kind counted).
      def add(label, kind, new_stream:)
        key = "#{KEY}:#{hour}"
        store = self.store
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
        store = self.store
        sums = Hash.new(0)
        (hour - HOURS + 1..hour).each do |at|
          store.hgetall("#{KEY}:#{at}").each { |field, count| sums[field] += count.to_i }
        end
        [sums.delete(STREAMS) || 0, sums.transform_keys { |field| row(field) }]
      rescue StandardError => e
        Discourse.warn_log("discourse_ai_stream: could not read the count of streams that lost or refused " \
                           "something: #{e.class}: #{e.message}")
        [0, {}]
      end

      # The host's Redis when there is one, else this process's.
      def store
        @redis || (::Discourse.redis if defined?(::Discourse.redis)) || @memory
      end

      private

      def hour = @clock.call / 3600

      # [kind, label] of a field.
      def row(field)
        kind, label = field.split("\t", 2)
        [kind.to_sym, label]
      end

      # HINCRBY, EXPIRE and HGETALL on Hashes of this process.
      class Memory
        def initialize(clock)
          @clock = clock
          @hashes = {}
          @expiry = {}
          @lock = Mutex.new
        end

        def hincrby(key, field, increment)
          @lock.synchronize do
            prune
            hash = (@hashes[key] ||= Hash.new(0))
            hash[field] += increment
          end
        end

        def expire(key, seconds)
          @lock.synchronize { @expiry[key] = @clock.call + seconds if @hashes.key?(key) }
        end

        def hgetall(key)
          @lock.synchronize do
            prune
            @hashes.fetch(key, {}).transform_values(&:to_s)
          end
        end

        private

        def prune
          now = @clock.call
          @expiry.select { |_, at| at <= now }.each_key do |key|
            @expiry.delete(key)
            @hashes.delete(key)
          end
        end
      end
    end
  end
end
