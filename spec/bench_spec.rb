# frozen_string_literal: true

$LOAD_PATH.unshift(File.expand_path("../bench", __dir__))
require "workloads"
require "paths"
require "measure"
require "report"

# bin/bench's own logic, without timing anything: the inputs it builds and
# how it judges a run against its targets (docs/decisions.md).
RSpec.describe "bin/bench" do
  let(:root) { File.expand_path("..", __dir__) }

  describe Bench::Workload do
    let(:workload) { Bench::Workloads.all(root, scale: false).find { |w| w.name == "text_2k" } }

    it "spreads into copies with the same streams, the events and bytes multiplied" do
      copies = workload.spread(3)

      expect(copies.streams).to eq(workload.streams * 3)
      expect([copies.events, copies.bytes]).to eq([workload.events * 3, workload.bytes * 3])
      expect(copies.reads.map(&:join)).to eq(workload.streams * 3)
      expect(copies.partial).to eq(workload.partial)
    end

    it "decodes each copy as the original stream" do
      copies = workload.spread(2)
      decode = lambda do |reads|
        processor = Bench::Paths.processor(workload)
        reads.flat_map { |read| processor.decode_chunk(read) }.join
      end
      original = decode.call(workload.reads.first)

      expect(original.size).to be > 10_000
      expect(copies.reads.map(&decode)).to eq([original, original])
    end
  end

  describe Bench::Workloads do
    it "builds the large member of a scaling pair by name" do
      text = described_class.named(root, "text_20k")

      expect([text.name, text.events]).to eq(["text_20k", 20_004])
      expect(described_class.named(root, "tools_4k").name).to eq("tools_4k")
      expect(described_class.named(root, "no_such")).to be_nil
    end

    it "builds Responses API workloads whose calls come out whole through both paths" do
      workload = described_class.all(root, scale: false).find { |w| w.name == "responses_tools_4k_partial" }
      expect(workload).to be_responses
      raw = Bench::Paths.processor(workload)
      calls = workload.reads.first.flat_map { |read| raw.decode_chunk(read) } + raw.finish
      finals = calls.reject(&:partial?).uniq(&:object_id)
      expect(finals.map(&:id)).to eq(%w[call_bench0 call_bench1 call_bench2])
      expect(finals.map { |c| c.parameters[:body].bytesize }).to all(be > 4000)
      expect(raw.anomalies).to eq([])
      text = described_class.all(root, scale: false).find { |w| w.name == "responses_text_2k" }
      expect(text.events).to eq(2_002)
    end

    it "puts each large workload right after its small one" do
      names = described_class.all(root).map(&:name)

      Bench::Report::PAIRS.each { |large, small| expect(names.index(large)).to eq(names.index(small) + 1) }
    end
  end

  describe Bench::Report do
    let(:small) do
      Bench::Workload.new(name: "text_2k", description: "", streams: ["data: {}\n\n" * 10], partial: false)
    end
    let(:large) do
      Bench::Workload.new(name: "text_20k", description: "", streams: ["data: {}\n\n" * 100], partial: false)
    end

    def results
      paths = Bench::Report::PATHS.to_h { |p| [p, Bench::Result.new(seconds: 1.0, allocations: 1, share: 0.0)] }
      { small => paths, large => paths }
    end

    def targets(raw)
      out = StringIO.new
      described_class.new(results, { %w[text_20k text_2k] => { raw: raw, hash: 10.1, floor: 9.9 } }, out: out).print
      out.string
    end

    it "judges the text scaling pair by the raw path's ratio measured in turn" do
      expect(targets(10.5)).to include("PASS  scaling raw text_20k / text_2k: 10.50x for 10.00x the bytes")
      expect(targets(11.2)).to include("FAIL  scaling raw text_20k / text_2k: 11.20x for 10.00x the bytes")
    end

    it "prints every path's scaling ratio and marks pairs it did not run" do
      printed = targets(10.0)

      expect(printed).to match(%r{text_20k\s+/ text_2k\s+bytes 10.00x\s+raw 10.00x\s+hash 10.10x\s+floor  9.90x})
      expect(printed).to include("n/a   scaling args_400k_partial / args_40k_partial: not run")
    end

    it "sets the time per event of a Responses workload beside its chat twin's, raw and floor" do
      twin = Bench::Workload.new(name: "responses_text_2k", description: "", streams: ["data: {}\n\n" * 20],
                                 partial: false)
      timed = lambda do |raw, floor|
        { raw: Bench::Result.new(seconds: raw, allocations: 1, share: 0.0),
          hash: Bench::Result.new(seconds: 1.0, allocations: 1, share: 0.0),
          floor: Bench::Result.new(seconds: floor, allocations: 1, share: 0.0) }
      end
      out = StringIO.new
      described_class.new({ small => timed.call(1.0e-5, 3.0e-4), twin => timed.call(3.0e-5, 4.0e-4) }, out: out).print

      expect(out.string).to match(
        %r{responses_text_2k\s+/ text_2k\s+raw  1.50 /  1.00 us = 1.50x\s+floor 20.00 / 30.00 us = 0.67x}
      )
      expect(out.string).to include("responses_tools_4k / tools_4k: not run")
    end
  end
end
