# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/stressed_processor"

# The Hash path's reader (ext/discourse_ai_stream/src/hash_reader.rs) on
# Hashes that make it run Ruby code while it reads (Strings it has Ruby
# transcode, keys that are neither Strings nor Symbols), and on Strings in
# every encoding.
RSpec.describe "Hash path: the reader" do
  include ChunkHelpers

  # A String the reader has Ruby transcode, which compacts the heap when it
  # does: every object that can move moves, so one the reader holds where
  # the GC cannot see it is left stale at once.
  def compacting_utf16(text = "caf\u00e9")
    text = text.encode("UTF-16LE")
    def text.encode(...)
      GC.verify_compaction_references(toward: :empty)
      super
    end
    text
  end

  # A Hash of 20 pairs past one whose value makes Ruby code run while the
  # others (more than the reader keeps on the stack) wait to be read.
  def wide(first)
    hash = { first: first }
    20.times { |i| hash[:"extra_#{i}"] = [+"v#{i}", { n: i }] }
    hash
  end

  def wide_read(hash)
    hash.transform_values { |v| v.is_a?(String) ? v.encode("UTF-8") : v }
  end

  it "keeps the pairs of a wide Hash where the GC sees them while Ruby code runs" do
    processor = StressedProcessor.new(DiscourseAiStream::OpenAiMessageProcessor.new)
    responses = StressedProcessor.new(DiscourseAiStream::OpenAiResponsesMessageProcessor.new)
    3.times do |round|
      chunk = { object: compacting_utf16("chat.completion.chunk") }.merge(text_chunk(+"hello #{round}"))
      expect(processor.process_streamed_message(chunk)).to eq("hello #{round}")
      arguments = wide(compacting_utf16)
      header = tool_chunk([{ index: 0, id: "c#{round}", function: { name: "f", arguments: arguments } }])
      expect(processor.process_streamed_message(header)).to be_nil
      expect(processor.process_streamed_message(finish_chunk).parameters).to eq(wide_read(arguments))
      responses.process_streamed_message({ type: "response.created", response: wide(compacting_utf16) })
    end
    expect(responses.anomalies).to be_empty
  end

  it "reads object arguments with keys that are neither Strings nor Symbols, with an anomaly per key" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    arguments = { 1 => "a", nil => 2, 1.5 => [3], true => { 4 => 5 }, q: "x", "s" => 6 }
    header = tool_chunk([{ index: 0, id: "c1", function: { name: "f", arguments: arguments } }])
    expect(processor.process_streamed_message(header)).to be_nil
    done = processor.process_streamed_message(finish_chunk)
    # What JSON.generate writes for these keys, parsed back with Symbols.
    expect(done.parameters).to eq(JSON.parse(JSON.generate(arguments), symbolize_names: true))
    converted = processor.anomalies.select { |a| a[:kind] == :converted_field }
    expect(converted.map { |a| a[:message] }).to eq(
      ["a Hash key of class Integer is neither a String nor a Symbol; read as \"1\"",
       "a Hash key of class NilClass is neither a String nor a Symbol; read as \"\"",
       "a Hash key of class Float is neither a String nor a Symbol; read as \"1.5\"",
       "a Hash key of class TrueClass is neither a String nor a Symbol; read as \"true\"",
       "a Hash key of class Integer is neither a String nor a Symbol; read as \"4\""]
    )
  end

  it "reads such keys in a wide Hash, with collections at every key's to_s" do
    processor = StressedProcessor.new(DiscourseAiStream::OpenAiMessageProcessor.new)
    arguments = (1..18).to_h { |i| [i, [+"v#{i}"]] }
    header = tool_chunk([{ index: 0, id: "c1", function: { name: "f", arguments: arguments } }])
    expect(processor.process_streamed_message(header.merge(object: compacting_utf16("x")))).to be_nil
    done = processor.process_streamed_message(finish_chunk)
    expect(done.parameters).to eq((1..18).to_h { |i| [:"#{i}", ["v#{i}"]] })
  end

  it "raises StreamError, as before, when a key's to_s raises" do
    key = Object.new
    def key.to_s = raise(ArgumentError, "no text")
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    header = tool_chunk([{ index: 0, id: "c1", function: { name: "f", arguments: { key => 1 } } }])
    expect { processor.process_streamed_message(header) }.to raise_error(DiscourseAiStream::StreamError, /no text/)
  end

  describe "Strings in any encoding" do
    # UTF-8, US-ASCII and binary Strings are read as their bytes; any other
    # encoding is transcoded, not read as bytes (UTF-16 "Hello" is valid
    # UTF-8 with NULs in it).
    encodings = %w[UTF-16LE UTF-16BE UTF-32LE ISO-8859-1 Windows-1252 Shift_JIS]
    text_of = ->(encoding) { encoding == "Shift_JIS" ? "\u65e5\u672c" : "caf\u00e9" }

    encodings.each do |encoding|
      it "reads #{encoding} content, tool names, ids, arguments and Responses deltas as their text" do
        text = text_of.call(encoding)
        enc = ->(s) { s.encode(encoding) }
        processor = DiscourseAiStream::OpenAiMessageProcessor.new
        expect(processor.process_streamed_message(text_chunk(enc.call(text)))).to eq(text)
        expect(processor.process_streamed_message(text_chunk(enc.call("Hello")))).to eq("Hello")
        calls = [{ index: 0, id: enc.call("id_#{text}"),
                   function: { name: enc.call("f_#{text}"), arguments: enc.call(%({"q":"#{text}"})) } }]
        processor.process_streamed_message(tool_chunk(calls))
        done = processor.process_streamed_message(finish_chunk)
        expect([done.id, done.name, done.parameters]).to eq(["id_#{text}", "f_#{text}", { q: text }])
        responses = DiscourseAiStream::OpenAiResponsesMessageProcessor.new
        delta = { type: enc.call("response.output_text.delta"), delta: enc.call(text) }
        expect(responses.process_streamed_message(delta)).to eq(text)
        expect(processor.anomalies + responses.anomalies).to be_empty
      end
    end

    it "refuses a String that does not convert, or binary bytes that are not UTF-8, naming the field" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect { processor.process_streamed_message(text_chunk((+"\xFF\xFE").force_encoding("Shift_JIS"))) }
        .to raise_error(DiscourseAiStream::StreamError,
                        /\Achoices\[0\]\.delta\.content: a Shift_JIS String that does not convert to UTF-8/)
      calls = [{ index: 0, id: "c", function: { name: "\xFF".b, arguments: "{}" } }]
      name_error = /\Achoices\[0\]\.delta\.tool_calls\[0\]\.function\.name: invalid UTF-8/
      expect { processor.process_streamed_message(tool_chunk(calls)) }
        .to raise_error(DiscourseAiStream::StreamError, name_error) { |e| expect(e.kind).to eq(:invalid_chunk) }
      expect(processor.process_streamed_message(text_chunk("after"))).to eq("after")
      # A String subclass whose encode gives back what is still not UTF-8.
      stubborn = Class.new(String) { define_method(:encode) { |*| self } }
      expect { processor.process_streamed_message(text_chunk(stubborn.new("x".encode("UTF-16LE")))) }
        .to raise_error(DiscourseAiStream::StreamError,
                        /\Achoices\[0\]\.delta\.content: String#encode\("UTF-8"\) returned a UTF-16LE String\z/)
    end

    it "lets an exception that is not the conversion failing (an Interrupt, a shutdown) reach the caller as it is" do
      interrupt = Interrupt.new("shutdown")
      content = "Hello".encode("UTF-16LE")
      content.define_singleton_method(:encode) { |*| raise interrupt }
      key = Object.new
      key.define_singleton_method(:to_s) { raise SignalException, "TERM" }
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect { processor.process_streamed_message(text_chunk(content)) }.to raise_error(interrupt)
      expect { processor.process_streamed_message({ choices: [], key => 1 }) }
        .to raise_error(SignalException, "SIGTERM")
      responses = DiscourseAiStream::OpenAiResponsesMessageProcessor.new
      expect { responses.process_streamed_message({ type: "response.output_text.delta", delta: content }) }
        .to raise_error(interrupt)
      expect(processor.process_streamed_message(text_chunk("after"))).to eq("after")
      expect(processor.anomalies).to be_empty
    end
  end
end
