# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/chunks"

# One example per rule of stream-shapes.md, each with its own small stream,
# through the Hash path and the raw path; both must give the expected calls.
RSpec.describe "stream-shapes.md rules" do
  # name => [chunks, expected [id, name, parameters] triples, expected text]
  rules = {
    "reference shape: header then fragments, finish chunk, usage chunk" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("c1", "lookup", "", index: 0)]),
       *['{"', "lo", "catio", 'n": "B', 'erlin"}'].map { |f| ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, f)]) },
       ChunkHelpers.finish_chunk, ChunkHelpers.usage_chunk(prompt: 5, completion: 3)],
      [["c1", "lookup", { location: "Berlin" }]]
    ],
    "1: several complete calls in one delta with finish_reason" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"n":1}'), ChunkHelpers.call("b", "g", '{"n":2}')],
                               finish: "tool_calls")],
      [["a", "f", { n: 1 }], ["b", "g", { n: 2 }]]
    ],
    "2: complete arguments on the header are appended once" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"n":1}', index: 0)]), ChunkHelpers.finish_chunk],
      [["a", "f", { n: 1 }]]
    ],
    "3: arguments omitted or null on the header" => [
      [ChunkHelpers.tool_chunk([{ index: 0, id: "a", function: { name: "f" } }]),
       ChunkHelpers.tool_chunk([{ index: 1, id: "b", function: { name: "g", arguments: nil } }]),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, '{"x":1}')]),
       ChunkHelpers.finish_chunk],
      [["a", "f", { x: 1 }], ["b", "g", {}]]
    ],
    "4: arguments as a JSON object" => [
      [ChunkHelpers.tool_chunk([{ index: 0, id: "a", function: { name: "f", arguments: { q: "x", n: [1] } } }]),
       ChunkHelpers.finish_chunk],
      [["a", "f", { q: "x", n: [1] }]]
    ],
    "5: fragments of simultaneous calls interleave by index" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", "", index: 0), ChunkHelpers.call("b", "g", "", index: 1)]),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(1, '{"y":')]),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, '{"x":')]),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(1, "2}")]),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, "1}")]),
       ChunkHelpers.finish_chunk],
      [["a", "f", { x: 1 }], ["b", "g", { y: 2 }]]
    ],
    "6: no index: match by id; neither index nor id continues the latest call" => [
      [ChunkHelpers.tool_chunk([{ id: "g1", function: { name: "f", arguments: '{"a"' } }]),
       ChunkHelpers.tool_chunk([{ id: "g2", function: { name: "g", arguments: '{"b":' } }]),
       ChunkHelpers.tool_chunk([{ function: { arguments: "2" } }]),
       ChunkHelpers.tool_chunk([{ id: "g1", function: { arguments: ":1" } }]),
       ChunkHelpers.tool_chunk([{ function: { arguments: "}" } }]),
       ChunkHelpers.tool_chunk([{ id: "g2", function: { arguments: "}" } }]),
       ChunkHelpers.finish_chunk("stop")],
      [["g1", "f", { a: 1 }], ["g2", "g", { b: 2 }]]
    ],
    "7: a reused index with a new id and name starts a new call" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("o1", "f", '{"a":1}', index: 0)], finish: ""),
       ChunkHelpers.tool_chunk([ChunkHelpers.call("o2", "g", '{"b":2}', index: 0)], finish: ""),
       ChunkHelpers.finish_chunk("stop")],
      [["o1", "f", { a: 1 }], ["o2", "g", { b: 2 }]]
    ],
    "8: a changed id on an arguments-only delta is a continuation" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("first", "f", '{"a":', index: 0)]),
       ChunkHelpers.tool_chunk([{ index: 0, id: "other", function: { arguments: "1}" } }]),
       ChunkHelpers.finish_chunk],
      [["first", "f", { a: 1 }]]
    ],
    "8: an explicit id that matches wins over a conflicting index" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"x":', index: 0),
                                ChunkHelpers.call("b", "g", '{"y":', index: 1)]),
       ChunkHelpers.tool_chunk([{ index: 1, id: "a", function: { arguments: "1}" } }]),
       ChunkHelpers.tool_chunk([{ index: 1, id: "b", function: { arguments: "2}" } }]),
       ChunkHelpers.finish_chunk],
      [["a", "f", { x: 1 }], ["b", "g", { y: 2 }]]
    ],
    "9: ids repeated, empty, null, or integers" => [
      [ChunkHelpers.tool_chunk([{ index: 0, id: 7, function: { name: "f", arguments: '{"a"' } }]),
       ChunkHelpers.tool_chunk([{ index: 0, id: 7, function: { arguments: ":" } }]),
       ChunkHelpers.tool_chunk([{ index: 0, id: "", function: { arguments: "1" } }]),
       ChunkHelpers.tool_chunk([{ index: 0, id: nil, function: { arguments: "}" } }]),
       ChunkHelpers.finish_chunk],
      [["7", "f", { a: 1 }]]
    ],
    "10: names repeated in full, or empty, on continuations" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("c", "get_weather", '{"a"', index: 0)]),
       ChunkHelpers.tool_chunk([{ index: 0, function: { name: "get_weather", arguments: ":" } }]),
       ChunkHelpers.tool_chunk([{ index: 0, function: { name: "", arguments: "1}" } }]),
       ChunkHelpers.finish_chunk],
      [["c", "get_weather", { a: 1 }]]
    ],
    "11: an id nested inside function" => [
      [ChunkHelpers.tool_chunk([{ index: 0, function: { id: "nested", name: "f", arguments: "{}" } }]),
       ChunkHelpers.finish_chunk],
      [["nested", "f", {}]]
    ],
    "12: type repeated, empty or absent is ignored" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", "", index: 0)]),
       ChunkHelpers.tool_chunk([{ index: 0, type: "", function: { arguments: '{"a":1}' } }]),
       ChunkHelpers.tool_chunk([{ index: 0, type: "function", function: { arguments: "" } }]),
       ChunkHelpers.finish_chunk],
      [["a", "f", { a: 1 }]]
    ],
    "13: sparse indexes come out in order of first appearance" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("late", "f", "{}", index: 3)]),
       ChunkHelpers.tool_chunk([ChunkHelpers.call("early", "g", "{}", index: 1)]),
       ChunkHelpers.finish_chunk],
      [["late", "f", {}], ["early", "g", {}]]
    ],
    "14: headers at two indexes that share an id are two calls" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("same", "f", '{"a":', index: 0)]),
       ChunkHelpers.tool_chunk([ChunkHelpers.call("same", "g", '{"b":', index: 1)]),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, "1}")]),
       ChunkHelpers.tool_chunk([{ index: 0, id: "same", function: { arguments: "2}" } }]),
       ChunkHelpers.finish_chunk],
      [["same", "f", { a: 1 }], ["same", "g", { b: 2 }]]
    ],
    "completion: only a non-empty finish_reason ends the turn, \"stop\" too" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"a":', index: 0)], finish: ""),
       ChunkHelpers.text_chunk("\n"),
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, "1}")]),
       ChunkHelpers.finish_chunk("stop")],
      [["a", "f", { a: 1 }]], ["\n"]
    ],
    "completion: tool_calls: [] is noise and ends nothing" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"a":', index: 0)]),
       { choices: [{ index: 0, delta: { content: "x", tool_calls: [] } }] },
       ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, "2}")]),
       ChunkHelpers.finish_chunk],
      [["a", "f", { a: 2 }]], ["x"]
    ],
    "completion: chunks after finish_reason keep being read" => [
      [ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", "{}", index: 0)]),
       ChunkHelpers.finish_chunk,
       { choices: [{ index: 0, content_filter_results: { hate: { filtered: false } } }] },
       ChunkHelpers.text_chunk("late"),
       ChunkHelpers.usage_chunk(prompt: 3, completion: 4)],
      [["a", "f", {}]], ["late"]
    ],
    "content: parts, null, empty, whitespace, reasoning fields" => [
      [{ choices: [{ index: 0, delta: { role: "assistant", content: nil } }] },
       ChunkHelpers.text_chunk(""),
       ChunkHelpers.text_chunk("\n"),
       { choices: [{ index: 0,
                     delta: { content: [{ type: "thinking", thinking: [] }, { type: "text", text: "3" }] } }] },
       { choices: [{ index: 0, delta: { reasoning_content: "hidden", reasoning: "hidden" } }] }],
      [], %W[\n 3]
    ],
    "content: text and tool calls in one delta give the text first" => [
      [{ choices: [{ index: 0,
                     delta: { content: "Checking.", tool_calls: [ChunkHelpers.call("a", "f", "{}", index: 0)] },
                     finish_reason: "tool_calls" }] }],
      [["a", "f", {}]], ["Checking."]
    ]
  }

  # The calls in order of completion: the last item of each ToolCall object
  # (with partial_tool_calls the same object is returned while it streams).
  def final_calls(items)
    calls = tool_calls_in(items).reverse.uniq(&:object_id).reverse
    expect(calls).to all(have_attributes(partial?: false))
    calls
  end

  rules.each do |name, (chunks, expected_calls, expected_text)|
    describe name do
      [false, true].each do |partial|
        it "gives the expected calls from parsed chunks (partial_tool_calls: #{partial})" do
          items = stream_items(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial),
                               chunks.map { |c| parsed(c) })
          finals = final_calls(items)
          expect(finals.map { |c| [c.id, c.name, c.parameters] }).to eq(expected_calls)
          expect(items.grep(String)).to eq(expected_text || [])
        end

        it "gives the same from raw SSE bytes (partial_tool_calls: #{partial})" do
          processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
          items = decoded_items(processor, [sse(chunks)])
          finals = final_calls(items)
          expect(finals.map { |c| [c.id, c.name, c.parameters] }).to contain_exactly(*expected_calls)
          expect(items.grep(String)).to eq(expected_text || [])
        end
      end
    end
  end

  it "11: a call with a name and no id anywhere gets a generated id, reported" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    items = stream_items(processor,
                         [tool_chunk([{ index: 0, function: { name: "f", arguments: "{}" } }]), finish_chunk])
    expect(items.first.id).to start_with("call_das_")
    expect(processor.anomalies).to contain_exactly(include(kind: :generated_id, name: "f", id: items.first.id))
  end

  # Calls without ids get generated ids, which differ between processors: compare names and parameters.
  def named_params(items)
    final_calls(items).map { |c| [c.name, c.parameters] }
  end

  def both_paths(chunks, partial: false)
    hashed = stream_items(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial),
                          chunks.map { |c| parsed(c) })
    decoded = decoded_items(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial), [sse(chunks)])
    [hashed, decoded]
  end

  [false, true].each do |partial|
    it "1: same-name calls with no id and no index in one delta stay separate (partial_tool_calls: #{partial})" do
      chunk = tool_chunk([{ function: { name: "search", arguments: '{"q":"a"}' } },
                          { function: { name: "search", arguments: '{"q":"b"}' } }], finish: "tool_calls")
      both_paths([chunk], partial: partial).each do |items|
        expect(named_params(items)).to eq([["search", { q: "a" }], ["search", { q: "b" }]])
        expect(ids_in(items).uniq.size).to eq(2)
      end
    end

    it "7: index 0 reused with no id and the same name after complete arguments (partial_tool_calls: #{partial})" do
      chunks = [tool_chunk([{ index: 0, function: { name: "search", arguments: '{"q":"a"}' } }], finish: ""),
                tool_chunk([{ index: 0, function: { name: "search", arguments: '{"q":"b"}' } }], finish: ""),
                finish_chunk("stop")]
      both_paths(chunks, partial: partial).each do |items|
        expect(named_params(items)).to eq([["search", { q: "a" }], ["search", { q: "b" }]])
      end
    end

    it "arguments: a valid JSON prefix does not complete a call early (partial_tool_calls: #{partial})" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
      chunks = [tool_chunk([call("p", "f", '{"n":1', index: 0)]), tool_chunk([fragment(0, "2")]),
                tool_chunk([fragment(0, ',"s":"x"}')]), tool_chunk([fragment(0, " ")])]
      early = chunks.flat_map { |c| Array(processor.process_streamed_message(parsed(c))) }
      expect(early).to all(have_attributes(partial?: true))
      items = [*processor.process_streamed_message(parsed(finish_chunk))]
      expect(final_calls(items).map { |c| [c.id, c.parameters] }).to eq([["p", { n: 12, s: "x" }]])
      expect(processor.anomalies).to eq([])
    end
  end

  # Slotting items of issues 17 and 21 (rules 6, 8 and 14 as revised on
  # 2026-12-04): each stream through the Hash path and through decode_chunk
  # whole, a byte at a time and in random reads, with and without partial
  # tool calls; each gives the same calls and the same anomaly kinds.
  describe "slotting (rules 6, 8, 14 revised)" do
    extend ChunkHelpers

    def outcomes(chunks, partial)
      hashed = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
      results = [["Hash path", hashed, stream_items(hashed, chunks.map { |c| parsed(c) })]]
      bytes = sse(chunks)
      random = Random.new(17)
      splits = { "whole" => [bytes], "1-byte reads" => bytes.chars,
                 **(1..3).to_h { |n| ["random reads #{n}", random_reads(bytes, random)] } }
      splits.each do |how, reads|
        processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
        results << ["raw path, #{how}", processor, decoded_items(processor, reads)]
      end
      results
    end

    def expect_slotting(chunks, calls:, anomalies: [])
      [false, true].each do |partial|
        outcomes(chunks, partial).each do |how, processor, items|
          got = final_calls(items).map { |c| [c.id, c.name, c.parameters] }
          # A read's items hold each call once, where it first appeared in
          # that read: with partial calls, completion order depends on the
          # reads (as in Discourse's decode_chunk).
          ordered = partial && how != "Hash path" ? match_array(calls) : eq(calls)
          expect(got).to ordered, "#{how}, partial_tool_calls: #{partial}"
          expect_anomalies(processor, anomalies, "#{how}, partial_tool_calls: #{partial}")
        end
      end
    end

    def expect_anomalies(processor, expected, how)
      expect(processor.anomalies.map { |a| a[:kind] }).to eq(expected.map { |a| a[:kind] }), how
      expect(processor.anomalies).to match(expected.map { |a| include(a) }), how
    end

    # description => [chunks before the finish chunk, expected calls,
    # expected anomalies (none unless given)]
    {
      "6: a header with an id and no index, then nameless fragments with an index and no id, are one call" => [
        [tool_chunk([{ id: "call_sam", type: "function", function: { name: "search", arguments: '{"query":"' } }]),
         tool_chunk([fragment(0, 'sam"}')])],
        [["call_sam", "search", { query: "sam" }]]
      ],
      "6: an indexed header, then fragments with the id and no index, are one call" => [
        [tool_chunk([call("call_sam", "search", '{"query":"', index: 0)]),
         tool_chunk([{ id: "call_sam", function: { arguments: 'sam"}' } }])],
        [["call_sam", "search", { query: "sam" }]]
      ],
      "6: fragments with no id and no name at an index no call has continue the latest call (Nebius, Cerebras)" => [
        [tool_chunk([call("n1", "f", "", index: 0)]),
         tool_chunk([fragment(1, '{"a":')]), tool_chunk([fragment(1, "1}")]),
         tool_chunk([call("n2", "g", "", index: 1)]),
         tool_chunk([fragment(2, '{"b":')]), tool_chunk([fragment(2, "2}")])],
        [["n1", "f", { a: 1 }], ["n2", "g", { b: 2 }]]
      ],
      "6: fragments with an id go to that call whatever their index (Vertex Gemini crosses them)" => [
        [tool_chunk([call("A", "f", "", index: 1)]),
         tool_chunk([call("B", "g", "", index: 0)]),
         tool_chunk([{ index: 0, id: "A", function: { arguments: '{"a":' } }]),
         tool_chunk([{ index: 1, id: "B", function: { arguments: '{"b":' } }]),
         tool_chunk([{ index: 0, id: "A", function: { arguments: "1}" } }]),
         tool_chunk([{ index: 1, id: "B", function: { arguments: "2}" } }])],
        [["A", "f", { a: 1 }], ["B", "g", { b: 2 }]]
      ],
      "8: a nameless fragment with an unknown id after complete arguments is dropped and reported" => [
        [tool_chunk([call("call_sam", "search", '{"query":"sam"}', index: 0)]),
         tool_chunk([{ index: 0, id: "call_dan", function: { arguments: '{"query":"dan"}' } }])],
        [["call_sam", "search", { query: "sam" }]],
        [{ kind: :orphan_fragment, id: "call_dan", index: 0, excerpt: '{"query":"dan"}' }]
      ],
      "8: while the arguments are incomplete, an unknown id on a nameless fragment is a continuation" => [
        [tool_chunk([call("call_sam", "search", '{"query":"', index: 0)]),
         tool_chunk([{ index: 0, id: "call_dan", function: { arguments: 'sam"}' } }])],
        [["call_sam", "search", { query: "sam" }]],
        [{ kind: :id_changed, id: "call_sam" }]
      ],
      "14: headers with names at index 0 and 1 sharing one id are two calls, the id reported" => [
        [tool_chunk([call("call_x", "search", '{"query":"a"}', index: 0)]),
         tool_chunk([call("call_x", "lookup", '{"term":"b"}', index: 1)])],
        [["call_x", "search", { query: "a" }], ["call_x", "lookup", { term: "b" }]],
        [{ kind: :duplicate_id, id: "call_x", name: "lookup", index: 1 }]
      ],
      "14: the same id and name at another index continue a call whose arguments are not complete (Vertex)" => [
        [tool_chunk([call("A", "f", "", index: 1)]), tool_chunk([call("B", "g", "", index: 0)]),
         tool_chunk([call("A", "f", '{"a":', index: 0)]), tool_chunk([call("B", "g", '{"b":', index: 1)]),
         tool_chunk([call("A", "f", "1}", index: 0)]), tool_chunk([call("B", "g", "2}", index: 1)])],
        [["A", "f", { a: 1 }], ["B", "g", { b: 2 }]]
      ],
      "14: nameless fragments with the shared id go to the most recent call with it" => [
        [tool_chunk([call("call_x", "search", "", index: 0), call("call_x", "lookup", "", index: 1)]),
         tool_chunk([fragment(0, '{"query":"a"}')]),
         tool_chunk([{ id: "call_x", function: { arguments: '{"term":"b"}' } }])],
        [["call_x", "search", { query: "a" }], ["call_x", "lookup", { term: "b" }]],
        [{ kind: :duplicate_id, id: "call_x", name: "lookup", index: 1 }]
      ]
    }.each do |description, (chunks, calls, anomalies)|
      it(description) { expect_slotting([*chunks, finish_chunk], calls: calls, anomalies: anomalies || []) }
    end
  end

  it "usage: from any chunk, cache reads from either field, never added, nulls never erase" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(usage: :net_of_cache)
    stream_items(processor, [
                   { choices: [{ index: 0, delta: { content: "a" } }], usage: nil },
                   { choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
                     usage: { prompt_tokens: 100, completion_tokens: 9, prompt_cache_hit_tokens: 40,
                              prompt_tokens_details: { cached_tokens: 40 } } },
                   { choices: [], usage: nil }
                 ])
    expect([processor.prompt_tokens, processor.cache_read_tokens, processor.completion_tokens]).to eq([60, 40, 9])
  end

  it "usage: Groq's x_groq.usage on the finish chunk" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    stream_items(processor, [{ choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
                               x_groq: { usage: { prompt_tokens: 11, completion_tokens: 2 } } }])
    expect([processor.prompt_tokens, processor.completion_tokens]).to eq([11, 2])
  end

  it "in-band errors: each shape raises ProviderError with the provider's message" do
    {
      { error: { message: "Rate limit" } } => "Rate limit",
      { object: "error", message: "context too long", type: "BadRequestError", code: 400 } => "context too long",
      { choices: [{ index: 0, delta: {}, finish_reason: "error", error: { message: "upstream died" } }] } =>
        "upstream died"
    }.each do |chunk, text|
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect { processor.process_streamed_message(chunk) }.to raise_error(DiscourseAiStream::ProviderError, text)
    end
  end

  # Raw reads of these chunks' SSE bytes: whole, one byte at a time, and at
  # random places.
  def splittings(chunks)
    bytes = sse(chunks)
    random = Random.new(21)
    [[bytes], bytes.each_char.to_a, *Array.new(4) { random_reads(bytes, random) }]
  end

  # The items of one stream through process_streamed_message (one entry per
  # chunk, then finish), and through decode_chunk at each splitting (what
  # came before finish, and finish).
  def per_chunk_items(chunks, partial: false)
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
    [*chunks.map { |c| Array(processor.process_streamed_message(parsed(c))) }, Array(processor.finish)]
  end

  # Raw reads of `chunks` at each splitting (with no [DONE]): their items,
  # and then those of the rest of the stream and finish.
  def raw_runs_then(chunks, rest, partial: false)
    bytes = sse(chunks, done: false)
    random = Random.new(17)
    [[bytes], bytes.each_char.to_a, *Array.new(4) { random_reads(bytes, random) }].map do |reads|
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
      [reads.flat_map { |r| Array(processor.decode_chunk(r)) },
       [*Array(processor.decode_chunk(sse(rest))), *processor.finish]]
    end
  end

  describe "completion: tool_calls: [] completes the calls whose arguments are whole, right then" do
    header = ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"n":1}', index: 0),
                                      ChunkHelpers.call("b", "g", '{"m":', index: 1)])
    header[:choices][0][:delta][:content] = "\n"
    noise = { choices: [{ index: 0, delta: { content: "x", tool_calls: [] } }] }
    rest = [ChunkHelpers.tool_chunk([ChunkHelpers.fragment(1, "2}")]), ChunkHelpers.finish_chunk]

    [false, true].each do |partial|
      it "returns them from process_streamed_message, text first (partial_tool_calls: #{partial})" do
        steps = per_chunk_items([header, noise, *rest], partial: partial)
        expect(steps[0].grep(String)).to eq(["\n"])
        expect(steps[1].first).to eq("x")
        done = steps[1].drop(1)
        expect(done.map { |c| [c.id, c.parameters, c.partial?] }).to eq([["a", { n: 1 }, false]])
        # The call whose arguments are not whole yet stays open: vLLM's noise.
        expect(final_calls(steps[2..].flatten).map { |c| [c.id, c.parameters] }).to eq([["b", { m: 2 }]])
      end

      it "returns them from decode_chunk before finish at every splitting (partial_tool_calls: #{partial})" do
        raw_runs_then([header, noise], rest, partial: partial).each do |before, after|
          expect(before.grep(String)).to eq(%W[\n x])
          expect(final_calls(before).map { |c| [c.id, c.parameters] }).to eq([["a", { n: 1 }]])
          expect(final_calls(after).map { |c| [c.id, c.parameters] }).to eq([["b", { m: 2 }]])
        end
      end
    end

    # Discourse's endpoint spec "properly handles spaces in tools payload and
    # partial tool calls" (open_ai_spec.rb): its stream, read in its own
    # pieces, each read's items deduplicated by identity and copied as the
    # endpoint does.
    it "leaves no identical partial update before the complete call in Discourse's spaces stream" do
      # The stream's events with "|" where the spec splits its body.
      event = lambda do |arguments, key: "arguments", choices: "choices"|
        %(data: {"#{choices}": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": ) +
          %({"#{key}": #{arguments}}}]}}]}\n\n)
      end
      opening = '{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,' \
                '"id":"func_id","type":"function","function":{"name":"go|ogle","arg|uments":""}}]}}]}'
      body = +"data: #{opening}\n\n"
      body << event.call(JSON.generate('{"')) << event.call(JSON.generate("query"), choices: "ch|oices")
      body << event.call(JSON.generate('":"')) << event.call(JSON.generate("Ad")) << event.call('"a|b"')
      body << event.call(JSON.generate("as")) << event.call('|"| "') << event.call(JSON.generate("9"))
      body << event.call(JSON.generate(".")) << event.call(JSON.generate("1"), key: "argume|nts")
      body << event.call(JSON.generate('"}'))
      body << %(data: {"choices": [{"index": 0, "delta": {"tool_calls": []}}]}\n\ndata: [D|ONE])
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true)
      partials = body.split("|").flat_map do |piece|
        Array(processor.decode_chunk(piece.b)).compact.uniq(&:object_id).map(&:dup)
      end
      partials.concat(Array(processor.finish).map(&:dup))
      expect(partials.map { |p| p.parameters[:query] }).to eq(["Ad", "Adabas", "Adabas 9.", "Adabas 9.1"])
      expect([partials.last.id, partials.last.name, partials.last.partial?]).to eq(["func_id", "google", false])
    end
  end

  describe "content: a whole message echoed after the stream" do
    echo = { id: "x", object: "chat.completion",
             choices: [{ index: 0, finish_reason: "tool_calls",
                         message: { role: "assistant", content: "Checking.",
                                    tool_calls: [ChunkHelpers.call("a", "f", '{"n":1}')] } }],
             usage: { prompt_tokens: 30, completion_tokens: 12 } }
    stream = [ChunkHelpers.text_chunk("Checking."),
              ChunkHelpers.tool_chunk([ChunkHelpers.call("a", "f", '{"n":1}', index: 0)]),
              ChunkHelpers.finish_chunk, echo, { choices: [] }]

    [false, true].each do |partial|
      it "emits nothing twice, takes its usage and reports it (partial_tool_calls: #{partial})" do
        hashed = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
        runs = [[stream_items(hashed, stream.map { |c| parsed(c) }), hashed]]
        splittings(stream).each do |reads|
          processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
          runs << [decoded_items(processor, reads), processor]
        end
        runs.each do |items, processor|
          expect(items.grep(String)).to eq(["Checking."])
          expect(final_calls(items).map { |c| [c.id, c.parameters] }).to eq([["a", { n: 1 }]])
          expect([processor.prompt_tokens, processor.completion_tokens]).to eq([30, 12])
          expect(processor.anomalies.map { |a| a[:kind] }).to eq([:echoed_message])
        end
      end
    end

    it "reads a message in a streamed choice when nothing was streamed yet" do
      whole = { object: "chat.completion",
                choices: [{ index: 0, message: { content: "Whole" }, finish_reason: "stop" }] }
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect(stream_items(processor, [parsed(whole)])).to eq(["Whole"])
      splittings([whole]).each do |reads|
        expect(decoded_items(DiscourseAiStream::OpenAiMessageProcessor.new, reads)).to eq(["Whole"])
      end
      expect(processor.anomalies.map { |a| a[:kind] }).not_to include(:echoed_message)
    end
  end

  describe "usage: inside the choice, DashScope's cache writes, running totals" do
    {
      "Moonshot Kimi: inside the finish chunk's choice only" => [
        [ChunkHelpers.text_chunk("a"),
         { choices: [{ index: 0, delta: {}, finish_reason: "stop",
                       usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 } }] }],
        [12, 5, 0, 0]
      ],
      "DashScope: prompt_tokens_details.cache_creation_input_tokens are cache writes" => [
        [ChunkHelpers.text_chunk("a"), ChunkHelpers.finish_chunk("stop"),
         ChunkHelpers.usage_chunk(prompt: 100, completion: 3,
                                  prompt_tokens_details: { cached_tokens: 20, cache_creation_input_tokens: 30 })],
        [50, 3, 20, 30]
      ],
      "vLLM continuous_usage_stats: a running total on every chunk, the last wins" => [
        [*[1, 2, 3].map do |n|
           ChunkHelpers.text_chunk("t#{n}").merge(usage: { prompt_tokens: 9, completion_tokens: n })
         end,
         ChunkHelpers.finish_chunk("stop").merge(usage: { prompt_tokens: 9, completion_tokens: 4 })],
        [9, 4, 0, 0]
      ]
    }.each do |name, (chunks, expected)|
      it "#{name}, on the Hash path and the raw path" do
        hashed = DiscourseAiStream::OpenAiMessageProcessor.new(usage: :net_of_cache)
        stream_items(hashed, chunks.map { |c| parsed(c) })
        processors = [hashed] + splittings(chunks).map do |reads|
          DiscourseAiStream::OpenAiMessageProcessor.new(usage: :net_of_cache).tap { |p| decoded_items(p, reads) }
        end
        processors.each do |p|
          expect([p.prompt_tokens, p.completion_tokens, p.cache_read_tokens, p.cache_write_tokens]).to eq(expected)
          expect(p.anomalies).to eq([])
        end
      end
    end
  end

  it "in-band errors: finish_reason \"error\" with only a native_finish_reason names it" do
    error = { choices: [{ index: 0, delta: {}, finish_reason: "error",
                          native_finish_reason: "MALFORMED_FUNCTION_CALL" }] }
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    expect(processor.process_streamed_message(parsed(text_chunk("a")))).to eq("a")
    expect { processor.process_streamed_message(parsed(error)) }
      .to raise_error(DiscourseAiStream::ProviderError, /finish_reason "error".*MALFORMED_FUNCTION_CALL/)
    splittings([text_chunk("a"), error]).each do |reads|
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect { reads.each { |r| processor.decode_chunk(r) } }
        .to raise_error(DiscourseAiStream::ProviderError, /MALFORMED_FUNCTION_CALL/)
    end
  end

  describe "SSE framing and lost input (raw path at several splittings)" do
    # Whole, one byte at a time, the given pieces and random reads: every
    # splitting gives the same items and anomalies. Errors are collected,
    # not raised: [items, errors, anomaly kinds].
    def at_every_splitting(bytes, pieces: [], **options)
      random = Random.new(7)
      splittings = [[bytes], bytes.chars, pieces, *Array.new(4) { random_reads(bytes, random) }].reject(&:empty?)
      results = splittings.map { |reads| read_collecting(reads, **options) }
      comparable = results.map { |items, errors, anomalies| [items, errors.map(&:message), anomalies] }
      comparable.each_cons(2) { |a, b| expect(b).to eq(a) }
      items, errors, anomalies = results.first
      [items, errors, anomalies.map { |a| a[:kind] }]
    end

    def read_collecting(reads, **options)
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(**options)
      items = []
      errors = []
      [*reads.map { |r| -> { processor.decode_chunk(r) } }, -> { processor.finish }].each do |step|
        items.concat(step.call)
      rescue DiscourseAiStream::Error => e
        items.concat(e.items)
        errors << e
      end
      # Partial updates may come in other numbers; the rest may not differ.
      finals = items.reject { |i| i.respond_to?(:partial?) && i.partial? }
      [finals.map { |i| i.is_a?(String) ? i : [i.id, i.name, i.parameters] }, errors, processor.anomalies]
    end

    # Discourse's open_ai_spec "recovers from malformed streamed payloads":
    # the second event lacks its closing brace; its reads split as there.
    malformed = [
      "d", "a", "t", "a", ":", " ", "{", "\"choices\":[{\"delta\":{\"content\":\"test,\"}}]}\n\n" \
                                         "data: {\"choices\":[{\"delta\":{\"content\":\"test",
      "1", " ", ",\"}}]\n\ndata: {\"choices\":[{\"delta\":",
      "{\"content\":\"test2 ,\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"test3,\"}}]",
      "}\n\ndata: {\"choices\":[{", "\"", "d", "elta\":{\"content\":\"test4\"}}]", "}\n\ndata: [D", "ONE]"
    ]

    it "an unreadable event is skipped and reported, and the text on both sides comes out" do
      items, errors, kinds = at_every_splitting(malformed.join, pieces: malformed)
      expect(items.join).to eq("test,test2 ,test3,test4")
      expect(errors).to eq([])
      expect(kinds).to eq(%i[unreadable_event])
    end

    it "an unreadable event between calls: both calls come out, and strict: true raises it instead" do
      before = sse([tool_chunk([call("a", "f", '{"x":1}', index: 0)])], done: false)
      after = sse([tool_chunk([call("b", "g", "{}", index: 1)], finish: "tool_calls")])
      bytes = "#{before}data: {\"choices\": [oops]}\n\n#{after}"
      items, errors, kinds = at_every_splitting(bytes)
      expect(items).to eq([["a", "f", { x: 1 }], ["b", "g", {}]])
      expect([errors, kinds]).to eq([[], %i[unreadable_event]])
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(strict: true)
      expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::StreamError, /oops/) { |e|
        expect(ids_in(e.items)).to eq(%w[a b])
      }
    end

    # Discourse's endpoint_compliance mock glues `data: [DONE]` onto the
    # last event; here that event carries the end of the arguments.
    weather = [ChunkHelpers.tool_chunk([ChunkHelpers.call("tool_0", "get_weather", "", index: 0)]),
               ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, '{"location":"Sydney"')]),
               ChunkHelpers.tool_chunk([ChunkHelpers.fragment(0, ',"unit":"c"}')], finish: "tool_calls")]

    it "JSON followed by data: on the same line ends the event; the rest is the next line" do
      bytes = "#{sse(weather, done: false).delete_suffix("\n\n")}data: [DONE]"
      [false, true].each do |partial|
        items, errors, kinds = at_every_splitting(bytes, partial_tool_calls: partial)
        expect(items.last).to eq(["tool_0", "get_weather", { location: "Sydney", unit: "c" }])
        expect([errors, kinds]).to eq([[], %i[glued_event]])
      end
    end

    # Discourse's samba_nova_spec stream indents its first data: line.
    it "leading spaces before data: are read as a data line" do
      bytes = "    data: #{JSON.generate(text_chunk("I am a bot"))}\n\n" \
              "data: #{JSON.generate(usage_chunk(prompt: 21, completion: 41))}\n\ndata: [DONE]\n"
      items, errors, kinds = at_every_splitting(bytes)
      expect([items, errors, kinds]).to eq([["I am a bot"], [], []])
    end

    it "a call open when an event was lost is never repaired: ToolArgumentsError names the lost event" do
      lost = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":" \
             "{\"arguments\":\",\\\"unit\\\":\\\"c\\\"}\"}}]}}]\n\n"
      bytes = sse(weather.first(2), done: false) + lost + sse([finish_chunk])
      [false, true].each do |partial|
        _items, errors, kinds = at_every_splitting(bytes, partial_tool_calls: partial)
        expect(errors.map(&:class)).to eq([DiscourseAiStream::ToolArgumentsError])
        expect(errors.first.tool_id).to eq("tool_0")
        expect(errors.first.raw_arguments).to eq('{"location":"Sydney"')
        expect(errors.first.message).to match(/lost.*unreadable event \(invalid_json\): \{"choices"/)
        expect(kinds).to eq(%i[unreadable_event invalid_arguments])
      end
    end
  end

  describe "arguments: never {} after fragments that matched no call were dropped while the call was open" do
    # call_a's arguments are complete, so the fragment with an unknown id at
    # its index belongs to no call (rule 8): dropped while call_w is open
    # with empty arguments.
    chunks = [ChunkHelpers.tool_chunk([ChunkHelpers.call("call_a", "lookup", '{"a":1}', index: 0)]),
              ChunkHelpers.tool_chunk([ChunkHelpers.call("call_w", "weather", "", index: 1)]),
              ChunkHelpers.tool_chunk([{ index: 0, id: "zz", function: { arguments: '{"city":"Oslo"}' } }]),
              ChunkHelpers.finish_chunk]

    [false, true].each do |partial|
      it "both paths raise ToolArgumentsError naming the dropped fragment (partial_tool_calls: #{partial})" do
        processor = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
        chunks[0..2].each { |chunk| processor.process_streamed_message(parsed(chunk)) }
        expect { processor.process_streamed_message(parsed(chunks[3])) }
          .to raise_error(DiscourseAiStream::ToolArgumentsError, /empty.*\{"city":"Oslo"\}/) { |e|
            expect(e.tool_id).to eq("call_w")
          }
        raw = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: partial)
        expect { raw.decode_chunk(sse(chunks)) }.to raise_error(DiscourseAiStream::ToolArgumentsError, /Oslo/)
        expect(raw.anomalies.map { |a| a[:kind] }).to eq(%i[orphan_fragment invalid_arguments])
      end
    end

    it "calls whose arguments parse are unaffected" do
      with_args = [*chunks[0..2], tool_chunk([fragment(1, "{}")]), chunks[3]]
      both_paths(with_args).each { |items| expect(named_params(items)).to eq([["lookup", { a: 1 }], ["weather", {}]]) }
    end
  end
end
