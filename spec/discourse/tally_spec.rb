# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/discourse_stand_ins"

# The count of streams that lost or refused something, for the admin
# dashboard: in Redis, by the hour, over this hour and the 23 before it,
# each hour's hash set to expire a day after its last write.
RSpec.describe DiscourseAiStream::Discourse::Tally do
  let(:now) { [1_000 * 3600] }
  let(:redis) { DiscourseStandIns::FakeRedis.new }
  let(:tally) { described_class.new(redis: redis, clock: -> { now.first }) }
  let(:mistral) { "mistral (DiscourseAi::Completions::Endpoints::Mistral)" }

  def hours(count) = now[0] += count * 3600

  it "counts streams once, and each kind under its endpoint" do
    tally.add(mistral, :dropped_call, new_stream: true)
    tally.add(mistral, :unreadable_event, new_stream: false)
    tally.add("vllm", :dropped_call, new_stream: true)
    expect(tally.counts).to eq([2, { [:dropped_call, mistral] => 1, [:unreadable_event, mistral] => 1,
                                     [:dropped_call, "vllm"] => 1 }])
    key = "discourse_ai_stream:lost_or_refused:1000"
    expect(redis.hashes).to eq(key => { "streams" => 2, "dropped_call\t#{mistral}" => 1,
                                        "unreadable_event\t#{mistral}" => 1, "dropped_call\tvllm" => 1 })
    expect(redis.expiries).to eq(key => 25 * 3600)
  end

  it "still counts a stream whose first hour left the window while a later kind of it stays" do
    tally.add(mistral, :dropped_call, new_stream: true)
    hours(1)
    tally.add(mistral, :truncated, new_stream: false)
    expect(tally.counts).to eq([1, { [:dropped_call, mistral] => 1, [:truncated, mistral] => 1 }])
    hours(23)
    expect(tally.counts).to eq([1, { [:truncated, mistral] => 1 }])
  end

  it "counts a stream for this hour and the 23 after it" do
    tally.add(mistral, :dropped_call, new_stream: true)
    hours(23)
    tally.add(mistral, :truncated, new_stream: true)
    expect(tally.counts.first).to eq(2)
    hours(1)
    expect(tally.counts).to eq([1, { [:truncated, mistral] => 1 }])
    expect(redis.expiries.keys).to eq(%w[1000 1023].map { |hour| "discourse_ai_stream:lost_or_refused:#{hour}" })
  end

  it "counts in the host's Redis when given none, and nothing without one" do
    expect(described_class.new.store).to be_nil
    described_class.new.add("vllm", :dropped_call, new_stream: true)
    expect(described_class.new.counts).to eq([0, {}])

    stub_const("Discourse", Module.new)
    Discourse.define_singleton_method(:redis) { @redis ||= DiscourseStandIns::FakeRedis.new }
    described_class.new.add("vllm", :dropped_call, new_stream: true)
    expect(described_class.new.counts).to eq([1, { [:dropped_call, "vllm"] => 1 }])
    expect(Discourse.redis.hashes.size).to eq(1)
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
