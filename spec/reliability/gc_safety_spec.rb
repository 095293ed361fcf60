# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"
require_relative "../support/stressed_processor"

# Every path where the native code creates or holds Ruby objects. Each
# processor call runs with GC.stress on (a full collection at every
# allocation, so an object the native code holds without marking it is freed
# at once and the example fails or crashes), and collections and compactions
# run between steps. The rest of each example runs without stress, which
# keeps the file fast enough for every rspec run; bin/test also runs the
# whole file under DISCOURSE_AI_STREAM_GC_STRESS=1.
RSpec.describe "GC safety" do
  def stressed(processor)
    StressedProcessor.new(processor)
  end

  def churn
    GC.start(full_mark: true, immediate_sweep: true)
    GC.compact if GC.respond_to?(:compact)
  end

  it "keeps partial ToolCalls, their parameters and open containers alive between calls" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true))
    first = processor.process_streamed_message(tool_chunk([call("p", "f", '{"a":"x', index: 0)]))
    churn
    processor.process_streamed_message(tool_chunk([fragment(0, 'y","list":[{"k":"v')]))
    churn
    processor.process_streamed_message(tool_chunk([fragment(0, 'w"},2],"n":{"m":"z')]))
    churn
    last = processor.process_streamed_message(tool_chunk([fragment(0, '"}}')], finish: "stop"))
    expect(last).to equal(first)
    expect(last.parameters).to eq(a: "xy", list: [{ k: "vw" }, 2], n: { m: "z" })
    expect(last.partial?).to be(false)
  end

  it "keeps the items of a raw read and of errors alive" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true))
    items = processor.decode_chunk(sse([text_chunk("a"), tool_chunk([call("r", "f", '{"q":"', index: 0)])],
                                       done: false))
    churn
    expect(items.first).to eq("a")
    error = begin
      processor.decode_chunk(sse([text_chunk("b"), { error: { message: "no", detail: [1, { x: "y" }] } }]))
    rescue DiscourseAiStream::ProviderError => e
      e
    end
    churn
    expect(error.items).to eq(["b"])
    expect(error.payload).to eq(message: "no", detail: [1, { x: "y" }])
  end

  it "survives collections inside ToolCall construction and anomaly hooks" do
    collecting = Class.new(DiscourseAiStream::ToolCall) do
      def initialize(**kwargs)
        GC.start
        super
      end
    end
    seen = []
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(
                           partial_tool_calls: true, tool_call_class: collecting, on_anomaly: lambda { |a|
                             GC.start
                             seen << a
                           }
                         ))
    items = stream_items(processor, [tool_chunk([{ index: 0, function: { name: "f", arguments: '{"z":[1,' } },
                                                 call("b", "g", '{"s":"t"}', index: 1)]),
                                     tool_chunk([fragment(0, "2]}")], finish: "tool_calls")])
    churn
    expect(items.uniq.map(&:parameters)).to eq([{ z: [1, 2] }, { s: "t" }])
    expect(seen.map { |a| a[:kind] }).to eq([:generated_id])
  end

  it "keeps the items an interrupted read holds alive until the next read returns them" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(on_anomaly: ->(_) { raise Interrupt }))
    nameless = { index: 0, function: { name: "f", arguments: '{"a":"b"}' } }
    chunk = tool_chunk([nameless, call("c", "g", "{}", index: 1)], finish: "tool_calls")
    expect { processor.process_streamed_message(chunk) }.to raise_error(Interrupt)
    churn
    expect(processor.finish.map { |c| [c.name, c.parameters] }).to eq([["f", { a: "b" }], ["g", {}]])
  end

  it "tells ObjectSpace.memsize_of the native memory it holds" do
    require "objspace"
    [DiscourseAiStream::OpenAiMessageProcessor, DiscourseAiStream::OpenAiResponsesMessageProcessor].each do |klass|
      processor = klass.new
      expect(ObjectSpace.memsize_of(processor)).to be < 100_000
    end
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    # 20 MB of arguments buffered: the call stays open until the stream ends.
    processor.process_streamed_message(tool_chunk([call("big", "f", JSON.generate(blob: "x" * 20_000_000), index: 0)]))
    expect(ObjectSpace.memsize_of(processor)).to be > 20_000_000
    expect(processor.finish.first.parameters[:blob].size).to eq(20_000_000)
    processor.process_streamed_message(text_chunk("next stream"))
    expect(ObjectSpace.memsize_of(processor)).to be < 100_000
  end

  it "reads Hashes whose values are collected right after" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
    3.times do |i|
      chunk = parsed(tool_chunk([call("h#{i}", "f", JSON.generate(v: "x" * 50), index: i)]))
      processor.process_streamed_message(chunk)
      churn
    end
    expect(processor.finish.map(&:id)).to eq(%w[h0 h1 h2])
  end

  it "raises ToolArgumentsError with its data intact" do
    processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
    processor.process_streamed_message(tool_chunk([call("ok", "f", "{}", index: 0), call("bad", "g", "{[", index: 1)]))
    error = begin
      processor.finish
    rescue DiscourseAiStream::ToolArgumentsError => e
      e
    end
    churn
    expect([error.tool_id, error.raw_arguments, error.items.map(&:id)]).to eq(["bad", "{[", ["ok"]])
  end

  # More paths, each processor call under GC.stress (StressedProcessor), in
  # every rspec run and in bin/test's GC-stress step. Stressing the whole
  # example as well (DISCOURSE_AI_STREAM_GC_STRESS=1) would only add rspec's
  # own allocations and multiply the time, so these opt out of it: the native
  # code, and the Ruby code it calls back (ToolCall classes, hooks), runs
  # stressed either way.
  describe "each processor call stressed", gc_stress: false do
    def partial
      stressed(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true))
    end

    it "interleaved partial calls: nested containers, escapes and multibyte characters split anywhere" do
      processor = partial
      args = { "a" => '{"t":"h\\u00e9\\ud83d\\ude00 é😀","l":[1,{"k":["x",', "b" => '{"n":{"m":[true,null,"v' }
      cuts = { "a" => [3, 12, 17, 24, 30], "b" => [2, 9, 15] }
      pieces = args.to_h { |id, text| [id, ([0] + cuts[id] + [text.size]).each_cons(2).map { |x, y| text[x...y] }] }
      seen = [processor.process_streamed_message(tool_chunk([call("a", "f", pieces["a"].shift, index: 0),
                                                             call("b", "g", pieces["b"].shift, index: 1)]))]
      until pieces.values.all?(&:empty?)
        seen << processor.process_streamed_message(tool_chunk(pieces.each_with_index.filter_map do |(_, list), i|
          fragment(i, list.shift) unless list.empty?
        end))
      end
      last = processor.process_streamed_message(tool_chunk([fragment(0, '"y"]}]}'), fragment(1, '"]}}')],
                                                           finish: "tool_calls"))
      # One object per call, from the first progress to the completion.
      expect(seen.flatten.compact.uniq(&:object_id).map(&:object_id)).to eq(last.map(&:object_id))
      expect(last.map(&:parameters)).to eq([{ t: "hé😀 é😀", l: [1, { k: %w[x y] }] },
                                            { n: { m: [true, nil, "v"] } }])
    end

    it "the round trip: Thinking, details and extra content, on both paths" do
      details = [{ type: "reasoning.text", text: "de", index: 0 }, { type: "reasoning.encrypted", data: "x", index: 0 }]
      chunks = [{ choices: [{ delta: { reasoning: "Think", reasoning_details: details } }] },
                tool_chunk([call("a", "f", '{"q":"', index: 0).merge(extra_content: { google: { s: "sig" } })]),
                { choices: [{ delta: { reasoning_details: [{ type: "reasoning.text", text: "tail", index: 0 }] } }] },
                tool_chunk([fragment(0, 'v"}')], finish: "tool_calls")]
      options = { partial_tool_calls: true, output_thinking: true, model: "1:m" }
      hash = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(**options))
      from_hash = [*chunks.flat_map { |chunk| [hash.process_streamed_message(chunk)].flatten.compact }, *hash.finish]
      churn
      raw = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(**options))
      from_raw = [*raw.decode_chunk(sse(chunks)), *raw.finish]
      [from_hash, from_raw].each do |items|
        thinking = items.grep(DiscourseAiStream::Thinking).last
        call = items.find { |item| item.respond_to?(:parameters) }
        # The last Thinking carries every detail (details after the first
        # one came out make another: docs/stream-shapes.md, rule 78).
        expect(thinking.provider_info[:chat_completions][:reasoning_details].first[:text]).to eq("detail")
        expect(call.provider_data[:chat_completions]).to include(extra_content: { google: { s: "sig" } }, model: "1:m")
        expect(call.parameters).to eq(q: "v")
      end
    end

    it "bad input, raw path: errors keep their items and payloads; the stream goes on" do
      # Strict: unreadable events raise too (by default they are skipped).
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(strict: true))
      good = sse([tool_chunk([call("good", "f", '{"q":"ok"}', index: 0)], finish: "tool_calls")], done: false)
      bad = {
        "data: {\"choices\": [oops]}\n\n" => [DiscourseAiStream::StreamError, :invalid_json],
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\xFF\"}}]}\n\n".b => [DiscourseAiStream::StreamError,
                                                                              :invalid_utf8],
        "data: #{"[" * 200}#{"]" * 200}\n\n" => [DiscourseAiStream::StreamError, :too_deep],
        "data: {\"error\":{\"message\":\"quota\",\"n\":[1,{\"x\":null}]}}\n\n" => [DiscourseAiStream::ProviderError,
                                                                                   nil]
      }
      bad.each do |bytes, (error, kind)|
        expect { processor.decode_chunk(good + bytes.b) }.to raise_error(error) { |e|
          expect(e.kind).to eq(kind) if kind
          expect(e.payload).to eq(message: "quota", n: [1, { x: nil }]) if e.respond_to?(:payload)
          expect(ids_in(e.items)).to eq(["good"])
        }
        expect(processor.finish).to eq([])
      end
      expect(processor.decode_chunk(sse([text_chunk("still")]))).to eq(["still"])
    end

    it "bad input, Hash path: wrong types, non-Hash input and deep nesting" do
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
      deep = 200.times.inject([]) { |inner, _| [inner] }
      expect { processor.process_streamed_message("data: {}") }.to raise_error(TypeError, /expected a Hash/)
      expect { processor.process_streamed_message(choices: deep) }
        .to raise_error(DiscourseAiStream::StreamError, /nested deeper/)
      odd = tool_chunk([{ index: "1", id: 42, function: { name: :sym, arguments: { k: Time.at(0), f: 1.5 } } }])
      processor.process_streamed_message(odd)
      done = processor.finish
      expect(done.map { |c| [c.id, c.name, c.parameters] }).to eq([["42", "sym", { k: nil, f: 1.5 }]])
      expect(processor.anomalies.map { |a| a[:kind] }).to include(:converted_field, :unsupported_value)
    end

    it "re-entrancy: refused calls from a callback, a frozen Hash detaches its call" do
      processor = nil
      reentrant = Class.new(DiscourseAiStream::ToolCall) do
        define_method(:partial=) do |value|
          super(value)
          processor.prompt_tokens
        rescue DiscourseAiStream::ConcurrencyError
          @refused = true
        end
        attr_reader :refused
      end
      raw = DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true, tool_call_class: reentrant)
      processor = stressed(raw)
      first = processor.process_streamed_message(tool_chunk([call("a", "f", '{"x":"1', index: 0),
                                                             call("b", "g", '{"y":"2', index: 1)]))
      expect(first.map(&:refused)).to eq([true, true])
      first.first.parameters.freeze
      processor.process_streamed_message(tool_chunk([fragment(0, '","z":"3"}'), fragment(1, '2"}')]))
      expect(processor.anomalies.map { |a| [a[:kind], a[:id]] }).to eq([[:partial_arguments_broken, "a"]])
      expect(processor.finish.map(&:parameters)).to eq([{ x: "1", z: "3" }, { y: "22" }])
    end

    it "a ToolCall class that raises: ToolCallError keeps the other items" do
      failing = Class.new(DiscourseAiStream::ToolCall) do
        def initialize(id:, **kwargs)
          raise KeyError, "no #{id}" if id == "bad"

          super
        end
      end
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(tool_call_class: failing))
      chunk = tool_chunk([call("ok", "f", '{"a":[1]}', index: 0), call("bad", "g", "{}", index: 1)],
                         finish: "tool_calls")
      expect { processor.process_streamed_message(chunk) }.to raise_error(DiscourseAiStream::ToolCallError) { |e|
        expect([ids_in(e.items), e.items.first.parameters, e.error.message]).to eq([["ok"], { a: [1] }, "no bad"])
      }
    end

    it "another thread reading a processor busy inside a callback" do
      inside = Queue.new
      resume = Queue.new
      waiting = Class.new(DiscourseAiStream::ToolCall) do
        define_method(:partial=) do |value|
          super(value)
          next unless value

          inside << true
          resume.pop
        end
      end
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new(partial_tool_calls: true,
                                                                         tool_call_class: waiting))
      worker = Thread.new { processor.process_streamed_message(tool_chunk([call("t", "f", '{"s":"', index: 0)])) }
      # The second thread calls in while the first is inside partial=.
      inside.pop
      expect { processor.anomalies }.to raise_error(DiscourseAiStream::ConcurrencyError)
      expect { processor.finish }.to raise_error(DiscourseAiStream::ConcurrencyError)
      resume << true
      expect(worker.value.id).to eq("t")
      processor.process_streamed_message(tool_chunk([fragment(0, 'z"}')]))
      expect(processor.finish.map { |c| [c.id, c.parameters] }).to eq([["t", { s: "z" }]])
    end

    # Values past the first 16 pairs of a Hash are kept outside the stack
    # while the chunk is read.
    def wide_chunk(content)
      junk = (1..20).to_h { |i| [:"k#{i}", "välue #{i}" * 3] }
      calls = [{ index: 0, id: +"after_16", function: { name: +"f", arguments: +'{"a":"b"}' } }]
      { id: "x", **junk, choices: [{ index: 0, delta: { **junk, content: content, tool_calls: calls },
                                     finish_reason: "tool_calls" }],
        usage: { **junk, prompt_tokens: 7, completion_tokens: 2 } }
    end

    it "reads a chunk Hash with more than 16 keys" do
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
      items = processor.process_streamed_message(wide_chunk("héllo".encode("UTF-16LE")))
      expect(items.map { |i| i.is_a?(String) ? i : [i.id, i.parameters] }).to eq(["héllo", ["after_16", { a: "b" }]])
      expect([processor.prompt_tokens, processor.completion_tokens]).to eq([7, 2])
    end

    it "reads a chunk Hash with more than 16 keys while objects move (GC compaction)" do
      GC.auto_compact = true
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
      items = Array.new(3) { processor.process_streamed_message(wide_chunk("héllo".encode("UTF-16LE"))) }
      expect(items.flatten.grep(String)).to eq(["héllo"] * 3)
    ensure
      GC.auto_compact = false if GC.respond_to?(:auto_compact=)
    end

    it "reads UTF-16, ISO-8859-1 and binary Strings, and rejects invalid UTF-8, in content and arguments" do
      processor = stressed(DiscourseAiStream::OpenAiMessageProcessor.new)
      texts = ["héllo wörld".encode("UTF-16LE"), "héllo wörld".encode("UTF-16BE"), "héllo wörld".encode("ISO-8859-1"),
               "héllo wörld".b]
      texts.each do |text|
        expect(processor.process_streamed_message(text_chunk(text))).to eq("héllo wörld")
      end
      arguments = '{"q":"ça va"}'.encode("UTF-16LE")
      call = processor.process_streamed_message(tool_chunk([call("u", "f", arguments, index: 0)], finish: "stop"))
      expect(call.parameters).to eq(q: "ça va")
      expect { processor.process_streamed_message(text_chunk((+"a\xFF").force_encoding("UTF-8"))) }
        .to raise_error(DiscourseAiStream::StreamError, /UTF-8/)
      expect(processor.process_streamed_message(text_chunk("after"))).to eq("after")
    end
  end
end
