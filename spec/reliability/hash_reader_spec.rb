# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/stressed_processor"

# The serde reader of the Hash path (ruby_de.rs) on Hashes that make it run
# Ruby code while it reads: Strings it has Ruby transcode, and keys that are
# neither Strings nor Symbols.
RSpec.describe "Hash path: the serde reader" do
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
end
