# frozen_string_literal: true

require_relative "support/chunks"
require_relative "support/sse_fixtures"

# What each recorded stream of spec/fixtures must decode to, written out by
# hand from the fixture (see spec/fixtures/README.md). Both paths and every
# way of splitting the bytes are checked against these, so a bug common to
# decode_chunk and the Hash path still fails.
module DecodeChunkExpectations
  extend SseFixtures

  # `read`: the cache reads the stream sent, nil when it sent none (the
  # legacy cached_tokens reader is then nil; cache_read_tokens is 0).
  def self.usage(prompt, completion, read = nil, write = 0)
    { prompt_tokens: prompt, completion_tokens: completion, cache_read_tokens: read || 0,
      cache_write_tokens: write, cached_tokens: read }
  end

  # A call with the provider data of a response that carries something back.
  def self.turn(call) = call.merge(provider_data: { chat_completions: { turn: :named } })

  # The usage of a stream that sent none: the default of an entry.
  NO_USAGE = SseFixtures::USAGE_READERS.to_h { |reader| [reader, nil] }.freeze

  EXPECTED = {
    "openai_reference" => {
      items: [done_call("call_wX1ref", "get_weather", { location: "Berlin", unit: "celsius" }),
              done_call("call_tM2ref", "get_time", { tz: "Europe/Berlin" })],
      usage: usage(82, 41, 0)
    },
    "mistral_parallel" => {
      items: ["Checking both cities.",
              done_call("D681PevKs", "get_weather", { city: "Paris" }),
              done_call("Xk29LmQpT", "get_weather", { city: "Lyon", days: 2 })],
      usage: usage(120, 41)
    },
    "gemini_no_index" => {
      items: ["Let me look that up.",
              done_call("function-call-1111", "search", { query: "sse framing" }),
              done_call("function-call-2222", "search", { query: "utf-8 bom", limit: 5 })],
      usage: usage(64, 30)
    },
    # A `reasoning` or `reasoning_content` field (even empty) names each
    # call of the response with its turn (rule 79).
    "ollama_reused_index" => {
      items: [turn(done_call("call_o1aa", "get_weather", { city: "Oslo" })),
              turn(done_call("call_o2bb", "get_weather", { city: "Bergen" })),
              turn(done_call("call_o3cc", "get_time", {}))],
      usage: usage(210, 57)
    },
    "vllm_hermes" => {
      items: [turn(done_call("chatcmpl-tool-a1", "read_file", { path: "README.md" })),
              turn(done_call("chatcmpl-tool-b2", "read_file", { path: "lib/a.rb", lines: [1, 20] }))],
      usage: usage(300, 52)
    },
    "tgi_object_arguments" => {
      items: [done_call("0", "get_forecast",
                        { location: { city: "Rome", country: "IT" }, days: 3, metric: true, note: nil })]
    },
    "interleaved_aggregator" => {
      items: [done_call("call_agA", "search", { q: "rust magnus" }),
              done_call("call_agB", "fetch", { url: "https://example.com/a" })]
    },
    "llamacpp_nested_id" => {
      items: [done_call("aB3dE5fG7h", "get_weather", { location: "Madrid" }),
              done_call("Zy9xW8vU7t", "get_time", { zone: "CET" })],
      usage: usage(150, 33)
    },
    "localai_same_id_two_indexes" => {
      # Rule 14: the same id and name at another index continue a call
      # whose arguments are not complete yet: one call.
      items: [done_call("call_la7", "lookup", { term: "server-sent events" })],
      usage: usage(95, 18)
    },
    "claude_compat_sparse_index" => {
      items: ["I'll check the calendar.",
              done_call("toolu_01AbCdEf", "list_events", { day: "2026-01-05", all: false }),
              done_call("toolu_01GhIjKl", "no_args_tool", {})],
      # 400 sent, 300 cache reads and 20 cache writes: 80 net.
      usage: usage(80, 60, 300, 20)
    },
    "litellm_repeated_ids" => {
      items: [done_call("call_lt1", "search", { q: "ruby gc" }),
              done_call("call_lt2", "search", { q: "rust ffi" })],
      usage: usage(77, 24)
    },
    "lmstudio_changing_id" => {
      items: [done_call("427163985", "create_note", { title: "Groceries", body: "milk\neggs" })],
      anomalies: %i[id_changed]
    },
    "poolside_integer_ids" => {
      items: [done_call("7", "run_tests", { path: "spec" }), done_call("8", "run_linter", { fix: true })],
      # One per call: each integer id is reported with the call it belongs to.
      anomalies: %i[converted_field converted_field]
    },
    "deepseek_cache_usage" => {
      items: ["Sure.", turn(done_call("call_0_5f1e", "git_log", { limit: 10 }))],
      # 768 cache hits reported twice, counted once: 1000 - 768 = 232 net.
      usage: usage(232, 25, 768)
    },
    "groq_x_groq_usage" => {
      items: [done_call("call_gq1", "convert", { amount: 12.5, from: "EUR", to: "USD" }),
              done_call("call_gq2", "convert", { amount: 3, from: "GBP", to: "JPY" })],
      usage: usage(240, 44)
    },
    "openrouter_keepalives" => {
      items: ["Searching", " now.\n", done_call("toolu_vrtx_01Or", "search", { q: "café hours" })],
      # 500 sent, 200 cache reads, 100 cache writes.
      usage: usage(200, 31, 200, 100)
    },
    "azure_content_filter" => {
      items: ["On it.", done_call("call_azure9", "open_ticket", { priority: 2, tags: %w[vpn login] })],
      usage: usage(90, 30, 0)
    },
    "mistral_reasoning_parts" => {
      items: ["The answer", " is 3.", "\n"],
      usage: usage(12, 28)
    },
    "fireworks_null_arguments" => {
      items: [done_call("call_fwX1", "translate", { text: "hello", to: "de" })],
      usage: usage(44, 16)
    },
    "sglang_no_index" => {
      items: [done_call("0", "add", { a: 1, b: 2 }), done_call("1", "mul", { a: 3, b: 4 })]
    },
    "old_vllm_empty_ids" => {
      items: [done_call("chatcmpl-tool-c1", "ping", { host: "a.example" }),
              done_call("chatcmpl-tool-c2", "ping", { host: "b.example" })]
    },
    "sensenova_late_content" => {
      items: ["One moment.", done_call("call_sn1", "get_stock", { symbol: "ACME" }), " Done."],
      usage: usage(70, 12)
    },
    "truncated" => {
      items: ["Writing the file.", done_call("call_tr1", "write_file", { path: "/tmp/a.txt", body: "hi" })],
      anomalies: %i[truncated repaired_arguments]
    }
  }.freeze
