# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/chunks"
require_relative "support/sse_fixtures"

# What the chat processor hands out for the next request of a tool loop
# (rules 77 to 79 of docs/stream-shapes.md), on the recorded streams of
# spec/fixtures/recorded, through decode_chunk and the Hash path.
RSpec.describe "the round trip of reasoning (rules 77 to 79)" do
  let(:key) { DiscourseAiStream::OpenAiMessageProcessor::PROVIDER_KEY }

  def recorded(name) = File.binread(File.join(SseFixtures::FIXTURE_DIR, "recorded", "#{name}.sse"))

  def processor(**options) = DiscourseAiStream::OpenAiMessageProcessor.new(**options)

  # Every item of the stream, by raw reads of 97 bytes and by parsed events.
  def both_paths(bytes, **options)
    raw = processor(**options)
    raw_items = [*reads_of(bytes, 97).flat_map { |read| raw.decode_chunk(read) }, *raw.finish]
    hash_items = hash_path_items(processor(**options), sse_events(bytes))
    [raw_items, hash_items]
  end

  def kinds(items)
    items.map do |item|
      case item
      when String then :text
      when DiscourseAiStream::Thinking then :thinking
      else item.partial? ? :partial : :call
      end
    end
  end

  # The reasoning text of a recording, joined from its deltas.
  def reasoning_of(bytes, field)
    sse_events(bytes).filter_map { |event| event.dig(:choices, 0, :delta, field) }.join
  end

  # The stream without the fields rules 77 to 79 read.
  def without_round_trip_fields(bytes)
    events = sse_events(bytes, symbolize_names: false).map do |event|
      event.fetch("choices", []).each do |choice|
        delta = choice["delta"] || {}
        %w[reasoning_content reasoning reasoning_details].each { |key| delta.delete(key) }
        (delta["tool_calls"] || []).each { |call| call.delete("extra_content") }
      end
      event
    end
    "#{events.map { |event| "data: #{JSON.generate(event)}\n\n" }.join}data: [DONE]\n\n".b
  end

  def calls(items) = items.reject { |item| item.is_a?(String) || item.is_a?(DiscourseAiStream::Thinking) }

  describe "DeepSeek V4's reasoning_content (a recording)" do
    let(:bytes) { recorded("deepseek_v4_reasoning_content") }

    it "gives the whole reasoning as one Thinking before the call, and the call its turn" do
      both_paths(bytes, output_thinking: true, model: "3:deepseek-v4-flash").each do |items|
        expect(kinds(items)).to eq(%i[thinking call])
        thinking, call = items
        expect(thinking.message).to eq(reasoning_of(bytes, :reasoning_content))
        expect(thinking.message).to start_with("The user asks about the weather")
        expect(thinking.partial?).to be(false)
        expect(thinking.provider_info).to eq(key => { fields: ["reasoning_content"], model: "3:deepseek-v4-flash" })
        expect(call.provider_data.keys).to eq([key])
        expect(call.provider_data[key]).to match(turn: /\Aturn_das_/, model: "3:deepseek-v4-flash")
      end
    end

    it "gives exactly the items of the stream without these fields when the round trip is off" do
      plain = both_paths(without_round_trip_fields(bytes), round_trip: false).first
      both_paths(bytes, round_trip: false).each do |items|
        expect(items).to eq(plain)
        expect(calls(items).map(&:provider_data)).to eq([{}])
      end
      # And with the round trip on, a stream without them gives the same.
      expect(both_paths(without_round_trip_fields(bytes), output_thinking: true)).to all(eq(plain))
    end

    it "gives no Thinking unless asked, and still names the call's turn" do
      both_paths(bytes).each do |items|
        expect(kinds(items)).to eq(%i[call])
        expect(items.first.provider_data[key].keys).to eq(%i[turn])
      end
    end
  end

  it "puts the reasoning between the text before it and the text after it (z.ai GLM, a recording)" do
    bytes = recorded("zai_glm_reasoning_content")
    both_paths(bytes, output_thinking: true, partial_tool_calls: true).each do |items|
      expect(kinds(items)).to eq(%i[text thinking text call])
      expect(items[1].message).to eq(reasoning_of(bytes, :reasoning_content))
      expect(items[1].provider_info[key][:fields]).to eq(["reasoning_content"])
    end
  end

  it "merges OpenRouter's reasoning_details by index and type (Gemini 3 behind OpenRouter, a recording)" do
    bytes = recorded("openrouter_gemini3_reasoning_details")
    events = sse_events(bytes)
    fragments = events.flat_map { |event| event.dig(:choices, 0, :delta, :reasoning_details) || [] }
    text = fragments.select { |f| f[:type] == "reasoning.text" }.sum("") { |f| f[:text] }
    encrypted = fragments.find { |f| f[:type] == "reasoning.encrypted" }
    both_paths(bytes, output_thinking: true).each do |items|
      expect(kinds(items)).to eq(%i[thinking call])
      info = items.first.provider_info[key]
      expect(info[:fields]).to eq(["reasoning"])
      expect(info[:reasoning_details].map { |d| d[:type] }).to eq(%w[reasoning.text reasoning.encrypted])
      expect(info[:reasoning_details].first).to include(text: text, index: 0, format: "google-gemini-v1")
      expect(info[:reasoning_details].last).to eq(encrypted)
      expect(items.first.message).to eq(reasoning_of(bytes, :reasoning))
    end
  end

  it "keeps each call's extra_content, and names both calls of the response with one turn (Gemini 3)" do
    # Constructed from Google's documented shape (spec/fixtures/README.md).
    bytes = recorded("gemini_compat_thought_signature")
    both_paths(bytes, output_thinking: true).each do |items|
      first, second = calls(items)
      expect([first.id, second.id]).to eq(%w[function-call-1 function-call-2])
      expect(first.provider_data[key][:extra_content]).to eq(
        google: { thought_signature: "CiQBjz1rXwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" }
      )
      expect(second.provider_data[key]).not_to have_key(:extra_content)
      expect(first.provider_data[key][:turn]).to eq(second.provider_data[key][:turn])
      expect(kinds(items)).to eq(%i[call call])
    end
  end

  it "gives a call shown partially the provider data that came after it was built" do
    extra = { google: { thought_signature: "late" } }
    chunks = [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"q":"x', index: 0)]),
              ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, 'y"}').merge(extra_content: extra)]),
              ChunkHelpers.finish_chunk]
    p = processor(partial_tool_calls: true)
    partial = p.process_streamed_message(chunks.first)
    expect(partial.provider_data).to eq({})
    items = [*chunks.drop(1).flat_map { |chunk| [p.process_streamed_message(chunk)].flatten.compact }, *p.finish]
    expect(items.last).to be(partial)
    expect(partial.partial?).to be(false)
    expect(partial.provider_data[key]).to include(extra_content: extra)
  end

  it "tells a new response's turn from the last one's, and reports a changed extra_content" do
    chunk = lambda do |signature|
      ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", "{}").merge(extra_content: { google: { s: signature } })],
                              finish: "tool_calls")
    end
    p = processor
    first = [p.process_streamed_message(chunk.call("1")), *p.finish].compact.first
    second = [p.process_streamed_message(chunk.call("1")), *p.finish].compact.first
    expect(first.provider_data[key][:turn]).not_to eq(second.provider_data[key][:turn])
    p = processor
    p.process_streamed_message(ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"q":', index: 0)
      .merge(extra_content: { google: { s: "1" } })]))
    call = p.process_streamed_message(ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, "1}")
      .merge(extra_content: { google: { s: "2" } })], finish: "tool_calls"))
    expect(call.provider_data[key][:extra_content]).to eq(google: { s: "1" })
    expect(anomaly_kinds(p)).to eq([:conflicting_value])
  end

  it "answers output_thinking? and round_trip?" do
    expect([processor.output_thinking?, processor.round_trip?]).to eq([false, true])
    expect(processor(output_thinking: 1, round_trip: nil).then { [_1.output_thinking?, _1.round_trip?] })
      .to eq([true, false])
  end
end
