# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/discourse_stand_ins"

# The count of streams that lost or refused something, for the admin
# dashboard: by the hour, over this hour and the 23 before it, each hour
# gone a day after its last write, in a host Redis when there is one.
RSpec.describe DiscourseAiStream::Discourse::Tally do
  let(:now) { [1_000 * 3600] }
  let(:tally) { described_class.new(clock: -> { now.first }) }
  let(:mistral) { "mistral (DiscourseAi::Completions::Endpoints::Mistral)" }

  def hours(count) = now[0] += count * 3600

  it "counts streams once, and each kind under its endpoint" do
    tally.add(mistral, :dropped_call, new_stream: true)
    tally.add(mistral, :unreadable_event, new_stream: false)
    tally.add("vllm", :dropped_call, new_stream: true)
    expect(tally.counts).to eq([2, { [:dropped_call, mistral] => 1, [:unreadable_event, mistral] => 1,
                                     [:dropped_call, "vllm"] => 1 }])
  end

  it "keeps a stream for this hour and the 23 after it, and nothing older in memory" do
    tally.add(mistral, :dropped_call, new_stream: true)
    hours(23)
    tally.add(mistral, :truncated, new_stream: true)
    expect(tally.counts.first).to eq(2)
    hours(1)
    expect(tally.counts).to eq([1, { [:truncated, mistral] => 1 }])

    100.times do
      hours(1)
      tally.add(mistral, :dropped_call, new_stream: true)
    end
    expect(tally.counts.first).to eq(24)
    expect(tally.store.instance_variable_get(:@hashes).size).to be <= described_class::HOURS + 1
  end

  it "counts in the host's Redis when there is one, each hour's hash set to expire a day after its last write" do
    redis = Class.new do
      attr_reader :commands

      def initialize = @commands = []

      def hincrby(*args) = @commands << [:hincrby, *args]

      def expire(*args) = @commands << [:expire, *args]

      def hgetall(key) = key.end_with?(":1000") ? { "streams" => "3", "dropped_call\tvllm" => "3" } : {}
    end.new
    stub_const("Discourse", Module.new)
    Discourse.define_singleton_method(:redis) { redis }

    tally.add("vllm", :dropped_call, new_stream: true)
    key = "discourse_ai_stream:lost_or_refused:1000"
    expect(redis.commands).to eq([[:hincrby, key, "streams", 1], [:hincrby, key, "dropped_call\tvllm", 1],
                                  [:expire, key, 25 * 3600]])
    expect(tally.counts).to eq([3, { [:dropped_call, "vllm"] => 3 }])
  end

  it "logs a Redis that fails, and lets the stream and the dashboard go on" do
    broken = Object.new
    %i[hincrby hgetall].each do |command|
      broken.define_singleton_method(command) { |*| raise IOError, "Redis is down" }
    end
    logger = DiscourseStandIns::FakeLogger.new
    DiscourseAiStream::Discourse.logger = logger
    down = described_class.new(redis: broken)
    expect { down.add("vllm", :dropped_call, new_stream: true) }.not_to raise_error
    expect(down.counts).to eq([0, {}])
    expect(logger.warnings).to eq(["discourse_ai_stream: could not count a stream that lost or refused something: " \
                                   "IOError: Redis is down",
                                   "discourse_ai_stream: could not read the count of streams that lost or refused " \
                                   "something: IOError: Redis is down"])
  ensure
    DiscourseAiStream::Discourse.logger = nil
  end
end