end

RSpec.describe "OpenAiMessageProcessor#decode_chunk" do
  def new_processor(**options)
    DiscourseAiStream::OpenAiMessageProcessor.new(usage: :current, **options)
  end

  # Raw bytes whole (or in the given reads), then finish: the items.
  def decode(processor, *reads)
    decoded_items(processor, reads)
  end

  # The items of `bytes` decoded whole, checking the stream had no anomaly.
  def clean_decode(bytes)
    processor = new_processor
    items = decode(processor, bytes)
    expect(processor.anomalies).to be_empty
    items
  end

  # A data line and its blank line, for hand-built streams.
  def event(hash, newline: "\n")
    "data: #{JSON.generate(hash)}#{newline}#{newline}"
  end

  # Every way of cutting `bytes` into two reads.
  def two_read_splits(bytes)
    (0..bytes.bytesize).map { |cut| [bytes.byteslice(0, cut), bytes.byteslice(cut, bytes.bytesize - cut)] }
  end

  describe "the recorded streams" do
    it "has written expectations for every fixture, and a fixture for every expectation" do
      expect(DecodeChunkExpectations::EXPECTED.keys.sort).to eq(fixture_names)
      expect(fixture_names.size).to be >= 19
    end

    it "starts every fixture with one comment line saying which server shape it models" do
      fixture_names.each do |name|
        expect(fixture_bytes(name)).to start_with(": models "), name
      end
    end

    SseFixtures.fixture_names.each do |name|
      context "with #{name}.sse" do
        let(:bytes) { fixture_bytes(name) }
        let(:expected) { DecodeChunkExpectations::EXPECTED.fetch(name) }

        def expect_expected(processor, items, how)
          expect(summarize(items)).to eq(expected[:items]), "items #{how}"
          expect(tool_calls_in(items)).to all(be_an_instance_of(DiscourseAiStream::ToolCall))
          expect(usage_of(processor)).to eq(expected.fetch(:usage, DecodeChunkExpectations::NO_USAGE)), "usage #{how}"
          expect(anomaly_kinds(processor)).to eq(expected.fetch(:anomalies, [])), "anomalies #{how}"
        end

        it "decodes the whole stream in one read to the expected text, calls and usage" do
          processor = new_processor
          expect_expected(processor, decode(processor, bytes), "whole")
        end

        it "gives the same in 512-byte reads" do
          processor = new_processor
          expect_expected(processor, decode(processor, *reads_of(bytes, 512)), "in 512-byte reads")
        end

        it "gives the same one byte at a time" do
          processor = new_processor
          expect_expected(processor, decode(processor, *reads_of(bytes, 1)), "in 1-byte reads")
        end

        it "gives the same in random splits (fixed seed)" do
          random = Random.new(20_260_105)
          [2, 3, 8, 8, 20, 60].each_with_index do |count, round|
            processor = new_processor
            reads = random_reads(bytes, random, count: count)
            expect_expected(processor, decode(processor, *reads), "in random split #{round} (#{count} cuts)")
          end
        end

        it "gives the same through the Hash path (JSON.parse of each data event, process_streamed_message)" do
          events = sse_events(bytes)
          expect(events).not_to be_empty
          processor = new_processor
          expect_expected(processor, hash_path_items(processor, events), "through the Hash path")
        end
      end
    end
  end

  describe "SSE framing" do
    let(:chunks) do
      [text_chunk("Hi "), tool_chunk([call("call_f1", "search", "", index: 0)]),
       tool_chunk([fragment(0, '{"q":')]), tool_chunk([fragment(0, '"café"}')]), finish_chunk]
    end
    let(:expected) { ["Hi ", done_call("call_f1", "search", { q: "café" })] }

    it "reads LF, CRLF and lone CR line ends alike, whole and one byte at a time" do
      ["\n", "\r\n", "\r"].each do |newline|
        bytes = sse(chunks, newline: newline)
        expect(summarize(decode(new_processor, bytes))).to eq(expected), newline.inspect
        expect(summarize(decode(new_processor, *reads_of(bytes, 1)))).to eq(expected), "#{newline.inspect} bytewise"
      end
    end

    it "reads a stream that mixes the three line ends" do
      newlines = ["\n", "\r\n", "\r", "\r\n", "\n"]
      bytes = chunks.zip(newlines).map { |chunk, newline| event(chunk, newline: newline) }.join.b
      expect(summarize(clean_decode(bytes))).to eq(expected)
    end

    it "takes a CRLF split across two reads as one line end (the LF does not end the event)" do
      # If the CR and the LF counted as two line ends, the blank line between
      # them would end this two-line event with its JSON incomplete.
      processor = new_processor
      first = processor.decode_chunk("data: {\"choices\":[{\"index\":0,\r")
      second = processor.decode_chunk("\ndata: \"delta\":{\"content\":\"a\"}}]}\r\n\r\n")
      expect([first, second]).to eq([[], ["a"]])
      expect(processor.anomalies).to be_empty
    end

    it "takes a CR at the end of a read as a line end when the next read does not start with LF" do
      processor = new_processor
      expect(processor.decode_chunk(event(text_chunk("one"), newline: "\r"))).to eq(["one"])
      expect(processor.decode_chunk("\r")).to eq([])
      expect(processor.decode_chunk(event(text_chunk("two"), newline: "\r"))).to eq(["two"])
    end

    it "reads data: without a space after the colon" do
      bytes = [*chunks.map { |chunk| JSON.generate(chunk) }, "[DONE]"].map { |data| "data:#{data}\n\n" }.join
      expect(summarize(clean_decode(bytes))).to eq(expected)
    end

    # Events whose JSON is spread over several data lines, each decoding
    # cleanly to one text.
    {
      "joins the data lines of one event (a JSON value spread over several lines)" =>
        ["data: {\"choices\":[{\"index\":0,\n" \
         "data: \"delta\":{\"content\":\"multi\"},\n" \
         "data: \"finish_reason\":null}]}\n\n", "multi"],
      "skips comments and keep-alives, also between the data lines of one event" =>
        [": OPENROUTER PROCESSING\n\n:\n: ping\r\n" \
         "data: {\"choices\":[{\"index\":0,\n" \
         ": keep-alive inside an event\n" \
         "data: \"delta\":{\"content\":\"kept\"}}]}\n\n" \
         ": OPENROUTER PROCESSING\n\n", "kept"]
    }.each do |description, (bytes, text)|
      it(description) { expect(clean_decode(bytes)).to eq([text]) }
    end

    it "joins data lines with a newline, so a number split over two lines does not become one number" do
      # Joined with "\n" the payload is `{"usage":{"prompt_tokens":1\n2}}`:
      # not JSON. Joined with nothing it would silently read 12.
      processor = new_processor
      expect(processor.decode_chunk("data: {\"usage\":{\"prompt_tokens\":1\ndata: 2}}\n\n")).to eq([])
      expect(anomaly_kinds(processor)).to eq(%i[unreadable_event])
      expect(processor.prompt_tokens).to be_nil
    end

    it "reads data lines that each hold a whole chunk, without blank lines between them" do
      bytes = "data: #{JSON.generate(text_chunk("p"))}\ndata: #{JSON.generate(text_chunk("q"))}\n\n"
      expect(decode(new_processor, bytes)).to eq(%w[p q])
    end

    it "skips a non-JSON data payload (data: ping) as a keep-alive, recording it" do
      processor = new_processor
      expect(decode(processor, "data: ping\n\n#{event(text_chunk("after"))}")).to eq(["after"])
      expect(processor.anomalies).to contain_exactly(a_hash_including(kind: :non_json_data, excerpt: "ping"))
    end

    it "skips empty data events without an anomaly" do
      bytes = "data:\n\ndata: \n\ndata:   \n\n#{event(text_chunk("x"))}data:\r\n\r\n"
      expect(clean_decode(bytes)).to eq(["x"])
    end

    it "ignores event:, id: and retry: fields of ordinary events" do
      bytes = "event: message\nid: 41\nretry: 3000\n#{event(text_chunk("x"))}id: 42\n#{event(text_chunk("y"))}"
      expect(clean_decode(bytes)).to eq(%w[x y])
    end

    it "gives the same items with [DONE] and when EOF ends the stream" do
      with_done = new_processor
      at_eof = new_processor
      expect(summarize(decode(with_done, sse(chunks)))).to eq(expected)
      expect(summarize(decode(at_eof, sse(chunks, done: false)))).to eq(expected)
      expect(with_done.anomalies + at_eof.anomalies).to be_empty
    end

    it "reads a last event that has no line end at all when finish is called" do
      processor = new_processor
      expect(processor.decode_chunk("data: #{JSON.generate(text_chunk("tail"))}")).to eq([])
      expect(processor.finish).to eq(["tail"])
      expect(processor.anomalies).to be_empty
    end

    it "skips a last event cut inside its JSON at EOF, recording :truncated_event" do
      processor = new_processor
      expect(processor.decode_chunk("#{event(text_chunk("whole"))}data: {\"choices\":[{\"delta\"")).to eq(["whole"])
      expect(processor.finish).to eq([])
      expect(anomaly_kinds(processor)).to eq(%i[truncated_event])
    end

    it "completes open calls at [DONE] without finish_reason and records no truncation" do
      stream = sse([tool_chunk([call("call_d1", "ping", '{"host":"x"}', index: 0)])])
      processor = new_processor
      expect(summarize(decode(processor, stream))).to eq([done_call("call_d1", "ping", { host: "x" })])
      expect(anomaly_kinds(processor)).not_to include(:truncated)
    end

    context "with event: error" do
      it "raises ProviderError with the provider's message and error object" do
        processor = new_processor
        bytes = "#{event(text_chunk("Hel"))}event: error\n" \
                "data: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"}}\n\n"
        expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::ProviderError) { |e|
          expect(e.message).to eq("Overloaded")
          expect(e.payload).to eq({ message: "Overloaded", type: "overloaded_error" })
          expect(e.items).to eq(["Hel"])
        }
      end

      it "raises ProviderError for an error event without an error key, carrying the whole event" do
        processor = new_processor
        expect { processor.decode_chunk("event: error\ndata: {\"message\":\"rate limited\"}\n\n") }
          .to raise_error(DiscourseAiStream::ProviderError) { |e|
            expect(e.message).to include("rate limited")
            expect(e.payload).to eq({ message: "rate limited" })
          }
      end

      it "raises ProviderError for an error event whose data is plain text" do
        processor = new_processor
        expect { processor.decode_chunk("event: error\ndata: upstream timeout\n\n") }
          .to raise_error(DiscourseAiStream::ProviderError, "upstream timeout")
      end

      it "applies only to its own event: the next event of the read is decoded too, into the error's items" do
        processor = new_processor
        bytes = "event: error\ndata: {\"error\":{\"message\":\"brief\"}}\n\n#{event(text_chunk("later"))}"
        expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::ProviderError, "brief") { |e|
          expect(e.items).to eq(["later"])
        }
        expect(processor.decode_chunk("")).to eq([])
      end
    end

    it "drops a leading UTF-8 BOM, also when it arrives one byte at a time" do
      bytes = "\xEF\xBB\xBF".b + sse(chunks)
      [[bytes], reads_of(bytes, 1)].each do |reads|
        processor = new_processor
        expect(summarize(decode(processor, *reads))).to eq(expected)
        expect(processor.anomalies).to be_empty
      end
    end

    it "decodes a UTF-8 character split across reads at every byte position" do
      text = "café ☕ 𝄞 ok"
      bytes = sse([text_chunk(text)])
      two_read_splits(bytes).each do |reads|
        expect(decode(new_processor, *reads)).to eq([text]), "cut at #{reads.first.bytesize}"
      end
      expect(decode(new_processor, *reads_of(bytes, 1))).to eq([text])
    end

    it "decodes a JSON string escape (\\u00e9, a surrogate pair) split across reads at every byte position" do
      bytes = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"caf\\u00e9 \\ud834\\udd1e\"}}]}\n\n".b
      two_read_splits(bytes).each do |reads|
        expect(decode(new_processor, *reads)).to eq(["café 𝄞"]), "cut at #{reads.first.bytesize}"
      end
    end

    it "accepts binary and UTF-8 encoded (also frozen) input Strings alike and returns UTF-8 text" do
      bytes = sse(chunks)
      inputs = [bytes.b, bytes.dup.force_encoding(Encoding::UTF_8), bytes.dup.force_encoding(Encoding::UTF_8).freeze]
      inputs.each do |input|
        items = decode(new_processor, input)
        expect(summarize(items)).to eq(expected), input.encoding.to_s
        expect(items.first.encoding).to eq(Encoding::UTF_8)
        expect(items.first).to be_valid_encoding
      end
      # UTF-8 labelled reads cut inside a character are invalid Strings; they are bytes all the same.
      utf8_reads = reads_of(bytes, 1).map { |read| read.force_encoding(Encoding::UTF_8) }
      expect(summarize(decode(new_processor, *utf8_reads))).to eq(expected)
    end
  end

  describe "bad input" do
    let(:open_call) { sse([tool_chunk([call("call_prior", "save", '{"n":1}', index: 0)])], done: false) }
    let(:prior) { [done_call("call_prior", "save", { n: 1 })] }

    it "skips a data line that starts like JSON but does not parse, reporting it with an excerpt" do
      processor = new_processor
      processor.decode_chunk(open_call)
      bad = "{\"choices\": [}, #{'"padding", ' * 40}\"end\"]}"
      bytes = "#{event(text_chunk("before"))}data: #{bad}\n\n#{event(text_chunk("after"))}"
      expect(processor.decode_chunk(bytes)).to eq(%w[before after])
      anomaly = processor.anomalies.last
      expect(anomaly).to include(kind: :unreadable_event, message: /skipped.*\{"choices": \[\}/)
      expect(anomaly[:excerpt]).to start_with("{\"choices\": [}")
      expect(anomaly[:excerpt].bytesize).to be < bad.bytesize
      expect(summarize(processor.finish)).to eq(prior)
    end

    it "with strict: true raises StreamError naming a data line that starts like JSON but does not parse" do
      processor = new_processor(strict: true)
      processor.decode_chunk(open_call)
      bad = "{\"choices\": [}, #{'"padding", ' * 40}\"end\"]}"
      bytes = "#{event(text_chunk("before"))}data: #{bad}\n\n#{event(text_chunk("after"))}"
      expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::StreamError) { |e|
        expect(e.kind).to eq(:invalid_json)
        expect(e.excerpt).to start_with("{\"choices\": [}")
        expect(e.excerpt.bytesize).to be < bad.bytesize
        expect(e.message).to include("{\"choices\": [}")
        expect(e.items).to eq(%w[before after])
      }
      # The whole read was decoded: nothing is held back for the next call.
      expect(processor.decode_chunk("")).to eq([])
      expect(summarize(processor.finish)).to eq(prior)
    end

    it "raises StreamError for a line over max_line_bytes as soon as it is too long, " \
       "then skips it without raising again and goes on after its line end" do
      processor = new_processor(max_line_bytes: 256)
      expect(processor.max_line_bytes).to eq(256)
      expect(processor.decode_chunk(open_call)).to eq([])
      expect { processor.decode_chunk("data: {\"choices\":[{\"delta\":{\"content\":\"#{"x" * 300}") }
        .to raise_error(DiscourseAiStream::StreamError) { |e|
          expect(e.kind).to eq(:line_too_long)
          expect(e.excerpt).to start_with("data: {\"choices\"")
          expect(e.excerpt.bytesize).to be < 300
        }
      200.times { expect(processor.decode_chunk("y" * 1000)).to eq([]) }
      expect(processor.decode_chunk("\"}}]}\n\n#{event(text_chunk("next"))}")).to eq(["next"])
      expect(summarize(processor.finish)).to eq(prior)
    end

    it "raises StreamError for a complete line over the limit and still decodes the rest of that read" do
      processor = new_processor(max_line_bytes: 256)
      bytes = "data: {\"pad\":\"#{"x" * 400}\"}\n\n#{event(text_chunk("rest"))}"
      expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::StreamError) { |e|
        expect(e.kind).to eq(:line_too_long)
        expect(e.items).to eq(["rest"])
      }
      expect(processor.decode_chunk("")).to eq([])
    end

    it "skips an event with invalid UTF-8 in text, reporting it; with strict: true raises StreamError" do
      bytes = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"caf\xFF\"}}]}\n\n".b
      processor = new_processor
      processor.decode_chunk(open_call)
      expect(processor.decode_chunk(bytes)).to eq([])
      expect(processor.anomalies.last).to include(kind: :unreadable_event, message: /UTF-8/)
      expect(summarize(processor.finish)).to eq(prior)
      processor = new_processor(strict: true)
      processor.decode_chunk(open_call)
      expect { processor.decode_chunk(bytes) }
        .to raise_error(DiscourseAiStream::StreamError) { |e| expect(e.kind).to eq(:invalid_utf8) }
      expect(summarize(processor.finish)).to eq(prior)
    end

    it "raises StreamError for JSON nested deeper than the limit, and not for nesting within it" do
      nested = ->(depth) { "data: {\"choices\":[],\"extra\":#{"[" * depth}#{"]" * depth}}\n\n" }
      processor = new_processor
      processor.decode_chunk(open_call)
      expect(processor.decode_chunk(nested.call(100))).to eq([])
      expect { processor.decode_chunk(nested.call(200)) }
        .to raise_error(DiscourseAiStream::StreamError) { |e| expect(e.kind).to eq(:too_deep) }
      expect(summarize(processor.finish)).to eq(prior)
    end

    it "keeps what a failing read had completed in the error's items, and finish still answers" do
      processor = new_processor(strict: true)
      finished = sse([tool_chunk([call("call_a", "one", "{}", index: 0)], finish: "tool_calls")], done: false)
      bytes = "#{finished}data: {not json\n\n"
      expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::StreamError) { |e|
        expect(summarize(e.items)).to eq([done_call("call_a", "one", {})])
      }
      expect(processor.finish).to eq([])
    end
  end

  describe "in-band provider errors" do
    error_events = {
      "an error object" => [{ error: { message: "Rate limit exceeded", code: 429 } },
                            "Rate limit exceeded", { message: "Rate limit exceeded", code: 429 }],
      "vLLM's object: error" => [{ object: "error", message: "max tokens exceeded", type: "BadRequestError",
                                   param: nil, code: 400 }, "max tokens exceeded", :event],
      "finish_reason: error with an error object" => [
        { choices: [{ index: 0, delta: { content: "" }, finish_reason: "error",
                      error: { message: "upstream died", code: 502 } }] },
        "upstream died", { message: "upstream died", code: 502 }
      ]
    }

    error_events.each do |what, (error_event, message, payload)|
      context "with #{what}" do
        let(:expected_payload) { payload == :event ? parsed(error_event) : payload }

        it "raises ProviderError from decode_chunk; text already returned stays returned" do
          processor = new_processor
          expect(processor.decode_chunk(sse([text_chunk("Hel")], done: false))).to eq(["Hel"])
          bytes = sse([text_chunk("lo"), error_event], done: false)
          expect { processor.decode_chunk(bytes) }.to raise_error(DiscourseAiStream::ProviderError) { |e|
            expect(e.message).to eq(message)
            expect(e.payload).to eq(expected_payload)
            expect(e.items).to eq(["lo"])
          }
        end

        it "raises ProviderError from process_streamed_message" do
          processor = new_processor
          expect(processor.process_streamed_message(parsed(text_chunk("Hel")))).to eq("Hel")
          expect { processor.process_streamed_message(parsed(error_event)) }
            .to raise_error(DiscourseAiStream::ProviderError) { |e|
              expect(e.message).to eq(message)
              expect(e.payload).to eq(expected_payload)
              expect(e.items).to eq([])
            }
        end
      end
    end

    it "keeps the text of the chunk that ends in finish_reason: error in the error's items, in both paths" do
      chunk = { choices: [{ index: 0, delta: { content: "partial answer" }, finish_reason: "error",
                            error: { message: "upstream died" } }] }
      expect { new_processor.decode_chunk(sse([chunk])) }
        .to raise_error(DiscourseAiStream::ProviderError) { |e| expect(e.items).to eq(["partial answer"]) }
      expect { new_processor.process_streamed_message(parsed(chunk)) }
        .to raise_error(DiscourseAiStream::ProviderError) { |e| expect(e.items).to eq(["partial answer"]) }
    end
  end

  describe "the :truncated anomaly" do
    it "is recorded when finish finds open calls, no finish_reason and no [DONE]; the calls still come out" do
      chunks = [text_chunk("x"), tool_chunk([call("call_cut", "write", '{"a": "b"}', index: 0)])]
      processor = new_processor
      items = decode(processor, sse(chunks, done: false))
      expect(summarize(items)).to eq(["x", done_call("call_cut", "write", { a: "b" })])
      expect(anomaly_kinds(processor)).to eq(%i[truncated])
    end

    it "names the calls it completed, in both paths" do
      stream = [tool_chunk([call("call_cut", "write", '{"a": 1', index: 0)])]
      raw = new_processor
      hash = new_processor
      expect(summarize(decode(raw, sse(stream, done: false)))).to eq([done_call("call_cut", "write", { a: 1 })])
      expect(summarize(stream_items(hash, stream.map { |c| parsed(c) })))
        .to eq([done_call("call_cut", "write", { a: 1 })])
      [raw, hash].each do |processor|
        truncated = processor.anomalies.select { |a| a[:kind] == :truncated }
        expect(truncated.size).to eq(1)
        expect(truncated.first[:message]).to include("call_cut")
        expect(truncated.first).to be_frozen
      end
    end

    it "is not recorded with [DONE], with a finish_reason, or when no call is open" do
      stream = [tool_chunk([call("call_ok", "write", '{"a": 1}', index: 0)])]
      [sse(stream), sse(stream + [finish_chunk], done: false), sse([text_chunk("only text")], done: false)]
        .each do |bytes|
          processor = new_processor
          decode(processor, bytes)
          expect(anomaly_kinds(processor)).not_to include(:truncated)
        end
    end
  end
end
