# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/chunks"

RSpec.describe DiscourseAiStream::OpenAiMessageProcessor do
  let(:processor) { described_class.new }

  def echo_calls(count)
    (1..count).map { |i| call("call_#{i}", "echo", JSON.generate(text: "t#{i}"), index: i - 1) }
  end

  describe "the bug report: several tool calls in one chunk" do
    [[2, false], [3, false], [2, true], [3, true]].each do |count, partial|
      it "returns all #{count} calls, streamed and not, with partial_tool_calls: #{partial}" do
        processor = described_class.new(partial_tool_calls: partial)
        chunk = tool_chunk(echo_calls(count), finish: "tool_calls")
        streamed = [processor.process_streamed_message(chunk), *processor.finish].flatten.compact
        control = described_class.new(partial_tool_calls: partial).process_message(message(echo_calls(count)))

        expected = (1..count).map { |i| "call_#{i}" }
        expect(ids_in(streamed)).to eq(expected)
        expect(ids_in(control)).to eq(expected)
        expect(streamed.map(&:parameters)).to eq((1..count).map { |i| { text: "t#{i}" } })
        expect(streamed).to all(have_attributes(partial?: false))
      end
    end

    it "reads the raw Mistral chunk from the report, in both paths" do
      raw = File.read(File.join(__dir__, "fixtures", "bug_report_mistral.json"))
      chunk = JSON.parse(raw, symbolize_names: true)
      hashed = stream_items(processor, [chunk])
      decoded = decoded_items(described_class.new, ["data: #{raw.strip}\n\n", "data: [DONE]\n\n"])

      [hashed, decoded].each do |items|
        expect(items.map { |c| [c.id, c.name, c.parameters] }).to eq(
          [["bM0Xl0KSh", "get_weather", { city: "Paris" }],
           ["kgOYVL46d", "get_local_time", { timezone: "Europe/Paris" }]]
        )
      end
      expect([processor.prompt_tokens, processor.completion_tokens]).to eq([172, 23])
    end
  end

  describe "return values" do
    it "gives nil, one item, or an Array from process_streamed_message" do
      expect(processor.process_streamed_message(text_chunk(""))).to be_nil
      expect(processor.process_streamed_message(text_chunk("\n"))).to eq("\n")
      result = processor.process_streamed_message(
        { choices: [{ delta: { content: "Let me look.", tool_calls: echo_calls(2) }, finish_reason: "tool_calls" }] }
      )
      expect(result).to be_an(Array)
      expect(result.first).to eq("Let me look.")
      expect(ids_in(result)).to eq(%w[call_1 call_2])
    end

    it "returns the chunk's own content String, as stock Discourse does, and reads on after the caller changes it" do
      content = +"Hello"
      result = processor.process_streamed_message({ id: +"x", choices: [{ index: 0, delta: { content: content } }] })
      expect(result).to equal(content)
      result << " world"
      content.replace("changed")
      expect(processor.process_streamed_message(text_chunk(+"!"))).to eq("!")
      expect(processor.finish).to eq([])
    end

    it "returns a new plain UTF-8 String when the content String is frozen, of another encoding or a subclass" do
      subclass = Class.new(String)
      [
        "Hello",
        "Hello".encode("ISO-8859-1"),
        (+"Hello").force_encoding(Encoding::US_ASCII),
        subclass.new("Hello")
      ].each do |content|
        result = processor.process_streamed_message({ choices: [{ delta: { content: content } }] })
        expect(result).not_to equal(content)
        expect([result, result.class, result.encoding, result.frozen?]).to eq(["Hello", String, Encoding::UTF_8, false])
      end
    end

    it "always gives Arrays from process_message, decode_chunk and finish" do
      expect(processor.process_message(message([]))).to eq([])
      expect(processor.decode_chunk("")).to eq([])
      expect(processor.finish).to eq([])
    end

    it "completes open calls at finish in order of first appearance" do
      processor.process_streamed_message(tool_chunk([call("b", "f", "{}", index: 5)]))
      processor.process_streamed_message(tool_chunk([call("a", "f", "{}", index: 1)]))
      expect(ids_in(processor.finish)).to eq(%w[b a])
      expect(processor.finish).to eq([])
    end
  end

  describe "ToolCall class" do
    it "uses DiscourseAiStream::ToolCall outside Discourse" do
      items = stream_items(processor, [tool_chunk(echo_calls(1), finish: "stop")])
      expect(items.first).to be_a(DiscourseAiStream::ToolCall)
    end

    it "uses Discourse's ToolCall when it is defined by the time a processor is created" do
      discourse_tool_call = Class.new(DiscourseAiStream::ToolCall)
      stub_const("DiscourseAi::Completions::ToolCall", discourse_tool_call)
      items = stream_items(described_class.new, [tool_chunk(echo_calls(1), finish: "stop")])
      expect(items.first).to be_a(discourse_tool_call)
    end

    it "can be set explicitly, globally or per processor" do
      custom = Class.new(DiscourseAiStream::ToolCall)
      DiscourseAiStream.tool_call_class = custom
      expect(stream_items(described_class.new, [tool_chunk(echo_calls(1), finish: "stop")]).first).to be_a(custom)
      other = Class.new(DiscourseAiStream::ToolCall)
      mine = described_class.new(tool_call_class: other)
      expect(stream_items(mine, [tool_chunk(echo_calls(1), finish: "stop")]).first).to be_a(other)
    ensure
      DiscourseAiStream.tool_call_class = nil
    end
  end

  describe "usage" do
    let(:chunks) do
      [text_chunk("hi"), finish_chunk("stop"),
       usage_chunk(prompt: 100, completion: 7, prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 20 }),
       { choices: [], usage: nil }]
    end

    it "reports prompt tokens as the server sent them by default, outside Discourse" do
      stream_items(processor, chunks)
      expect(processor.usage_mode).to eq(:as_sent)
      expect([processor.prompt_tokens, processor.completion_tokens]).to eq([100, 7])
      expect([processor.cache_read_tokens, processor.cache_write_tokens, processor.cached_tokens]).to eq([30, 20, 30])
    end

    it "reports net prompt tokens with usage: :net_of_cache, and by default where Discourse AI is loaded" do
      net = described_class.new(usage: :net_of_cache)
      stream_items(net, chunks)
      expect([net.usage_mode, net.prompt_tokens, net.completion_tokens]).to eq([:net_of_cache, 50, 7])

      stub_const("DiscourseAi::Completions", Module.new)
      expect(described_class.new.usage_mode).to eq(:net_of_cache)
      stock = Class.new { attr_reader :cached_tokens }
      stub_const("DiscourseAi::Completions::OpenAiMessageProcessor", stock)
      expect(described_class.new.usage_mode).to eq(:as_sent), "the legacy generation's accounting"
    end

    it "still takes the former names of the modes" do
      expect(%i[current legacy].map { |mode| described_class.new(usage: mode).usage_mode })
        .to eq(%i[net_of_cache as_sent])
      expect(described_class.new(usage: "as_sent").usage_mode).to eq(:as_sent)
    end

    it "reports nothing before usage arrives" do
      expect([processor.prompt_tokens, processor.completion_tokens, processor.cache_read_tokens]).to eq([nil] * 3)
    end

    {
      { prompt_tokens: 9, prompt_tokens_details: { cached_tokens: "abc" } } =>
        ["usage.prompt_tokens_details.cached_tokens", /"abc"/],
      { prompt_tokens: 9, prompt_tokens_details: "x" } => ["usage.prompt_tokens_details", /string/],
      { prompt_tokens: 9, completion_tokens: "7" } => ["usage.completion_tokens", /string/],
      { prompt_tokens: 9, completion_tokens: { n: 7 } } => ["usage.completion_tokens", /\{"n":7\}/]
    }.each do |usage, (field, value)|
      it "reports #{usage} as an anomaly naming #{field} and its value, in both paths" do
        chunk = { choices: [], usage: usage }
        hashed = described_class.new
        hashed.process_streamed_message(parsed(chunk))
        raw = described_class.new
        raw.decode_chunk(sse([chunk]))
        [hashed, raw].each do |p|
          expect(p.anomalies).to contain_exactly(include(field: field, message: value))
          expect(p.prompt_tokens).to eq(9)
        end
      end
    end

    it "reports Groq's x_groq.usage of the wrong type" do
      [{ x_groq: { usage: "x" } }, { x_groq: "x" }, { x_groq: { usage: { completion_tokens: "many" } } }].each do |c|
        processor = described_class.new
        processor.process_streamed_message(c.merge(choices: []))
        expect(processor.anomalies).to contain_exactly(include(kind: :ignored_field, message: /x_groq/)), c.inspect
      end
    end

    it "refuses an unknown usage mode" do
      expect { described_class.new(usage: :gross) }.to raise_error(ArgumentError, /usage must be one of/)
    end
  end

  describe "arguments" do
    it "treats empty arguments as no parameters" do
      items = stream_items(processor, [tool_chunk([call("a", "now", "", index: 0)]), finish_chunk])
      expect(items.first.parameters).to eq({})
    end

    it "repairs a missing brace and reports it" do
      items = stream_items(processor, [tool_chunk([call("a", "f", '{"city": "Paris"', index: 0)]), finish_chunk])
      expect(items.first.parameters).to eq(city: "Paris")
      expect(processor.anomalies.map { |a| a[:kind] }).to eq([:repaired_arguments])
    end

    it "raises ToolArgumentsError naming the tool, never a silent {}" do
      processor.process_streamed_message(tool_chunk([call("call_9", "search", '{"q": tru', index: 0)]))
      expect { processor.finish }.to raise_error(DiscourseAiStream::ToolArgumentsError) { |e|
        expect(e).to be_a(JSON::ParserError).and be_a(DiscourseAiStream::Error)
        expect([e.tool_id, e.tool_name, e.raw_arguments]).to eq(["call_9", "search", '{"q": tru'])
        expect(e.message).to include('"search"')
      }
    end

    it "keeps the good calls of a batch with a bad one in the error's items" do
      processor.process_streamed_message(tool_chunk([call("ok", "f", "{}", index: 0),
                                                     call("bad", "g", "{x", index: 1)]))
      expect { processor.finish }.to raise_error(DiscourseAiStream::ToolArgumentsError) { |e|
        expect(ids_in(e.items)).to eq(["ok"])
      }
    end

    it "gives the same parameters streamed in any fragmentation as not streamed" do
      args = JSON.generate(q: "snow in Zürich \u{1F328}", n: [1, 2.5, { deep: [true, nil] }],
                           big: 12_345_678_901_234_567_890)
      control = described_class.new.process_message(message([call("a", "f", args)])).first.parameters
      random = Random.new(7)
      5.times do
        cuts = Array.new(4) { random.rand(args.length) }.sort.uniq
        pieces = ([0] + cuts + [args.length]).each_cons(2).map { |x, y| args[x...y] }
        chunks = [tool_chunk([call("a", "f", "", index: 0)]), *pieces.map { |p| tool_chunk([fragment(0, p)]) }]
        [false, true].each do |partial|
          streamed = stream_items(described_class.new(partial_tool_calls: partial), chunks).last.parameters
          expect(streamed).to eq(control)
        end
      end
      expect(control[:big]).to eq(12_345_678_901_234_567_890)
    end
  end

  describe "errors" do
    it "raises ProviderError for an in-band error, with the payload" do
      expect(processor.process_streamed_message(text_chunk("partial"))).to eq("partial")
      expect { processor.process_streamed_message({ error: { message: "Rate limit reached", code: 429 } }) }
        .to raise_error(DiscourseAiStream::ProviderError, "Rate limit reached") { |e|
          expect(e.payload).to eq(message: "Rate limit reached", code: 429)
        }
    end

    it "raises ProviderError from process_message for a choice error, keeping what the message held" do
      response = message([call("m", "f", '{"a":1}')], content: "so far")
      response[:choices][0].merge!(finish_reason: "error", error: { message: "upstream died", code: 502 })
      expect { processor.process_message(response) }
        .to raise_error(DiscourseAiStream::ProviderError, "upstream died") { |e|
          expect(e.payload).to eq(message: "upstream died", code: 502)
          expect(e.items.first).to eq("so far")
          expect(e.items.last).to have_attributes(id: "m", parameters: { a: 1 })
        }
      bare = message([], content: "x")
      bare[:choices][0][:finish_reason] = "error"
      expect { described_class.new.process_message(bare) }
        .to raise_error(DiscourseAiStream::ProviderError, /finish_reason "error"/)
    end

    it "raises TypeError for something that is not a Hash" do
      expect { processor.process_streamed_message("data: {}") }.to raise_error(TypeError, /expected a Hash/)
      expect { processor.process_message(nil) }.to raise_error(TypeError)
      expect { processor.decode_chunk(42) }.to raise_error(TypeError, /String/)
    end
  end

  describe "unexpected types in Hashes" do
    it "converts or ignores them, never crashes, and records each" do
      chunk = { choices: [{ delta: { content: 5, tool_calls: [7, { index: "0", id: 42, function: { name: "f" } }] } }],
                usage: { prompt_tokens: "12" }, object: Time.now }
      expect(processor.process_streamed_message(chunk)).to be_nil
      items = processor.process_streamed_message(tool_chunk([{ index: 0, function: { arguments: 5 } }]))
      expect(items).to be_nil
      call = processor.finish.first
      expect([call.id, call.parameters]).to eq(["42", {}])
      kinds = processor.anomalies.map { |a| a[:kind] }
      expect(kinds).to include(:ignored_field, :converted_field, :unsupported_value)
      expect(processor.prompt_tokens).to eq(12)
    end
  end

  describe "wrong-type tool call fields, reported with the call" do
    it "reports arguments: 5 in a non-streamed message, never a silent {}" do
      items = processor.process_message(message([{ id: "w", type: "function", function: { name: "f", arguments: 5 } }]))
      expect(items.map { |c| [c.id, c.parameters] }).to eq([["w", {}]])
      expect(processor.anomalies).to contain_exactly(
        include(kind: :ignored_field, field: "tool_calls[].function.arguments", id: "w", name: "f")
      )
    end

    it "reports a streamed wrong-type field once for each call it belongs to, with its id and index" do
      stream_items(processor, [tool_chunk([{ index: "0", id: "a", function: { name: "f", arguments: "{}" } },
                                           { index: "1", id: "b", function: { name: "g", arguments: "{}" } }]),
                               tool_chunk([{ index: "1", function: { arguments: "" } }]), finish_chunk])
      expect(processor.anomalies.map { |a| a.values_at(:kind, :field, :id, :index) }).to eq(
        [[:converted_field, "tool_calls[].index", "a", 0], [:converted_field, "tool_calls[].index", "b", 1]]
      )
    end
  end

  describe "odd content shapes, in both paths" do
    def both(chunks)
      hashed = described_class.new
      hashed_items = chunks.flat_map { |c| Array(hashed.process_streamed_message(parsed(c))) }
      raw = described_class.new
      [[hashed_items, hashed], [raw.decode_chunk(sse(chunks, done: false)), raw]]
    end

    it "reads a streamed choice with message instead of delta, and reports it" do
      both([{ choices: [{ index: 0, message: { content: "hi" } }] }]).each do |items, p|
        expect(items).to eq(["hi"])
        expect(p.anomalies).to contain_exactly(include(kind: :converted_field, field: "choices[0].message"))
      end
    end

    it "reports content parts whose text or type has the wrong type" do
      parts = [{ type: "text", text: { a: 1 } }, { type: 5, text: "x" }, { type: "text", text: "ok" }]
      both([{ choices: [{ index: 0, delta: { content: parts } }] }]).each do |items, p|
        expect(items).to eq(["ok"])
        expect(p.anomalies.map { |a| a[:field] })
          .to eq(["choices[0].delta.content[].text", "choices[0].delta.content[].type"])
      end
    end
  end

  describe "anomalies" do
    it "hands each anomaly to the processor's hook, else the global one" do
      seen = []
      DiscourseAiStream.on_anomaly = ->(a) { seen << [:global, a[:kind]] }
      described_class.new.process_streamed_message(tool_chunk([fragment(3, "{\"lost\":1}")]))
      mine = described_class.new(on_anomaly: ->(a) { seen << [:own, a[:kind], a[:excerpt]] })
      mine.process_streamed_message(tool_chunk([fragment(3, "{\"lost\":1}")]))
      expect(seen).to eq([%i[global orphan_fragment], [:own, :orphan_fragment, '{"lost":1}']])
    ensure
      DiscourseAiStream.on_anomaly = nil
    end

    it "hands a repeat of an anomaly already delivered to the hook again, once a call, with its count" do
      seen = []
      p = described_class.new(on_anomaly: ->(a) { seen << [a[:kind], a.fetch(:count, 1)] })
      p.decode_chunk("data: not json\n\n")
      p.decode_chunk("data: not json\n\n")
      p.decode_chunk("data: not json\n\ndata: not json\n\n")
      expect(seen).to eq([[:non_json_data, 1], [:non_json_data, 2], [:non_json_data, 4]])
      expect(p.anomalies.map { |a| [a[:kind], a[:count]] }).to eq([[:non_json_data, 4]])
    end

    it "keeps the stream going when a hook raises" do
      noisy = described_class.new(on_anomaly: ->(_) { raise "logger down" })
      expect { noisy.process_streamed_message(tool_chunk([fragment(3, "x")])) }
        .to output(/on_anomaly hook raised RuntimeError: logger down/).to_stderr
      expect(noisy.anomalies.size).to eq(1)
    end

    it "reports a refusal whole at the end of the stream, on both paths, and hands none out (rule 81)" do
      chunks = [{ choices: [{ index: 0, delta: { role: "assistant", content: nil, refusal: nil } }] },
                { choices: [{ index: 0, delta: { refusal: "I can't " } }] },
                { choices: [{ index: 0, delta: { refusal: "help." } }] },
                { choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }]
      hash = described_class.new
      items = chunks.flat_map { |c| Array(hash.process_streamed_message(parsed(c))) } + hash.finish
      raw = described_class.new
      items += raw.decode_chunk(sse(chunks)) + raw.finish
      expect(items).to eq([])
      [hash, raw].each do |p|
        expect(p.anomalies.map { |a| a.values_at(:kind, :excerpt) }).to eq([[:refusal, "I can't help."]])
      end
    end

    it "records a truncated stream" do
      processor.process_streamed_message(tool_chunk([call("a", "f", '{"x":1}', index: 0)]))
      expect(ids_in(processor.finish)).to eq(["a"])
      expect(processor.anomalies.last).to include(kind: :truncated)
      expect(processor.anomalies.last).to be_frozen
    end
  end
end
