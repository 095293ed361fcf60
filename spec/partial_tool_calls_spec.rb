# frozen_string_literal: true

require_relative "support/chunks"
require_relative "support/sse_fixtures"

# partial_tool_calls: true (docs/discourse-contract.md, "Partial tool
# calls"; rule 24). The expected visible states below are written by hand from the
# contract: a key appears when its value starts, a string shows as its
# prefix, containers show their completed elements plus the one in progress,
# numbers and literals appear only once complete.
#
# Chunks are the builders' symbol-keyed Hashes, the shape JSON.parse(...,
# symbolize_names: true) gives (decode_chunk_spec.rb proves the real parse);
# skipping the JSON round trip keeps a DISCOURSE_AI_STREAM_GC_STRESS run of
# this file within reach.
RSpec.describe "OpenAiMessageProcessor with partial_tool_calls: true" do
  def new_processor
    DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, usage: :current)
  end

  def deep_copy(value)
    Marshal.load(Marshal.dump(value))
  end

  # The header of call `index`, then one chunk per fragment, through the
  # Hash path. Returns, per fragment, what its call showed at that moment
  # (parameters change in place later): nil, or a copy of the ToolCall's
  # parameters; and the ToolCalls returned, in order.
  def stream(processor, fragments, id: "call_p1", name: "tool", index: 0)
    header = processor.process_streamed_message(tool_chunk([call(id, name, "", index: index)]))
    expect(header).to be_nil
    returned = []
    visible = fragments.map do |text|
      result = processor.process_streamed_message(tool_chunk([fragment(index, text)]))
      next nil if result.nil?

      expect(result).to be_a(DiscourseAiStream::ToolCall)
      expect(result.partial?).to be(true)
      returned << result
      deep_copy(result.parameters)
    end
    [visible, returned]
  end

  # Only what each fragment showed.
  def shown(processor, fragments, **call)
    stream(processor, fragments, **call).first
  end

  def finish_turn(processor)
    processor.process_streamed_message(finish_chunk)
  end

  # Fragment by fragment: [fragment, what its call showed].
  def steps(fragments, visible)
    fragments.zip(visible)
  end

  describe "object identity and partial? transitions" do
    it "returns the SAME ToolCall on every progress item and as the final item, partial? true then false" do
      processor = new_processor
      visible, returned = stream(processor, ['{"q": "ru', "by", ' gems"', "}"])
      expect(visible).to eq([{ q: "ru" }, { q: "ruby" }, { q: "ruby gems" }, nil])
      tool_call = returned.first
      expect(returned).to all(be(tool_call))
      expect(tool_call.partial?).to be(true)
      final = finish_turn(processor)
      expect(final).to be(tool_call)
      expect(final.partial?).to be(false)
      expect(final.parameters).to eq({ q: "ruby gems" })
      expect([final.id, final.name]).to eq(%w[call_p1 tool])
      expect(processor.finish).to eq([])
    end

    it "gives the same object from decode_chunk, kept once per raw chunk at its first position" do
      bytes = sse([text_chunk("Looking."), tool_chunk([call("call_r1", "search", "", index: 0)]),
                   tool_chunk([fragment(0, '{"q": "a')]), tool_chunk([fragment(0, 'b"}')]),
                   tool_chunk([call("call_r2", "fetch", '{"url": "u"}', index: 1)]), finish_chunk])
      whole = new_processor
      items = whole.decode_chunk(bytes) + whole.finish
      expect(summarize(items))
        .to eq(["Looking.", done_call("call_r1", "search", { q: "ab" }), done_call("call_r2", "fetch", { url: "u" })])

      bytewise = new_processor
      per_read = reads_of(bytes, 1).map { |read| bytewise.decode_chunk(read) }
      calls = per_read.flatten.grep(DiscourseAiStream::ToolCall)
      expect(calls.map(&:id).uniq).to eq(%w[call_r1 call_r2])
      expect(calls.group_by(&:id).values).to all(satisfy { |same| same.all? { |c| c.equal?(same.first) } })
      expect(per_read.map { |read| read.grep(DiscourseAiStream::ToolCall).map(&:object_id) })
        .to all(satisfy { |ids| ids.uniq == ids })
      expect(calls.map(&:partial?).uniq).to eq([false])
    end
  end

  describe "when a progress item comes" do
    it "returns nothing for a fragment that adds only whitespace, half a key or half a number" do
      processor = new_processor
      fragments = ['{"a": "x"', "  ", "\n\t ", ', "ke', 'y"', ":", " ", "1", "2", ".", "5", "e", "1", ",", " "]
      visible = shown(processor, fragments)
      expect(steps(fragments, visible)).to eq(steps(fragments, [{ a: "x" }, *[nil] * 12, { a: "x", key: 125.0 }, nil]))
    end

    it "returns nothing for a fragment that only closes a string, an array or a nested object" do
      # Closing changes nothing visible: the value already shows in full.
      processor = new_processor
      fragments = ['{"s": "abc', '"', ', "l": ["x", "y', '"', "]", ', "o": {"k": "v', '"', "}", ', "t": 1}']
      visible = shown(processor, fragments)
      with_o = { s: "abc", l: %w[x y], o: { k: "v" } }
      expected = [
        { s: "abc" }, nil,
        { s: "abc", l: %w[x y] }, nil, nil,
        with_o, nil, nil,
        with_o.merge(t: 1)
      ]
      expect(steps(fragments, visible)).to eq(steps(fragments, expected))
      expect(processor.anomalies).to be_empty
    end

    it "always returns the final item: at finish_reason, at finish, and for a call without arguments" do
      at_reason = new_processor
      shown(at_reason, ['{"a": 1}'])
      expect(finish_turn(at_reason)).to have_attributes(partial?: false, parameters: { a: 1 })

      at_finish = new_processor
      shown(at_finish, ['{"a": 1}'])
      expect(at_finish.finish).to contain_exactly(have_attributes(partial?: false, parameters: { a: 1 }))

      no_arguments = new_processor
      expect(shown(no_arguments, [""])).to eq([nil])
      final = finish_turn(no_arguments)
      expect(final).to have_attributes(id: "call_p1", partial?: false, parameters: {})
    end

    it "returns only the final item when the last fragment comes with the finish_reason" do
      processor = new_processor
      _, returned = stream(processor, ['{"a": "x'])
      result = processor.process_streamed_message(tool_chunk([fragment(0, 'yz"}')], finish: "tool_calls"))
      expect(result).to be(returned.first)
      expect(result).to have_attributes(partial?: false, parameters: { a: "xyz" })
    end
  end

  describe "several calls" do
    it "follows interleaved calls, each its own object and parameters" do
      processor = new_processor
      headers = tool_chunk([call("call_i0", "search", "", index: 0), call("call_i1", "fetch", "", index: 1)])
      expect(processor.process_streamed_message(headers)).to be_nil
      fragments = [[0, '{"q": "ru'], [1, '{"url": "h'], [0, 'st"'], [1, 'ttp"}'], [0, "}"]]
      results = fragments.map do |index, text|
        result = processor.process_streamed_message(tool_chunk([fragment(index, text)]))
        result && [result, deep_copy(result.parameters)]
      end
      search = results[0][0]
      fetch = results[1][0]
      expected = [
        ["call_i0", { q: "ru" }], ["call_i1", { url: "h" }], ["call_i0", { q: "rust" }],
        ["call_i1", { url: "http" }], nil
      ]
      expect(results.map { |r| r && [r[0].id, r[1]] }).to eq(expected)
      expect(results[2][0]).to be(search)
      expect(results[3][0]).to be(fetch)
      finals = processor.process_streamed_message(finish_chunk)
      expect(finals).to match([be(search), be(fetch)])
      expect(finals.map { |c| [c.partial?, c.parameters] }).to eq([[false, { q: "rust" }], [false, { url: "http" }]])
    end

    it "returns an Array when one chunk moves several calls, and completes them together" do
      processor = new_processor
      both = tool_chunk([call("call_m0", "get_weather", '{"city": "Paris"}', index: 0),
                         call("call_m1", "get_weather", '{"city": "Lyon"}', index: 1)])
      progress = processor.process_streamed_message(both)
      expect(progress.map { |c| [c.id, c.partial?, c.parameters] })
        .to eq([["call_m0", true, { city: "Paris" }], ["call_m1", true, { city: "Lyon" }]])
      finals = processor.process_streamed_message(finish_chunk)
      expect(finals).to match([be(progress[0]), be(progress[1])])
      expect(finals.map(&:partial?)).to eq([false, false])
    end

    it "returns only final items for complete calls in a chunk that also carries finish_reason (Mistral)" do
      processor = new_processor
      both = tool_chunk([call("call_m0", "a", '{"x": 1}', index: 0), call("call_m1", "b", '{"y": 2}', index: 1)],
                        finish: "tool_calls")
      finals = processor.process_streamed_message(both)
      expect(finals.map { |c| [c.id, c.partial?, c.parameters] })
        .to eq([["call_m0", false, { x: 1 }], ["call_m1", false, { y: 2 }]])
    end

    it "shows a call that arrives complete in one fragment, then completes that same object" do
      processor = new_processor
      whole = processor.process_streamed_message(tool_chunk([call("call_w", "f", '{"k": [1, "v"]}', index: 0)]))
      expect(whole).to have_attributes(id: "call_w", partial?: true, parameters: { k: [1, "v"] })
      expect(finish_turn(processor)).to be(whole).and(have_attributes(partial?: false, parameters: { k: [1, "v"] }))
    end

    # Rule 11: the server's id replaces a generated one, also after partial
    # updates of an object that has it (Discourse's ToolCall has no id=).
    it "completes a call whose server id came after its partial updates as a new ToolCall under that id, said" do
      processor = new_processor
      first = processor.process_streamed_message(tool_chunk([{ index: 0,
                                                               function: { name: "f", arguments: '{"q":"ru' } }]))
      expect(first).to have_attributes(partial?: true, parameters: { q: "ru" })
      processor.process_streamed_message(tool_chunk([{ index: 0, id: "call_srv", function: { arguments: 'by"}' } }]))
      final = finish_turn(processor)
      expect(final).to have_attributes(id: "call_srv", partial?: false, parameters: { q: "ruby" })
      expect(final).not_to be(first)
      expect(first.id).to start_with("call_das_")
      expect(processor.anomalies.map { |a| a[:kind] }).to eq(%i[generated_id id_changed])
    end

    it "completes the previous call when a new call takes its index (Ollama), with the new one's progress" do
      processor = new_processor
      first = processor.process_streamed_message(tool_chunk([call("call_o1", "f", '{"a": "x"}', index: 0)]))
      both = processor.process_streamed_message(tool_chunk([call("call_o2", "f", '{"a": "y', index: 0)]))
      expect(both.map { |c| [c.id, c.partial?, c.parameters] })
        .to eq([["call_o1", false, { a: "x" }], ["call_o2", true, { a: "y" }]])
      expect(both.first).to be(first)
    end
  end

  describe "visible parameters" do
    it "shows a flat object of strings as the stock tracker does: keys at their opening quote, values as prefixes" do
      processor = new_processor
      fragments = ['{"', "query", '": ', '"', "ruby ", "gc", ' tuning", "cat', 'egory": "', "de", 'v"',
                   ', "note": "say \\', '"hi\\', '"\\n"', "}"]
      tuned = { query: "ruby gc tuning" }
      dev = tuned.merge(category: "dev")
      expected = [
        nil, nil, nil,
        { query: "" }, { query: "ruby " }, { query: "ruby gc" }, tuned,
        tuned.merge(category: ""), tuned.merge(category: "de"), dev,
        dev.merge(note: "say "), dev.merge(note: 'say "hi'), dev.merge(note: "say \"hi\"\n"),
        nil
      ]
      expect(steps(fragments, shown(processor, fragments))).to eq(steps(fragments, expected))
      expect(finish_turn(processor).parameters).to eq(dev.merge(note: "say \"hi\"\n"))
    end

    it "shows arrays with their completed elements plus the one in progress, and nested objects likewise" do
      processor = new_processor
      fragments = ['{"tags": [', '"a", "b', 'c"]', ', "meta": {', '"owner": {"name": "A', 'l"}, "n": 2', "}",
                   ', "list": [{"k": 1', "}, [tr", "ue, nu", "ll]]}"]
      tags = { tags: %w[a bc] }
      meta = tags.merge(meta: { owner: { name: "Al" }, n: 2 })
      expected = [
        { tags: [] }, { tags: %w[a b] }, tags, tags.merge(meta: {}),
        tags.merge(meta: { owner: { name: "A" } }), tags.merge(meta: { owner: { name: "Al" } }), meta,
        meta.merge(list: [{}]), meta.merge(list: [{ k: 1 }, []]), meta.merge(list: [{ k: 1 }, [true]]),
        meta.merge(list: [{ k: 1 }, [true, nil]])
      ]
      expect(steps(fragments, shown(processor, fragments))).to eq(steps(fragments, expected))
      expect(finish_turn(processor).parameters).to eq(meta.merge(list: [{ k: 1 }, [true, nil]]))
    end

    it "shows numbers, true, false and null only once complete" do
      processor = new_processor
      fragments = ['{"n": -1', "2.5e", "3", ', "t": tr', "ue", ', "f": f', 'alse, "z": nul', "l",
                   ', "big": 123456789012345678901234567890', "}"]
      n = { n: -12_500.0 }
      nt = n.merge(t: true)
      ntfz = nt.merge(f: false, z: nil)
      expected = [nil, nil, nil, n, nt, nil, nt.merge(f: false), ntfz, nil,
                  ntfz.merge(big: 123_456_789_012_345_678_901_234_567_890)]
      expect(steps(fragments, shown(processor, fragments))).to eq(steps(fragments, expected))
    end
  end

  describe "unicode split across fragments and reads" do
    it "decodes a \\uXXXX escape and a surrogate pair split inside the escape (Hash path)" do
      processor = new_processor
      fragments = ['{"a": "x', "\\u0", "0e", "9", "y", "\\ud8", "3d\\u", "de", "00", " ", "\\ud83d", "\\ude80", '"}']
      expected = [{ a: "x" }, nil, nil, { a: "xé" }, { a: "xéy" }, nil, nil, nil, { a: "xéy😀" },
                  { a: "xéy😀 " }, nil, { a: "xéy😀 🚀" }, nil]
      visible = shown(processor, fragments)
      # The last fragment only closes; what that returns is the close-only example's business.
      expect(steps(fragments, visible[0..-2])).to eq(steps(fragments, expected[0..-2]))
      expect(finish_turn(processor).parameters).to eq({ a: "xéy😀 🚀" })
    end

    it "decodes multibyte characters given one character per fragment (Hash path)" do
      processor = new_processor
      text = "日本語 😀 é"
      fragments = ['{"t": "', *text.chars, '"}']
      visible = shown(processor, fragments)
      expected = [{ t: "" }, *(1..text.length).map { |n| { t: text[0, n] } }]
      expect(visible[0..-2]).to eq(expected) # the last fragment only closes, as above
      expect(finish_turn(processor).parameters).to eq({ t: text })
    end

    it "decodes multibyte characters and escapes split across reads (raw path)" do
      arguments = ['{"t": "caf', 'é ☕ \\u00', 'e9 \\ud83d', '\\ude00"}']
      bytes = sse([tool_chunk([call("call_u", "note", "", index: 0)]),
                   *arguments.map { |a| tool_chunk([fragment(0, a)]) }, finish_chunk])
      processor = new_processor
      states = reads_of(bytes, 1).filter_map do |read|
        call = processor.decode_chunk(read).grep(DiscourseAiStream::ToolCall).first
        call && [call.partial?, deep_copy(call.parameters)]
      end
      final = "café ☕ é 😀"
      expect(states.last).to eq([false, { t: final }])
      expect(states[0..-2].map { |_, params| params[:t] }).to eq(["caf", "café ☕ ", "café ☕ é ", final])
      expect(states.map { |_, params| params[:t] }).to all(be_valid_encoding)
    end
  end

  describe "broken arguments" do
    it "stops updates when the arguments break mid-stream, then raises ToolArgumentsError at completion" do
      processor = new_processor
      fragments = ['{"a": "x"', ' "b": "yy"', ', "c": "zzz"}']
      expect(shown(processor, fragments)).to eq([{ a: "x" }, nil, nil])
      broken = processor.anomalies.select { |a| a[:kind] == :partial_arguments_broken }
      expect(broken).to contain_exactly(a_hash_including(id: "call_p1", name: "tool"))
      expect { finish_turn(processor) }.to raise_error(DiscourseAiStream::ToolArgumentsError) { |e|
        expect(e).to be_a(JSON::ParserError)
        expect([e.tool_id, e.tool_name, e.raw_arguments]).to eq(["call_p1", "tool", fragments.join])
      }
    end

    it "stops updates for arguments that are not an object, and the final parse repairs them" do
      processor = new_processor
      expect(shown(processor, ['"city": "Os', 'lo"}'])).to eq([nil, nil])
      final = finish_turn(processor)
      expect(final).to have_attributes(partial?: false, parameters: { city: "Oslo" })
      expect(anomaly_kinds(processor)).to eq(%i[partial_arguments_broken repaired_arguments])
    end

    it "repairs a missing closing brace at the end, after normal updates" do
      processor = new_processor
      expect(shown(processor, ['{"a": "x', 'y"'])).to eq([{ a: "x" }, { a: "xy" }])
      expect(processor.finish).to contain_exactly(have_attributes(partial?: false, parameters: { a: "xy" }))
      expect(anomaly_kinds(processor)).to eq(%i[truncated repaired_arguments])
    end
  end

  describe "updates in place" do
    it "grows the same String inside the same parameters Hash while a value streams" do
      processor = new_processor
      processor.process_streamed_message(tool_chunk([call("call_g", "write", "", index: 0)]))
      # The objects each progress item held, taken when it was returned.
      held = ['{"body": "a', "bc", "def", '", "list": ["x', "yz", "w"].map do |text|
        parameters = processor.process_streamed_message(tool_chunk([fragment(0, text)])).parameters
        [parameters, parameters[:body], parameters[:list]&.first]
      end
      hashes, bodies, items = held.transpose
      expect(hashes).to all(be(hashes.first))
      expect(bodies).to all(be(bodies.first))
      expect(items.compact.size).to eq(3)
      expect(items.compact).to all(be(items.last))
      expect(bodies.first).to eq("abcdef")
      expect(items.last).to eq("xyzw")
    end

    it "returns the same String object on every progress item of a long value" do
      processor = new_processor
      processor.process_streamed_message(tool_chunk([call("call_long", "write", '{"body": "', index: 0)]))
      seen = Array.new(60) do |i|
        processor.process_streamed_message(tool_chunk([fragment(0, "chunk#{i} ")])).parameters[:body]
      end
      expect(seen).to all(be(seen.first))
      expect(seen.first).to eq(Array.new(60) { |i| "chunk#{i} " }.join)
    end
  end
end
