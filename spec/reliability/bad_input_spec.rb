# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

# Everything a server or a proxy might send that is not a well-formed stream.
# Each row: the input, the outcome (a named error with the offending data, or
# ignored with an anomaly), and the check that the call completed before the
# bad input is not lost.
RSpec.describe "bad input" do
  good = ChunkHelpers.tool_chunk([ChunkHelpers.call("good", "search", '{"q":"ok"}', index: 0)], finish: "tool_calls")
  good_sse = ChunkHelpers.sse([good], done: false)
  # A call whose arguments never close.
  open_call = ChunkHelpers.tool_chunk([ChunkHelpers.call("open", "f", '{"a":1', index: 1)])
  open_sse = ChunkHelpers.sse([open_call], done: false)

  # JSON.parse of numbers beyond a Float, which these rows send on purpose
  # (Ruby 3.4's json warns about each one).
  parse_quietly = lambda do |json|
    verbose = $VERBOSE
    $VERBOSE = nil
    JSON.parse(json, symbolize_names: true)
  ensure
    $VERBOSE = verbose
  end
  deep_json = "{\"x\":#{"[" * 10_000}#{"]" * 10_000}}"
  deep_hash = 10_000.times.inject([]) { |inner, _| [inner] }

  raw_rows = {
    "an invalid JSON line" => ["data: {\"choices\": [oops]}\n\n", DiscourseAiStream::StreamError, :invalid_json,
                               /oops/],
    "JSON nested 10 000 deep" => ["data: #{deep_json}\n\n", DiscourseAiStream::StreamError, :too_deep, /recursion/],
    "invalid UTF-8 in text" => ["data: {\"choices\":[{\"delta\":{\"content\":\"a\xFF\"}}]}\n\n".b,
                                DiscourseAiStream::StreamError, :invalid_utf8, /UTF-8/],
    "a raw NUL byte inside a JSON string" => ["data: {\"choices\":[{\"delta\":{\"content\":\"a\u0000\"}}]}\n\n",
                                              DiscourseAiStream::StreamError, :invalid_json, /control character/],
    "an in-band error" => ["data: {\"error\":{\"message\":\"quota exceeded\"}}\n\n",
                           DiscourseAiStream::ProviderError, nil, /quota exceeded/]
  }

  # Unreadable events are skipped and reported by default; strict: true
  # raises them, as it raises the limits and provider errors in any case.
  unreadable = %i[invalid_json invalid_utf8]

  raw_rows.each do |name, (bad, error, kind, message)|
    strict = unreadable.include?(kind)
    if strict
      it "raw path, #{name}: skipped with an :unreadable_event anomaly, and the good call is kept" do
        processor = DiscourseAiStream::OpenAiMessageProcessor.new
        expect(ids_in(processor.decode_chunk(good_sse + bad.b))).to eq(["good"])
        expect(processor.anomalies.last).to include(kind: :unreadable_event, message: message)
        expect(processor.anomalies.last[:excerpt].bytesize).to be <= 200
        expect(processor.decode_chunk(sse([text_chunk("still reading")]))).to eq(["still reading"])
      end
    end

    label = strict ? "#{name} (strict: true)" : name
    it "raw path, #{label}: raises #{error.name.split("::").last} and keeps the good call" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new(strict: strict)
      expect { processor.decode_chunk(good_sse + bad.b) }.to raise_error(error, message) { |e|
        expect(e.kind).to eq(kind) if kind
        expect(e.excerpt.bytesize).to be <= 200 if e.respond_to?(:excerpt) && e.excerpt
        expect(ids_in(e.items)).to eq(["good"])
      }
      expect(processor.finish).to eq([])
      expect(processor.decode_chunk(sse([text_chunk("still reading")]))).to eq(["still reading"])
    end
  end

  hash_rows = {
    "a String instead of a Hash" => ["data: {}", TypeError, /expected a Hash/],
    "an Integer" => [5, TypeError, /Integer/],
    "nil" => [nil, TypeError, /NilClass/],
    "an Array" => [[good], TypeError, /Array/],
    "a Hash nested 10 000 deep" => [{ choices: deep_hash }, DiscourseAiStream::StreamError, /nested deeper/],
    "invalid UTF-8 in a String" => [{ choices: [{ delta: { content: (+"a\xFF").force_encoding("UTF-8") } }] },
                                    DiscourseAiStream::StreamError, /UTF-8/]
  }

  hash_rows.each do |name, (bad, error, message)|
    it "Hash path, #{name}: raises #{error.name.split("::").last} and loses nothing before it" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect(ids_in(Array(processor.process_streamed_message(good)))).to eq(["good"])
      expect { processor.process_streamed_message(bad) }.to raise_error(error, message)
      expect(processor.process_streamed_message(text_chunk("after"))).to eq("after")
    end
  end

  # Every field of a chunk, given a value of the wrong type: never an error,
  # each one reported, and the good call before it comes out.
  wrong_types = {
    "choices" => ->(v) { { choices: v } },
    "choices[0]" => ->(v) { { choices: [v] } },
    "delta" => ->(v) { { choices: [{ delta: v }] } },
    "content" => ->(v) { { choices: [{ delta: { content: v } }] } },
    "tool_calls" => ->(v) { { choices: [{ delta: { tool_calls: v } }] } },
    "tool_calls[0]" => ->(v) { { choices: [{ delta: { tool_calls: [v] } }] } },
    "index" => ->(v) { ChunkHelpers.tool_chunk([{ index: v, id: "x", function: { name: "f", arguments: "{}" } }]) },
    "id" => ->(v) { ChunkHelpers.tool_chunk([{ index: 1, id: v, function: { name: "f", arguments: "{}" } }]) },
    "function" => ->(v) { ChunkHelpers.tool_chunk([{ index: 1, id: "x", function: v }]) },
    "name" => ->(v) { ChunkHelpers.tool_chunk([{ index: 1, id: "x", function: { name: v, arguments: "{}" } }]) },
    "arguments" => ->(v) { ChunkHelpers.tool_chunk([{ index: 1, id: "x", function: { name: "f", arguments: v } }]) },
    "finish_reason" => ->(v) { { choices: [{ delta: {}, finish_reason: v }] } },
    "usage" => ->(v) { { choices: [], usage: v } },
    "prompt_tokens" => ->(v) { { choices: [], usage: { prompt_tokens: v } } },
    "completion_tokens" => ->(v) { { choices: [], usage: { completion_tokens: v } } },
    "prompt_tokens_details" => ->(v) { { choices: [], usage: { prompt_tokens_details: v } } },
    "prompt_tokens_details.cached_tokens" =>
      ->(v) { { choices: [], usage: { prompt_tokens_details: { cached_tokens: v } } } },
    "prompt_tokens_details.cache_write_tokens" =>
      ->(v) { { choices: [], usage: { prompt_tokens_details: { cache_write_tokens: v } } } },
    "prompt_tokens_details.cache_creation_tokens" =>
      ->(v) { { choices: [], usage: { prompt_tokens_details: { cache_creation_tokens: v } } } },
    "x_groq" => ->(v) { { choices: [], x_groq: v } },
    "x_groq.usage" => ->(v) { { choices: [], x_groq: { usage: v } } },
    "object" => ->(v) { { object: v, choices: [] } },
    "message" => ->(v) { { object: "chat.completion.chunk", message: v, choices: [] } },
    "choices[0].message" => ->(v) { { choices: [{ message: v }] } },
    "content part type" => ->(v) { { choices: [{ delta: { content: [{ type: v, text: "x" }] } }] } },
    "content part text" => ->(v) { { choices: [{ delta: { content: [{ type: "text", text: v }] } }] } },
    "function.id" =>
      ->(v) { ChunkHelpers.tool_chunk([{ index: 1, function: { id: v, name: "f", arguments: "{}" } }]) }
  }
  odd_values = { "an Integer" => 5, "a Float" => 1.5, "true" => true, "an Array" => [1, "x"], "a Time" => Time.at(0),
                 "a String" => "x", "a Hash" => { a: 1 } }
  # Integers are what these fields hold.
  integer_fields = %w[index prompt_tokens completion_tokens prompt_tokens_details.cached_tokens
                      prompt_tokens_details.cache_write_tokens prompt_tokens_details.cache_creation_tokens]
  # Strings are what these fields hold (the content part's type is any string: "x" is reported as unknown).
  string_fields = ["content", "id", "name", "arguments", "finish_reason", "object", "message", "content part text",
                   "function.id"]
  # Objects are what these fields hold.
  hash_fields = ["choices[0]", "delta", "tool_calls[0]", "function", "arguments", "usage", "prompt_tokens_details",
                 "x_groq", "x_groq.usage", "choices[0].message"]
  # Generated ids differ between processors by design.
  comparable = ->(ids) { ids.map { |id| id.start_with?("call_das_") ? :generated : id } }

  wrong_types.each do |field, build|
    it "Hash and raw paths: #{field} of every wrong type is ignored or converted, with an anomaly" do
      odd_values.each do |label, value|
        next if integer_fields.include?(field) && value.is_a?(Integer)
        next if string_fields.include?(field) && value.is_a?(String)
        next if hash_fields.include?(field) && value.is_a?(Hash)

        chunk = build.call(value)
        processor = DiscourseAiStream::OpenAiMessageProcessor.new
        items = Array(processor.process_streamed_message(good)) + Array(processor.process_streamed_message(chunk))
        items += processor.finish
        expect(ids_in(items)).to start_with("good"), "#{field} as #{label}"
        expect(processor.anomalies).not_to be_empty, "#{field} as #{label}: no anomaly recorded"
        next if value.is_a?(Time) # JSON has no Time: the raw path sees a String there.

        raw = DiscourseAiStream::OpenAiMessageProcessor.new
        expect(comparable.call(ids_in(decoded_items(raw, [sse([good, chunk])]))))
          .to eq(comparable.call(ids_in(items))), "#{field} as #{label}"
      end
    end
  end

  describe "a truncated event in the middle of a stream" do
    later = ChunkHelpers.tool_chunk([ChunkHelpers.call("b", "fetch", '{"url":"x"}', index: 1)], finish: "tool_calls")

    {
      "a cut data line with no blank line after it" => "data: {\"choices\":[{\"delta\":{\"content\":\"cu\n",
      "a cut data line ending where the next event could continue it" => "data: {\"choices\":[\n",
      "an event closed by a blank line before its JSON was complete" => "data: {\"choices\":[{\"delta\"\n\n"
    }.each do |name, cut|
      it "#{name}: skipped and reported, and the next event is read" do
        processor = DiscourseAiStream::OpenAiMessageProcessor.new
        bytes = good_sse + cut.b + sse([later], done: false)
        expect(ids_in(processor.decode_chunk(bytes))).to eq(%w[good b])
        expect(processor.anomalies.map { |a| a[:kind] }).to eq(%i[unreadable_event])
        expect(processor.anomalies.last[:message]).to match(/truncated/)
        expect(processor.finish).to eq([])
      end

      it "#{name}, strict: true: raises StreamError naming it, and the next event is read" do
        processor = DiscourseAiStream::OpenAiMessageProcessor.new(strict: true)
        bytes = good_sse + cut.b + sse([later], done: false)
        expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::StreamError, /truncated/) { |e|
          expect(e.kind).to eq(:invalid_json)
          expect(ids_in(e.items)).to eq(%w[good b])
        }
        expect(processor.finish).to eq([])
      end
    end
  end

  it "5000 `data: ping` keep-alives: one anomaly with a count, and real anomalies still recorded" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    processor.decode_chunk(good_sse)
    processor.decode_chunk("data: ping\n\n" * 5000)
    processor.decode_chunk((1..200).map { |i| "data: ping #{i}\n\n" }.join)
    processor.decode_chunk(sse([tool_chunk([fragment(9, '{"lost":1}')])], done: false))
    kinds = processor.anomalies.map { |a| a[:kind] }
    expect(processor.anomalies.first).to include(kind: :non_json_data, excerpt: "ping", count: 5000)
    expect(kinds.count(:non_json_data)).to eq(50)
    expect(processor.anomalies).to include(kind: :anomaly_limit,
                                           message: "more than 50 non_json_data anomalies; later ones are only counted")
    expect(processor.dropped_anomalies).to eq(201 - 50)
    expect(kinds.last).to eq(:orphan_fragment)
    expect(processor.anomalies.last[:excerpt]).to eq('{"lost":1}')
  end

  it "error of any non-empty type: ProviderError naming the value, and the good call is kept, in both paths" do
    { "an Integer" => [5, "5"], "a String" => %w[x x], "true" => [true, "true"], "an Array" => [[1, "x"], '[1,"x"]'],
      "a Hash" => [{ a: 1 }, '{"a":1}'], "a Hash with a message" => [{ message: "m" }, "m"] }.each do |label, (v, text)|
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect(ids_in(Array(processor.process_streamed_message(good)))).to eq(["good"])
      expect { processor.process_streamed_message({ error: v }) }
        .to raise_error(DiscourseAiStream::ProviderError, text), label
      raw = DiscourseAiStream::OpenAiMessageProcessor.new
      expect { raw.decode_chunk(good_sse + sse([{ error: v }], done: false)) }
        .to raise_error(DiscourseAiStream::ProviderError, text) { |e| expect(ids_in(e.items)).to eq(["good"]) }
    end
  end

  it "a truncated stream: finish completes the open call and reports it" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    expect(ids_in(processor.decode_chunk(good_sse + open_sse))).to eq(["good"])
    expect(ids_in(processor.finish)).to eq(["open"])
    expect(processor.anomalies.map { |a| a[:kind] }).to include(:truncated, :repaired_arguments)
  end

  it "a stream cut inside an event: the call open then is not repaired, its error names the lost event" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    expect(ids_in(processor.decode_chunk("#{good_sse}#{open_sse}data: {\"choices\":[{\"del"))).to eq(["good"])
    expect { processor.finish }.to raise_error(DiscourseAiStream::ToolArgumentsError, /lost.*cut by the end/) { |e|
      expect(e.tool_id).to eq("open")
    }
    kinds = processor.anomalies.map { |a| a[:kind] }
    expect(kinds).to include(:truncated, :truncated_event, :invalid_arguments)
    expect(kinds).not_to include(:repaired_arguments)
  end

  it "10 MB of random bytes: only named errors, and the good call is kept" do
    random = Random.new(42)
    # Strict, so that unreadable events are errors too.
    processor = DiscourseAiStream::OpenAiMessageProcessor.new(strict: true)
    first = processor.decode_chunk(good_sse)
    errors = 0
    160.times do
      processor.decode_chunk(random.bytes(65_536))
    rescue DiscourseAiStream::Error
      errors += 1
    end
    expect(ids_in(first)).to eq(["good"])
    # Garbage makes errors (any other exception would have ended the loop),
    # each a named one of the gem, and is recorded within the bound.
    expect(errors).to be_between(1, 160)
    expect(processor.finish).to eq([])
    expect(processor.anomalies.size).to be <= 1001
    known = %i[unknown_sse_field unprefixed_data unreadable_event non_json_data unexpected_payload truncated_event
               provider_error ignored_field anomaly_limit glued_event]
    expect(processor.anomalies.map { |a| a[:kind] }.uniq - known).to eq([])
    # The stream after the garbage is read again.
    expect(ids_in(processor.decode_chunk(good_sse))).to eq(["good"])
  end

  it "one 100 MB line without a newline: one error, bounded memory" do
    rss = -> { File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i * 1024 }
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    processor.decode_chunk(good_sse)
    megabyte = ("x" * (1024 * 1024)).freeze
    before = rss.call
    errors = 100.times.count do
      processor.decode_chunk(megabyte)
      false
    rescue DiscourseAiStream::StreamError => e
      expect(e.kind).to eq(:line_too_long)
      true
    end
    expect(errors).to eq(1)
    expect(rss.call - before).to be < 32 * 1024 * 1024
    expect(processor.decode_chunk("\n#{sse([text_chunk("resumed")])}")).to eq(["resumed"])
  end

  it "NUL bytes: escaped in JSON they are text; a bare NUL payload is skipped and reported" do
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    escaped = "data: {\"choices\":[{\"delta\":{\"content\":\"a\\u0000b\"}}]}\n\n"
    expect(ids_in(processor.decode_chunk(good_sse))).to eq(["good"])
    expect(processor.decode_chunk(escaped)).to eq(["a\u0000b"])
    expect(processor.decode_chunk("data: \u0000\u0000\n\n")).to eq([])
    expect(processor.anomalies.map { |a| a[:kind] }).to eq([:non_json_data])
    expect(processor.finish).to eq([])
  end

  it "huge numbers: a huge index is ignored and reported, huge parameters keep every digit" do
    big = "123456789012345678901234567890"
    raw = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":#{big},\"id\":\"h\",\"function\":" \
          "{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":#{big},\\\"f\\\":1e400}\"}}]},\"finish_reason\":\"stop\"}]}\n\n"
    processor = DiscourseAiStream::OpenAiMessageProcessor.new
    good_call, call = processor.decode_chunk(good_sse + raw)
    expect(good_call.id).to eq("good")
    expect(call.parameters).to eq(n: Integer(big), f: Float::INFINITY)
    expect(processor.anomalies.map { |a| a[:kind] }).to eq([:ignored_field])
  end

  it "huge numbers: arguments sent as an object keep every digit of an integer, on every path" do
    big = (2**70) + 1
    arguments = "{\"post_id\":#{big},\"neg\":-#{big},\"f\":1e20,\"x\":12345678901234567.0}"
    chunk = "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"h\",\"function\":" \
            "{\"name\":\"f\",\"arguments\":#{arguments}}}]},\"finish_reason\":\"tool_calls\"}]}"
    want = { post_id: big, neg: -big, f: 1e20, x: 12_345_678_901_234_568.0 }
    chat = DiscourseAiStream::OpenAiMessageProcessor
    decoded = chat.new.decode_chunk("data: #{chunk}\n\n")
    hashed = chat.new.process_streamed_message(JSON.parse(chunk, symbolize_names: true))
    message = { tool_calls: [{ id: "h", function: { name: "f", arguments: want } }] }
    whole = chat.new.process_message({ choices: [{ message: message }] })
    item = "{\"type\":\"function_call\",\"id\":\"fc\",\"call_id\":\"h\",\"name\":\"f\",\"arguments\":#{arguments}}"
    responses = DiscourseAiStream::OpenAiResponsesMessageProcessor.new.decode_chunk(
      "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":#{item}}\n\n"
    )
    [decoded, Array(hashed), whole, responses].each do |calls|
      expect(calls.map { |c| [c.id, c.parameters] }).to eq([["h", want]])
      expect(calls[0].parameters[:post_id]).to be_an(Integer)
    end
  end

  it "huge numbers: the largest finite Float stays one, and any number of them beyond it cost nothing" do
    beyond = Array.new(70) { |i| "\\\"k#{i}\\\":1e400" }.join(",")
    raw = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"h\",\"function\":{\"name\":\"f\"," \
          "\"arguments\":{\"max\":1.7976931348623157e308}}}]},\"finish_reason\":\"stop\"}]," \
          "\"x\":[#{"1e400," * 69}1e400]}\n\n" \
          "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"i\",\"function\":{\"name\":\"f\"," \
          "\"arguments\":\"{#{beyond}}\"}}]},\"finish_reason\":\"stop\"}]}\n\n"
    decoded = DiscourseAiStream::OpenAiMessageProcessor.new.decode_chunk(raw)
    hashed = DiscourseAiStream::OpenAiMessageProcessor.new
    hashed = raw.scan(/^data: (.*)$/).flat_map do |(data)|
      Array(hashed.process_streamed_message(parse_quietly.call(data)))
    end
    [decoded, hashed].each do |calls|
      expect(calls.map(&:id)).to eq(%w[h i])
      expect(calls[0].parameters).to eq(max: Float::MAX)
      expect(calls[1].parameters.values.uniq).to eq([Float::INFINITY])
    end
  end

  describe "huge numbers read the same through decode_chunk and process_streamed_message" do
    # Generated ids differ between processors by design.
    normalize = ->(text) { text.to_s.gsub(/call_das_\h+_\d+/, "call_das_N") }
    # Each step is one call into the processor; the first error is kept, its items too.
    outcome = lambda do |processor, steps|
      items = []
      error = nil
      steps.each do |step|
        items.concat(Array(step.call))
      rescue DiscourseAiStream::Error => e
        error ||= [e.class, normalize.call(e.message)]
        items.concat(e.items)
      end
      items.concat(processor.finish)
      [items.map { |i| i.is_a?(String) ? i : [normalize.call(i.id), i.name, i.parameters] }, error,
       processor.anomalies.map { |a| [a[:kind], normalize.call(a[:message]), a[:field], a[:count]] }]
    end

    big = 2**80
    header = ->(extra) { { index: 0, id: "h", function: { name: "f", arguments: '{"a":1}' } }.merge(extra) }
    {
      "index: 1e400" => ChunkHelpers.tool_chunk([header.call(index: :INF)]),
      "index: 2**80" => ChunkHelpers.tool_chunk([header.call(index: big)]),
      "a Bignum id" => ChunkHelpers.tool_chunk([header.call(id: big)]),
      "content: 2**80" => ChunkHelpers.text_chunk(:BIG),
      "content: -1e400" => ChunkHelpers.text_chunk(:NEG_INF),
      "choices[0].error: 1e400" => { choices: [{ index: 0, delta: {}, error: :INF }] },
      "usage.prompt_tokens: 2**80" => { choices: [], usage: { prompt_tokens: big } },
      "arguments object with 1e400 and 2**80" =>
        ChunkHelpers.tool_chunk([header.call(function: { name: "f", arguments: { inf: :INF, big: big } })])
    }.each do |name, chunk|
      it "#{name}: same items, error and anomalies" do
        json = JSON.generate(chunk).gsub('"INF"', "1e400").gsub('"NEG_INF"', "-1e400").gsub('"BIG"', big.to_s)
        stream = [json, JSON.generate(good)]
        hash_processor = DiscourseAiStream::OpenAiMessageProcessor.new
        hashed = outcome.call(hash_processor, stream.map do |j|
          -> { hash_processor.process_streamed_message(parse_quietly.call(j)) }
        end)
        raw_processor = DiscourseAiStream::OpenAiMessageProcessor.new
        decoded = outcome.call(raw_processor, [-> { raw_processor.decode_chunk(sse(stream, done: false)) }])
        expect(decoded).to eq(hashed)
        expect(decoded.first.grep(Array).map(&:first)).to include("good")
      end
    end

    it "choices[0].error: Infinity raises ProviderError naming it, not \"null\"" do
      processor = DiscourseAiStream::OpenAiMessageProcessor.new
      expect { processor.process_streamed_message({ choices: [{ index: 0, delta: {}, error: Float::INFINITY }] }) }
        .to raise_error(DiscourseAiStream::ProviderError, "Infinity") { |e| expect(e.payload).to eq(Float::INFINITY) }
    end
  end

  it "duplicate keys: the last one wins, in the chunk and in the arguments, in both paths" do
    raw = '{"choices":[{"delta":{"content":"first","content":"second"}}],' \
          '"choices":[{"delta":{"tool_calls":[{"index":0,"id":"d","function":{"name":"f",' \
          '"arguments":"{\"k\":1,\"k\":2}"}}]},"finish_reason":"stop"}]}'
    decoded = DiscourseAiStream::OpenAiMessageProcessor.new.decode_chunk("#{good_sse}data: #{raw}\n\n")
    chunk = JSON.parse(raw, symbolize_names: true)
    hash_processor = DiscourseAiStream::OpenAiMessageProcessor.new
    hashed = [good, chunk].flat_map { |c| Array(hash_processor.process_streamed_message(c)) }
    [decoded, hashed].each do |items|
      expect(items.map { |i| i.is_a?(String) ? i : [i.id, i.parameters] })
        .to eq([["good", { q: "ok" }], ["d", { k: 2 }]])
    end
  end
end
