# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/stressed_processor"

# The conversion of the Hash path (ruby_json.rs) on Hashes that make it run
# Ruby code while it reads: Strings it has Ruby transcode, and keys that are
# neither Strings nor Symbols.
RSpec.describe "Hash path: the conversion to a JSON value" do
  include ChunkHelpers

  # A String the reader has Ruby transcode, which compacts the heap when it
  # does: every object that can move moves, so one the reader holds where
  # the GC cannot see it is left stale at once.
  def compacting_utf16
    text = "caf\u00e9".encode("UTF-16LE")
    def text.encode(...)
      GC.verify_compaction_references(toward: :empty)
      super
    end
    text
  end

  # The chunk with a first member that compacts the heap while it is read.
  def compacting_utf16_chunk(chunk)
    { utf16: compacting_utf16 }.merge(chunk)
  end

  # A chunk of more than 16 pairs whose first value makes Ruby code run
  # while the later pairs, the chunk's own members among them, wait to be
  # read.
  def wide_chunk(text)
    chunk = { utf16: compacting_utf16 }
    20.times { |i| chunk[:"extra_#{i}"] = [+"v#{i}", { n: i }] }
    chunk[:choices] = [{ index: 0, delta: { content: +text }, finish_reason: nil }]
    chunk
  end

  it "keeps the pairs of a Hash of more than 16 keys where the GC sees them while Ruby code runs" do
    processor = StressedProcessor.new(DiscourseAiStream::OpenAiMessageProcessor.new)
    3.times do |round|
      expect(processor.process_streamed_message(wide_chunk("hello #{round}"))).to eq("hello #{round}")
    end
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

  it "reads such keys in a Hash of more than 16 pairs, with collections at every key's to_s" do
    processor = StressedProcessor.new(DiscourseAiStream::OpenAiMessageProcessor.new)
    arguments = (1..18).to_h { |i| [i, [+"v#{i}"]] }
    header = tool_chunk([{ index: 0, id: "c1", function: { name: "f", arguments: arguments } }])
    expect(processor.process_streamed_message(compacting_utf16_chunk(header))).to be_nil
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
end
