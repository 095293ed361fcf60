# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/chunks"
require_relative "support/sse_fixtures"

# The Hash path's one reader (ext/discourse_ai_stream/src/hash_reader.rs):
# a parsed chunk or event, written back as JSON text of what the core reads
# of it, which the core reads as the raw path reads a line. A chunk that is
# nothing but a text delta is read without being written, and its content
# String is returned itself.
RSpec.describe "Hash path: the one reader" do
  include ChunkHelpers
  include SseFixtures

  def outcome(processor, events)
    items = begin
      summarize(hash_path_items(processor, events))
    rescue DiscourseAiStream::Error => e
      e.class
    end
    [items, processor.anomalies.map { |a| a.except(:id) }, usage_of(processor)]
  end

  def chat(**options) = DiscourseAiStream::OpenAiMessageProcessor.new(**options)

  it "reads every fixture's events with Symbol keys and with String keys alike, as the raw path reads them" do
    fixture_names.each do |name|
      bytes = fixture_bytes(name)
      symbols = outcome(chat, sse_events(bytes))
      expect(outcome(chat, sse_events(bytes, symbolize_names: false))).to eq(symbols), name
      raw_items = begin
        summarize(decoded_items(chat, [bytes]))
      rescue DiscourseAiStream::Error => e
        e.class
      end
      expect(symbols.first).to eq(raw_items), name
    end
  end

  it "reads the shapes of every event, odd ones included, as the raw path reads their JSON" do
    envelope = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m",
                 system_fingerprint: "fp", service_tier: "default" }
    shapes = [
      text_chunk("hi"), text_chunk("", finish: "stop"), finish_chunk, envelope.merge(text_chunk("x")),
      tool_chunk([call("c1", "f", "", index: 0)]), tool_chunk([fragment(0, '{"a":')]),
      tool_chunk([fragment(0, "1}")], finish: "tool_calls"), tool_chunk([]),
      { choices: [{ index: 0, delta: { role: "assistant", content: nil, refusal: nil }, logprobs: nil,
                    finish_reason: nil }] },
      { choices: [], usage: nil, x_groq: nil, error: nil, object: nil, message: nil },
      { choices: nil }, { choices: [nil, { delta: nil, message: nil, error: nil }] }, {},
      message([call("c1", "f", '{"a":1}')], content: "text"),
      { choices: "x" }, { choices: [1] }, { choices: [{ delta: "d" }] }, { choices: [{ delta: { content: 5 } }] },
      { choices: [{ finish_reason: 1 }] }, { choices: [{ delta: { content: [{ type: "text", text: "a" }] } }] },
      tool_chunk([{ index: "1", id: 42, function: { name: ["x"], arguments: 5 } }]),
      tool_chunk([{ index: 1.0 }]), tool_chunk([{ index: 2**70 }]), tool_chunk([{ id: 7 }]),
      tool_chunk([{ index: 0, id: "c", function: { name: "f", arguments: { q: "x", n: [1, 2.5, nil] } } }]),
      { choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } }, { x_groq: { usage: nil } },
      { choices: [{ error: { message: "no" } }] }, { object: 5, choices: [] },
      { choices: [{ delta: {}, finish_reason: "error", native_finish_reason: "MALFORMED_FUNCTION_CALL" }] },
      parsed(envelope.merge(text_chunk("caf\u00e9 \u{1F389} \"quoted\" \\ \n\t\u0001"))),
      # Beside a text delta, what a bare one may not hold.
      text_chunk("x").merge(object: "error"), text_chunk("x").merge(object: :error), text_chunk("x").merge(object: 5),
      { choices: [{ delta: { content: "x" }, "finish_reason" => "stop" }] },
      { choices: [{ delta: { content: "x", "tool_calls" => [call("c1", "f", "{}", index: 0)] } }] },
      { choices: [{ delta: { content: "x" }, native_finish_reason: "STOP" }] },
      Hash.new { |hash, key| hash[key] = [] }.update(text_chunk("x"))
    ]
    shapes.each do |shape|
      hash = chat
      from_hash = outcome(hash, [shape])
      raw = chat
      from_raw = begin
        summarize(decoded_items(raw, [sse([shape], done: false)]))
      rescue DiscourseAiStream::Error => e
        e.class
      end
      expect(from_hash.first).to eq(from_raw), shape.inspect
      expect(from_hash[1].map { |a| a[:kind] }).to eq(anomaly_kinds(raw)), shape.inspect
    end
  end

  it "does not look at values under keys a chat chunk's rules do not read, whatever its keys; reads events whole" do
    # As the stock processor skips them. A Responses event is read whole, as
    # the raw path parses a whole line: there what has no JSON meaning is
    # an anomaly, what is not text an error.
    nothing = "a value of class %s has no JSON meaning; read as nil"
    key = Object.new
    odd = {
      Object.new => [format(nothing, "Object")], 2**80 => [], "\xFF".b => "invalid UTF-8 in a String at byte 0",
      "caf\u00e9".encode("UTF-16LE") => [], 200.times.reduce([]) { |inner, _| [inner] } => "nested deeper than 128",
      [Object.new] => [format(nothing, "Object")], 1r => [format(nothing, "Rational")],
      Time.at(0) => [format(nothing, "Time")], Float::NAN => ["a Float NaN has no JSON meaning; read as nil"],
      { key => 1 } => ["a Hash key of class Object is neither a String nor a Symbol; read as #{key.to_s.inspect}"],
      { 1.5 => 2 } => ["a Hash key of class Float is neither a String nor a Symbol; read as \"1.5\""]
    }
    odd.each do |value, found|
      [text_chunk("x").merge(extra: value), JSON.parse(JSON.generate(text_chunk("x"))).merge("extra" => value),
       tool_chunk([call("c1", "f", "{}", index: 0)], created: value)].each do |chunk|
        processor = chat
        expect { processor.process_streamed_message(chunk) }.not_to raise_error, chunk.inspect
        expect(processor.anomalies).to be_empty, chunk.inspect
      end
      event = { type: "response.created", extra: value }
      responses = DiscourseAiStream::OpenAiResponsesMessageProcessor.new
      if found.is_a?(String)
        expect { responses.process_streamed_message(event) }
          .to raise_error(DiscourseAiStream::StreamError, /\Aextra.*#{Regexp.escape(found)}/), event.inspect
      else
        responses.process_streamed_message(event)
        expect(responses.anomalies.map { |a| a[:message] }).to eq(found), event.inspect
      end
    end
  end

  it "reads a Hash wider than the pairs it keeps on the stack, Strings of other classes and binary UTF-8" do
    subclass = Class.new(String)
    wide = (1..20).to_h { |i| [:"extra_#{i}", i] }.merge(text_chunk(subclass.new("sub")))
    wide_args = (1..20).to_h { |i| [:"k#{i}", i] }
    expect(chat.process_streamed_message(wide)).to eq("sub")
    expect(chat.process_streamed_message(text_chunk("ok".b))).to eq("ok")
    expect(chat.process_streamed_message(text_chunk("caf\u00e9".b))).to eq("caf\u00e9")
    processor = chat
    call = { index: 0, id: "c", function: { name: "f", arguments: wide_args } }
    processor.process_streamed_message(tool_chunk([call]))
    expect(processor.finish.first.parameters).to eq(wide_args)
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
      expect([chat.process_streamed_message(shape), chat.process_streamed_message(shape.merge(x_groq: nil))])
        .to eq([shape.dig(:choices, 0, :delta, :content)] * 2), shape.inspect
    end
  end

  it "reads a key as a field's when it is the field's Symbol or its text, in any encoding" do
    # A Symbol is unique per name: one in UTF-16 is another Symbol, which no
    # rule reads. A String key in UTF-16 is read as its text.
    utf16 = "choices".encode("UTF-16LE")
    expect(chat.process_streamed_message({ utf16.to_sym => text_chunk("x")[:choices] })).to be_nil
    expect(chat.process_streamed_message({ utf16 => text_chunk("x")[:choices] })).to eq("x")
  end

  it "returns the content String itself for a chunk that is nothing but a text delta, and for nothing else" do
    envelope = { id: "c1", object: "chat.completion.chunk", created: 1, model: "m", system_fingerprint: "fp",
                 service_tier: "default", obfuscation: "Zk9", usage: nil }
    first = { choices: [{ index: 0, delta: { role: "assistant", content: +"first", refusal: nil }, logprobs: nil,
                          finish_reason: nil }] }
    # OpenRouter's and Azure's text deltas, as they send them.
    openrouter = { id: "gen-1", provider: "Anthropic", model: "m", object: "chat.completion.chunk", created: 1,
                   choices: [{ index: 0, delta: { role: "assistant", content: +"or" }, finish_reason: nil,
                               native_finish_reason: nil, logprobs: nil }] }
    azure = { choices: [{ index: 0, logprobs: nil, delta: { content: +"az" }, finish_reason: nil,
                          content_filter_results: { hate: { filtered: false } } }],
              created: 1, id: "c", model: "m", object: "chat.completion.chunk", system_fingerprint: "fp" }
    [text_chunk(+"hi"), envelope.merge(text_chunk(+"caf\u00e9")), envelope.merge(first), openrouter, azure,
     text_chunk(+"x").merge(object: nil), text_chunk(+"x").merge(usage: nil)].each do |chunk|
      expect(chat.process_streamed_message(chunk)).to equal(chunk.dig(:choices, 0, :delta, :content)), chunk.inspect
    end
    # Each of these needs more than the content: the chunk is read whole.
    others = [
      text_chunk(+"x").merge(usage: {}), text_chunk(+"x").merge(error: nil), text_chunk(+"x").merge(x_groq: nil),
      text_chunk(+"x").merge(extra: 1), text_chunk(+"x").merge("id" => "c1"),
      text_chunk(+"x").merge(message: "m"), text_chunk(+"x", finish: "stop"), text_chunk(+"x", finish: ""),
      { choices: [{ delta: { content: +"x", tool_calls: nil } }] },
      { choices: [{ delta: { content: +"x" }, error: nil }] },
      { choices: [{ delta: { content: +"x" }, native_finish_reason: "STOP" }] },
      { "choices" => [{ "delta" => { "content" => +"x" } }] }
    ]
    others.each do |chunk|
      content = chunk.dig(:choices, 0, :delta, :content) || chunk.dig("choices", 0, "delta", "content")
      result = chat.process_streamed_message(chunk)
      expect(result).to eq("x"), chunk.inspect
      expect(result).not_to equal(content), chunk.inspect
    end
  end

  it "reads a field under a String key beside a text delta's Symbol keys" do
    processor = chat
    chunk = text_chunk(+"x").merge(usage: nil, "usage" => { prompt_tokens: 3, completion_tokens: 4 })
    expect(processor.process_streamed_message(chunk)).to eq("x")
    expected = chat.tap { |c| c.process_streamed_message(usage_chunk(prompt: 3, completion: 4)) }
    expect(usage_of(processor)).to eq(usage_of(expected))
  end

  it "gives the processor the same results on bare text deltas as on the whole chunk" do
    # `x_groq: nil` changes nothing for the processor but makes every event
    # one to read whole.
    mixed = [text_chunk("a"), tool_chunk([call("c1", "f", '{"q":', index: 0)]), text_chunk("between"),
             tool_chunk([fragment(0, '"x"}')]), text_chunk(""), finish_chunk, text_chunk("after"),
             usage_chunk(prompt: 3, completion: 4), text_chunk("late")]
    streams = fixture_names.to_h { |name| [name, sse_events(fixture_bytes(name))] }.merge("mixed" => mixed)
    streams.each do |name, events|
      whole = events.map { |event| event.merge(x_groq: event.fetch(:x_groq, nil)) }
      expect(outcome(chat(partial_tool_calls: true), events))
        .to eq(outcome(chat(partial_tool_calls: true), whole)), name
    end
  end

  it "reads a text delta beside a reasoning field whole, beside a null one bare, the same either way" do
    recorded = Dir[File.join(SseFixtures::FIXTURE_DIR, "recorded", "*.sse")]
    expect(recorded).not_to be_empty
    recorded.each do |path|
      events = sse_events(File.binread(path))
      whole = events.map { |event| event.merge(x_groq: event.fetch(:x_groq, nil)) }
      expect(outcome(chat(output_thinking: true), events)).to eq(outcome(chat(output_thinking: true), whole)), path
    end
    reasoning = ->(value) { { choices: [{ delta: { content: "a", reasoning_content: value } }] } }
    ended = tool_chunk([call("c", "f", "{}")], finish: "tool_calls")
    items = summarize(hash_path_items(chat(output_thinking: true), [reasoning.call(""), ended]))
    thinking = { thinking: "", provider_info: { chat_completions: { fields: ["reasoning_content"] } } }
    expect(items.take(2)).to eq([thinking, "a"])
    expect(summarize(hash_path_items(chat(output_thinking: true), [reasoning.call(nil), ended])).first).to eq("a")
  end

  it "returns Mistral's thinking parts as a Thinking with output_thinking, and skips them without" do
    parts = lambda do |thinking, text|
      { choices: [{ delta: { content: [{ type: "thinking", thinking: [{ type: "text", text: thinking }] },
                                       { type: "text", text: text }] } }] }
    end
    events = [parts.call("Add ", ""), parts.call("them.", "3"), finish_chunk]
    items = summarize(hash_path_items(chat(output_thinking: true), events))
    expect(items).to eq([{ thinking: "Add them.", provider_info: { chat_completions: { fields: [] } } }, "3"])
    expect(summarize(hash_path_items(chat, events))).to eq(["3"])
  end

  it "gives the processor the same items either way" do
    processor = chat
    expect(processor.process_streamed_message(text_chunk("a"))).to eq("a")
    expect(processor.process_streamed_message({ extra: 2**80 }.merge(text_chunk("b")))).to eq("b")
    # Keys the processor does not read are not looked at, as in the stock
    # processor: a binary model name is not an invalid chunk.
    odd = { model: "\xFF".b, created: Time.at(0), extra: 200.times.reduce([]) { |inner, _| [inner] } }
    expect(processor.process_streamed_message(odd.merge(text_chunk("c")))).to eq("c")
    expect(processor.process_streamed_message(odd.merge(tool_chunk([call("c1", "f", '{"a":1}', index: 0)])))).to be_nil
    expect(processor.anomalies).to be_empty
    done = processor.process_streamed_message(finish_chunk)
    expect(done.parameters).to eq(a: 1)
  end
end
