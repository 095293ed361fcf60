# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/chunks"
require_relative "support/sse_fixtures"

# The Hash path reads a chunk with a fast walker (hash_walk.rs) and leaves
# every shape it does not know to the other reader: the Hash converted to a
# JSON value (ruby_json.rs), read by the core's chunk reader. Whenever the
# walker reads a Hash, it must build exactly the chunk the other reader
# builds, and the conversion must have found nothing to report in what the
# chunk reads; so conversions, anomalies and errors stay the other reader's.
# `hash_readers_for_tests` returns both chunks as debug text (the walker's
# is nil when it declined) and the messages of the conversion's anomalies.
RSpec.describe "Hash path: the fast chunk walker" do
  include ChunkHelpers
  include SseFixtures

  def readers(value)
    DiscourseAiStream::Native.hash_readers_for_tests(value)
  end

  # The walker's chunk, after checking it against the other reader's; nil
  # when the walker left the value to it.
  def checked(value)
    fast, other, unsupported = readers(value)
    unless fast.nil?
      expect(fast).to eq(other), "the walker and the other reader differ on #{value.inspect}"
      expect(unsupported).to be_empty
    end
    fast
  end

  def fixture_events
    fixture_names.flat_map do |name|
      sse_data_payloads(fixture_bytes(name)).filter_map do |payload|
        JSON.parse(payload, symbolize_names: true)
      rescue JSON::ParserError
        nil
      end
    end
  end

  it "builds the other reader's chunk for every event of every fixture, and reads most of them itself" do
    events = fixture_events
    fast = events.count { |event| checked(event) }
    expect(events.size).to be > 100
    expect(fast).to be > events.size * 3 / 4
  end

  it "declines the fixtures' events parsed with String keys, which the other reader reads" do
    declined = 0
    fixture_names.each do |name|
      sse_data_payloads(fixture_bytes(name)).each do |payload|
        event = JSON.parse(payload)
        next unless event.is_a?(Hash) && !event.empty?

        expect(checked(event)).to be_nil
        declined += 1
      rescue JSON::ParserError
        nil
      end
    end
    expect(declined).to be > 100
  end

  it "reads the shapes of every event itself" do
    envelope = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m",
                 system_fingerprint: "fp", service_tier: "default" }
    shapes = [
      text_chunk("hi"), text_chunk("", finish: "stop"), finish_chunk, envelope.merge(text_chunk("x")),
      tool_chunk([call("c1", "f", "", index: 0)]), tool_chunk([fragment(0, '{"a":')]),
      tool_chunk([fragment(0, "1}")], finish: "tool_calls"), tool_chunk([]),
      { choices: [{ index: 0, delta: { role: "assistant", content: nil, refusal: nil }, logprobs: nil,
                    finish_reason: nil }] },
      { choices: [{ delta: { tool_calls: [{ index: nil, id: nil, function: { name: nil, arguments: nil,
                                                                             id: "x" } }] } }] },
      { choices: [], usage: nil, x_groq: nil, error: nil, object: nil, message: nil },
      { choices: nil }, { choices: [nil, { delta: nil, message: nil, error: nil }] }, {},
      message([call("c1", "f", '{"a":1}')], content: "text"),
      { extra: { nested: [1, 2.5, true, false, nil, "s", :sym, { deeper: [] }] }, choices: [] },
      { café: 1, choices: [] }, parsed(envelope.merge(text_chunk("caf\u00e9 \u{1F389}"))),
      { choices: [{ delta: {}, finish_reason: "error", native_finish_reason: "MALFORMED_FUNCTION_CALL" }] },
      { choices: [{ delta: { content: "x" }, usage: nil, native_finish_reason: nil }] }
    ]
    shapes.each { |shape| expect(checked(shape)).not_to be_nil, "declined #{shape.inspect}" }
  end

  it "leaves wrong types, conversions and content parts to the other reader" do
    shapes = [
      { choices: "x" }, { choices: [1] }, { choices: [{ delta: "d" }] }, { choices: [{ delta: { content: 5 } }] },
      { choices: [{ delta: { content: :sym } }] }, { choices: [{ finish_reason: :stop }] },
      { choices: [{ finish_reason: 1 }] }, { choices: [{ delta: { content: [{ type: "text", text: "a" }] } }] },
      tool_chunk([{ index: "1", id: 42, function: { name: ["x"], arguments: 5 } }]),
      tool_chunk([{ index: 1.0 }]), tool_chunk([{ index: 2**70 }]), tool_chunk([{ id: 7 }]),
      tool_chunk([{ function: { arguments: { q: "x" } } }]), tool_chunk([{ function: "f" }]), tool_chunk(["c"]),
      { choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } }, { x_groq: { usage: nil } },
      { error: { message: "no" } }, { choices: [{ error: { message: "no" } }] }, { object: 5 }, { message: [] },
      { choices: [{ delta: { tool_calls: {} } }] }, { choices: [{ delta: {}, usage: { prompt_tokens: 1 } }] },
      { choices: [{ finish_reason: "error", native_finish_reason: 5 }] }, { choices: [{ native_finish_reason: :STOP }] }
    ]
    shapes.each { |shape| expect(checked(shape)).to be_nil, "read #{shape.inspect}" }
  end

  it "leaves keys that are not Symbols, and values with no plain JSON reading in a field it reads, to the other one" do
    utf16 = "caf\u00e9".encode("UTF-16LE") # not UTF-8 as it is: the conversion transcodes it
    shapes = [
      { "choices" => [] }, { choices: [], "choices" => [] }, { 1 => 2, choices: [] }, { nil => 1 },
      { 1.5 => 1 }, { [1] => 1 }, { choices: [{ "delta" => {} }] }, { object: Object.new },
      { object: "\xFF".b }, { object: utf16 }, { choices: [{ delta: { content: utf16 } }] },
      { choices: [{ finish_reason: Time.at(0) }] }, { choices: [{ delta: { content: "\xFF".b } }] },
      tool_chunk([{ index: 1r }]), tool_chunk([{ id: 2**80 }])
    ]
    shapes.each { |shape| expect(checked(shape)).to be_nil, "read #{shape.inspect}" }
  end

  it "reads values under keys no struct reads without looking at them, where the conversion looks at them" do
    # The walker skips them unseen, as the stock processor does. The
    # conversion (for shapes the walker declines, String keys above all)
    # converts the whole Hash, as the raw path parses the whole line: what
    # has no JSON meaning there is an anomaly, what is not JSON an error.
    deep = 200.times.reduce([]) { |inner, _| [inner] }
    nothing = "a value of class %s has no JSON meaning; read as nil"
    key = Object.new
    odd = {
      Object.new => [format(nothing, "Object")] * 2, 2**80 => [], "\xFF".b => "invalid UTF-8 in a String at byte 0",
      "caf\u00e9".encode("UTF-16LE") => [], deep => "the chunk is nested deeper than 128 levels",
      [Object.new] => [format(nothing, "Object")] * 2, 1r => [format(nothing, "Rational")] * 2,
      Time.at(0) => [format(nothing, "Time")] * 2,
      { key => 1 } => ["a Hash key of class Object is neither a String nor a Symbol; read as #{key.to_s.inspect}"] * 2,
      { 1.5 => 2 } => ["a Hash key of class Float is neither a String nor a Symbol; read as \"1.5\""] * 2
    }
    odd.each do |value, found|
      shape = { extra: value, created: value }.merge(text_chunk("x"))
      fast, other, anomalies = readers(shape)
      expect(fast).to eq(readers(text_chunk("x"))[0]), "walker on #{shape.inspect}"
      if found.is_a?(String)
        expect(other).to start_with("error: #{found}"), shape.inspect
      else
        expect([other, anomalies]).to eq([fast, found]), shape.inspect
      end
    end
  end

  it "reads a Hash of more than 16 keys, Strings of other classes and binary Strings of UTF-8 text" do
    subclass = Class.new(String)
    wide = (1..20).to_h { |i| [:"extra_#{i}", i] }.merge(text_chunk(subclass.new("sub")))
    shapes = [wide, text_chunk("ok".b), text_chunk("caf\u00e9".b)]
    shapes.each { |shape| expect(checked(shape)).not_to be_nil, "declined #{shape.inspect}" }
  end

  it "reads Hashes with deleted pairs, re-added keys and Ruby's larger table as Ruby iterates them" do
    # Deleting a pair leaves a hole in a small Hash's table; one that grew
    # past 8 pairs keeps Ruby's other table when it shrinks again.
    holes = text_chunk("kept").merge(id: "c1", model: "m", created: 1)
    holes.delete(:model)
    holes[:choices][0].delete(:index)
    holes[:choices][0][:delta] = { role: "assistant", content: "gone" }
    holes[:choices][0][:delta].delete(:role)
    holes[:choices][0][:delta][:content] = "kept"
    readded = text_chunk("again")
    readded[:choices] = readded.delete(:choices)
    shrunk = (1..9).to_h { |i| [:"extra_#{i}", i] }.merge(text_chunk("st"))
    (1..9).each { |i| shrunk.delete(:"extra_#{i}") }
    gone = text_chunk("x")
    gone[:choices][0][:delta].delete(:content)
    identity = text_chunk("same").compare_by_identity
    [holes, readded, shrunk, gone, identity].each do |shape|
      expect(checked(shape)).not_to be_nil, "declined #{shape.inspect}"
    end
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    items = [holes, readded, shrunk, gone].map { |c| processor.process_streamed_message(c) }
    expect(items).to eq(["kept", "again", "st", nil])
  end

  it "leaves a Symbol that has a field's name but is not its key to the other reader" do
    # The bytes of "choices" in UTF-16BE: another Symbol than :choices, whose
    # name the conversion reads as the text "choices", so it must not be skipped.
    other = (+"choices").force_encoding(Encoding::UTF_16BE).to_sym
    expect(other).not_to equal(:choices)
    expect(checked({ other => [] })).to be_nil
    expect(readers({ other => [] })[1]).to eq(readers({ choices: [] })[1])
  end

  it "marks the chunks it reads that own no memory, so they are forgotten instead of dropped" do
    two_calls = tool_chunk([call("c1", "f", "{}", index: 0), call("c2", "g", "{}", index: 1)])
    { text_chunk("hi") => true, tool_chunk([fragment(0, '{"a":')]) => true, { choices: [] } => true,
      { choices: [text_chunk("a")[:choices][0], text_chunk("b")[:choices][0]] } => false,
      two_calls => false, { "choices" => [] } => false }.each do |chunk, borrowed_only|
      expect(readers(chunk)[3]).to be(borrowed_only), chunk.inspect
    end
  end

  it "reads bare text deltas without building a chunk, and nothing else" do
    envelope = { id: "c1", object: "chat.completion.chunk", created: 1, model: "m", system_fingerprint: "fp" }
    first = { choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: nil, finish_reason: nil }] }
    native = { choices: [{ delta: { content: "n" }, native_finish_reason: "STOP" }] }
    { text_chunk("hi") => "hi", envelope.merge(text_chunk("caf\u00e9")) => "caf\u00e9", envelope.merge(first) => "",
      text_chunk("x").merge(object: nil) => "x", native => "n" }.each do |chunk, text|
      expect(readers(chunk)[4]).to eq(text), chunk.inspect
    end
    # Each of these needs more than the content: the whole chunk is read.
    others = [
      text_chunk("x").merge(usage: nil), text_chunk("x").merge(error: nil), text_chunk("x").merge(x_groq: nil),
      text_chunk("x").merge(message: "m"), text_chunk("x").merge(object: "error"), text_chunk("x").merge(object: 5),
      text_chunk("x", finish: "stop"), text_chunk("x", finish: ""),
      { choices: [text_chunk("a")[:choices][0], text_chunk("b")[:choices][0]] }, { choices: [] }, { choices: [nil] },
      { choices: [{ delta: { content: "x", tool_calls: nil } }] }, { choices: [{ delta: { content: nil } }] },
      { choices: [{ delta: { content: [{ type: "text", text: "x" }] } }] }, { choices: [{ delta: {} }] },
      { choices: [{ delta: { content: "x" }, error: nil }] }, { choices: [{ message: { content: "x" } }] },
      { choices: [{ delta: { content: "\xFF".b } }] }, { "choices" => [{ delta: { content: "x" } }] },
      text_chunk("x").merge(object: "\xFF".b), { choices: [{ delta: { content: "x" }, usage: nil }] }
    ]
    others.each { |chunk| expect(readers(chunk)[4]).to be_nil, chunk.inspect }
  end

  it "gives the processor the same results on bare text deltas as on the whole chunk" do
    # `usage: nil` changes nothing for the processor but makes the text
    # reader stand aside, so `whole` reads every event as a chunk.
    mixed = [text_chunk("a"), tool_chunk([call("c1", "f", '{"q":', index: 0)]), text_chunk("between"),
             tool_chunk([fragment(0, '"x"}')]), text_chunk(""), finish_chunk, text_chunk("after"),
             usage_chunk(prompt: 3, completion: 4), text_chunk("late")]
    streams = fixture_names.to_h { |name| [name, sse_events(fixture_bytes(name))] }.merge("mixed" => mixed)
    streams.each do |name, events|
      fast = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true)
      whole = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true)
      results = [fast, whole].map do |processor|
        stream = processor.equal?(fast) ? events : events.map { |event| event.merge(usage: event.fetch(:usage, nil)) }
        items = begin
          summarize(hash_path_items(processor, stream))
        rescue DiscourseAiStream::Error => e
          e.class
        end
        [items, processor.anomalies, usage_of(processor)]
      end
      expect(results[0]).to eq(results[1]), name
    end
    texts = streams.values.flatten.count { |event| readers(event)[4] }
    expect(texts).to be >= 15
  end

  it "gives the processor the same items either way" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    expect(processor.process_streamed_message(text_chunk("a"))).to eq("a")
    expect(processor.process_streamed_message({ extra: 2**80 }.merge(text_chunk("b")))).to eq("b")
    # Keys the processor does not read are not looked at, as in the stock
    # processor: a binary model name is not an invalid chunk.
    odd = { model: "\xFF".b, created: Time.at(0), extra: 200.times.reduce([]) { |inner, _| [inner] } }
    expect(processor.process_streamed_message(odd.merge(text_chunk("c")))).to eq("c")
    expect(processor.anomalies).to be_empty
    expect(processor.process_streamed_message(parsed(tool_chunk([call("c1", "f", '{"a":1}', index: 0)])))).to be_nil
    done = processor.process_streamed_message(finish_chunk)
    expect(done.parameters).to eq(a: 1)
  end
end
