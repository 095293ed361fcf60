# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "support/conformance_helpers"
require_relative "support/raw_path_examples"

# Conformance with Discourse's own spec of the processor it replaces:
# discourse/discourse plugins/discourse-ai/spec/lib/completions/
# open_ai_message_processor_spec.rb (newest version, 18 examples). Each group
# below names the upstream example it mirrors; the inputs and the expected
# calls, text and token counts are the upstream facts, the specs are ours.
# Each group checks the Hash path (the upstream example's own steps) and the
# raw path (the same chunks as SSE bytes, see raw_path_examples.rb).
RSpec.describe DiscourseAiStream::OpenAiMessageProcessor, :conformance do
  # Upstream's specs run where DiscourseAi::Completions is loaded, so the
  # processor's defaults follow Discourse (its accounting of usage).
  before { stub_const("DiscourseAi::Completions", Module.new) }

  # A streamed chunk as the upstream spec builds them: one choice, no index,
  # finish_reason only when given.
  def streamed(delta, finish: nil)
    { choices: [{ delta: delta, finish_reason: finish }.compact] }
  end

  def header(id, name, arguments, index: nil)
    { index: index, id: id, function: { name: name, arguments: arguments } }.compact
  end

  def piece(arguments, index: nil, id: nil)
    { index: index, id: id, function: { arguments: arguments } }.compact
  end

  def tools(*calls, finish: nil)
    streamed({ tool_calls: calls }, finish: finish)
  end

  # What process_streamed_message returns for each chunk, as it returns it
  # (nil, one item or an Array), for the upstream checks of return shapes.
  def direct_results(partial: false)
    processor = described_class.new(partial_tool_calls: partial)
    chunks.map { |chunk| processor.process_streamed_message(chunk) }
  end

  def hash_path(partial: false)
    hash_steps(described_class.new(partial_tool_calls: partial), chunks.map { |chunk| JSON.generate(chunk) })
  end

  # [id, name, parameters] of the upstream spec's search calls, by query.
  def searches(*queries)
    queries.map { |query| ["call_#{query}", "search", { query: query }] }
  end

  # The one check of most upstream examples: the step `at` (finish unless
  # told) completes the expected calls; and the same on the raw path.
  # The step `at` completes the expected calls, and finish has nothing left.
  def expect_completed_at(steps, at)
    expect(completed_calls([steps[at]])).to eq(expected_calls)
    expect(steps.last).to eq([])
  end

  shared_examples "completed calls" do |description, at = -1|
    it(description) { expect(completed_calls([hash_path[at]])).to eq(expected_calls) }

    it_behaves_like "the same stream on the raw path"
  end

  let(:expected_text) { "" }
  let(:partial) { false }

  # upstream: "retains every tool call in a single streamed chunk"
  describe "three complete calls and the finish_reason in one chunk" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"sam"}', index: 0),
             header("call_dan", "search", '{"query":"dan"}', index: 1),
             header("call_alex", "search", '{"query":"alex"}', index: 2), finish: "tool_calls")]
    end
    let(:expected_calls) { searches("sam", "dan", "alex") }

    [false, true].each do |partial|
      it "completes all three from that chunk, and finish has nothing left (partial_tool_calls: #{partial})" do
        steps = hash_path(partial: partial)
        expect_completed_at(steps, 0)
      end
    end

    it_behaves_like "the same stream on the raw path"
    it_behaves_like "the same stream on the raw path" do
      let(:partial) { true }
    end
  end

  # upstream: "assembles interleaved argument fragments by tool index"
  describe "two headers, then their fragments in the other order, keyed by index" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"', index: 0),
             header("call_dan", "search", '{"query":"', index: 1)),
       tools(piece('dan"}', index: 1), piece('sam"}', index: 0))]
    end
    let(:expected_calls) { searches("sam", "dan") }

    it "completes both at finish, in order of first appearance" do
      steps = hash_path
      expect(steps[0..1]).to eq([[], []])
      expect(completed_calls([steps.last])).to eq(expected_calls)
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "tracks partial progress independently for each tool call"
  describe "partial progress of two interleaved calls" do
    let(:partial) { true }
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"sam', index: 0),
             header("call_dan", "search", '{"query":"dan', index: 1)),
       tools(piece('iel"}', index: 1), piece('uel"}', index: 0)),
       streamed({}, finish: "tool_calls")]
    end
    let(:expected_calls) do
      [["call_sam", "search", { query: "samuel" }], ["call_dan", "search", { query: "daniel" }]]
    end

    it "shows each call's own prefix, in the order the chunk names them, then completes both at the finish_reason" do
      steps = hash_path(partial: true)
      expect(steps[0].map { |c| c.values_at(:id, :parameters, :partial) }).to eq(
        [["call_sam", { query: "sam" }, true], ["call_dan", { query: "dan" }, true]]
      )
      expect(steps[1].map { |c| c.values_at(:parameters, :partial) }).to eq(
        [[{ query: "daniel" }, true], [{ query: "samuel" }, true]]
      )
      expect_completed_at(steps, 2)
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "assembles calls by ID when indexes are omitted"
  describe "two calls without index, fragments matched by id" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"'), header("call_dan", "search", '{"query":"')),
       tools(piece('dan"}', id: "call_dan"), piece('sam"}', id: "call_sam"))]
    end
    let(:expected_calls) { searches("sam", "dan") }

    include_examples "completed calls", "completes both at finish"
  end

  # upstream: "retains successive calls when a server reuses a tool index"
  describe "two complete calls one after the other at index 0" do
    let(:chunks) do
      %w[sam dan].map { |name| tools(header("call_#{name}", "search", JSON.generate(query: name), index: 0)) }
    end
    let(:expected_calls) { searches("sam", "dan") }

    it "keeps both, completed, in order" do
      steps = hash_path
      expect(completed_calls(steps)).to eq(expected_calls)
      expect(partial_updates(steps)).to eq([])
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "assembles fragments when a call switches between index and ID
  # identification" (its two variants)
  describe "an indexed header, continued by a fragment with only its id" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"', index: 0)), tools(piece('sam"}', id: "call_sam"))]
    end
    let(:expected_calls) { searches("sam") }

    include_examples "completed calls", "is one call"
  end

  describe "a header with only an id, continued by a fragment with only index 0" do
    let(:chunks) { [tools(header("call_sam", "search", '{"query":"')), tools(piece('sam"}', index: 0))] }
    let(:expected_calls) { searches("sam") }

    include_examples "completed calls", "is one call (rule 6)"
  end

  # upstream: "matches a continuation by ID when its index changes"
  describe "continuations whose ids name calls at other indexes" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":', index: 0), header("call_dan", "search", '{"query":', index: 1)),
       tools(piece('"sam"}', index: 2, id: "call_sam"), piece('"dan"}', index: 0, id: "call_dan"))]
    end
    let(:expected_calls) { searches("sam", "dan") }

    it "sends each fragment to the call its id names" do
      steps = hash_path
      expect(completed_calls(steps)).to eq(expected_calls)
      expect(steps.last.size).to eq(2)
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "registers an index introduced by an ID-bearing continuation"
  describe "a header without index, a fragment with its id and index 0, then one with only index 0" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"')), tools(piece("sam", index: 0, id: "call_sam")),
       tools(piece('"}', index: 0))]
    end
    let(:expected_calls) { searches("sam") }

    include_examples "completed calls", "is one call"
  end

  # upstream: "keeps an unknown continuation ID from corrupting an indexed call"
  describe "a nameless fragment with an unknown id at the index of a finished call" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":"sam"}', index: 0)),
       tools(piece('{"query":"dan"}', index: 0, id: "call_dan"))]
    end
    let(:expected_calls) { searches("sam") }

    it "leaves the finished call untouched and reports the dropped fragment (rule 8)" do
      processor = described_class.new
      steps = hash_steps(processor, chunks.map { |chunk| JSON.generate(chunk) })
      expect(completed_calls(steps)).to eq(expected_calls)
      expect(processor.anomalies.map { |anomaly| anomaly[:kind] }).to include(:orphan_fragment)
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "keeps distinct indexed headers separate when their IDs match"
  describe "two named headers at index 0 and 1 sharing one id" do
    let(:chunks) do
      [tools(header("call_search", "search", '{"query":"sam"}', index: 0),
             header("call_search", "search", '{"query":"dan"}', index: 1))]
    end
    let(:expected_calls) { [["call_search", "search", { query: "sam" }], ["call_search", "search", { query: "dan" }]] }

    it "are two calls, in order, and the duplicated id is reported (rule 14)" do
      processor = described_class.new
      steps = hash_steps(processor, chunks.map { |chunk| JSON.generate(chunk) })
      expect(completed_calls([steps.last])).to eq(expected_calls)
      # Any report naming the id, other than the end-of-stream note that lists open calls.
      reports = processor.anomalies.reject { |anomaly| anomaly[:kind] == :truncated }
      expect(reports.map { |anomaly| anomaly.values.join(" ") }).to include(a_string_including("call_search"))
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "removes every alias when a tool index is reused"
  describe "a call continued by id, then a new complete call at its index" do
    let(:chunks) do
      [tools(header("call_sam", "search", '{"query":', index: 0)), tools(piece('"sam"}', id: "call_sam")),
       tools(header("call_dan", "search", '{"query":"dan"}', index: 0))]
    end
    let(:expected_calls) { searches("sam", "dan") }

    it "keeps both, completed, and nothing is left after finish" do
      processor = described_class.new
      steps = hash_steps(processor, chunks.map { |chunk| JSON.generate(chunk) })
      expect(completed_calls(steps)).to eq(expected_calls)
      expect(partial_updates(steps)).to eq([])
      expect(processor.finish).to eq([])
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "accepts unindexed argument fragments for the current call"
  describe "a header without index, then a fragment with neither index nor id" do
    let(:chunks) { [tools(header("call_sam", "search", '{"query":"')), tools(piece('sam"}'))] }
    let(:expected_calls) { searches("sam") }

    include_examples "completed calls", "continues the most recent call"
  end

  # upstream: "preserves content and finalizes all calls on an empty tool delta"
  describe "text with two complete calls, then an empty tool_calls delta" do
    let(:chunks) do
      [streamed({ content: "\n",
                  tool_calls: [header("call_sam", "search", '{"query":"sam"}', index: 0),
                               header("call_dan", "search", '{"query":"dan"}', index: 1)] }),
       tools]
    end
    let(:expected_calls) { searches("sam", "dan") }
    let(:expected_text) { "\n" }

    it "returns the text at once, as a bare String" do
      expect(direct_results.first).to eq("\n")
    end

    it "returns the text at once and both calls from the empty delta; finish has nothing left" do
      steps = hash_path
      expect(steps[0]).to eq(["\n"])
      expect_completed_at(steps, 1)
    end

    it "returns both calls from the read of the empty delta on the raw path" do
      payloads = chunks.map { |chunk| JSON.generate(chunk) }
      steps = raw_steps(described_class.new, payloads.map { |payload| "data: #{payload}\n\n" })
      expect(steps[0]).to eq(["\n"])
      expect_completed_at(steps, 1)
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "keeps earlier tool calls partial until the stream finishes"
  describe "a second header while the first call streams partially" do
    let(:partial) { true }
    let(:chunks) do
      [tools(header("call_weather", "lookup_weather", "", index: 0)),
       tools(piece('{"location":"SFO"}', index: 0)),
       tools(header("call_calendar", "create_calendar_event", "", index: 1)),
       tools(piece('{"title":"Pack","time":"18:00"}', index: 1)),
       streamed({}, finish: "stop")]
    end
    let(:expected_calls) do
      [["call_weather", "lookup_weather", { location: "SFO" }],
       ["call_calendar", "create_calendar_event", { title: "Pack", time: "18:00" }]]
    end

    it "keeps the first call partial and returns nothing for the new header; the finish_reason completes both" do
      processor = described_class.new(partial_tool_calls: true)
      processor.process_streamed_message(chunks[0])
      first = processor.process_streamed_message(chunks[1])
      expect([first.id, first.parameters, first.partial?]).to eq(["call_weather", { location: "SFO" }, true])

      expect(processor.process_streamed_message(chunks[2])).to be_nil
      expect(first.partial?).to be(true)

      processor.process_streamed_message(chunks[3])
      done = Array(processor.process_streamed_message(chunks[4]))
      expect(done.map { |call| [call.id, call.name, call.parameters] }).to eq(expected_calls)
      expect(done).to all(have_attributes(partial?: false))
    end

    it_behaves_like "the same stream on the raw path"
  end

  # upstream: "parses streamed arguments with padding" and "repairs a
  # missing opening delimiter": the arguments' pieces, the first in the header.
  {
    "arguments with a space before and after the object" =>
      ["parses them, completed by the finish_reason", [' {"kind', '":"group","query":"friend"} ']],
    "arguments missing their opening brace" =>
      ["repairs them when the finish_reason completes the call", ['kind": "group", "query": "friend"} ']]
  }.each do |description, (check, pieces)|
    describe description do
      let(:chunks) do
        [tools(header("call_group", "resolve", pieces.first, index: 0)),
         *pieces.drop(1).map { |rest| tools(piece(rest, index: 0)) }, streamed({}, finish: "tool_calls")]
      end
      let(:expected_calls) { [["call_group", "resolve", { kind: "group", query: "friend" }]] }

      include_examples "completed calls", check, pieces.size

      it "returns the one completed call itself, not in an Array" do
        done = direct_results.last
        expect([done.id, done.parameters, done.partial?])
          .to eq(["call_group", { kind: "group", query: "friend" }, false])
      end
    end
  end

  # upstream: "raises on invalid tool arguments"
  describe "arguments that are not JSON" do
    let(:chunks) { [tools(header("call_group", "resolve", "not-json", index: 0)), streamed({}, finish: "tool_calls")] }

    it "raises a JSON::ParserError when the finish_reason completes the call" do
      processor = described_class.new
      processor.process_streamed_message(chunks[0])
      expect { processor.process_streamed_message(chunks[1]) }.to raise_error(JSON::ParserError)
    end

    it "raises it on the raw path too, whatever the split" do
      splittings(sse_body(chunks.map { |chunk| JSON.generate(chunk) })).each do |way, reads|
        processor = described_class.new
        expect { reads.each { |read| processor.decode_chunk(read) } }.to raise_error(JSON::ParserError), way
      end
    end
  end

  # upstream: "separates uncached, cache-read, and cache-write input tokens"
  describe "usage with cache reads and writes" do
    let(:usage) do
      { prompt_tokens: 2_006, completion_tokens: 300,
        prompt_tokens_details: { cached_tokens: 1_920, cache_write_tokens: 64 } }
    end
    let(:expected) { { prompt: 22, completion: 300, cache_read: 1_920, cache_write: 64 } }

    it "reports prompt tokens net of both, from process_message" do
      processor = described_class.new
      processor.process_message({ choices: [], usage: usage })
      expect(token_counts(processor)).to eq(expected)
    end

    it "reports the same from a streamed usage chunk, on both paths" do
      payload = JSON.generate({ choices: [], usage: usage })
      hashed = described_class.new
      hash_steps(hashed, [payload])
      expect(token_counts(hashed)).to eq(expected)
      splittings(sse_body([payload])).each do |way, reads|
        raw = described_class.new
        raw_steps(raw, reads)
        expect(token_counts(raw)).to eq(expected), way
      end
    end
  end
end
