# frozen_string_literal: true

require "json"

module Bench
  # One benchmark input: whole SSE response bodies (usually one), each
  # already cut into the reads a caller would get from the HTTP body.
  # `protocol`: :chat (the default) or :responses (the Responses API).
  Workload = Struct.new(:name, :description, :streams, :partial, :protocol, keyword_init: true) do
    def responses?
      protocol == :responses
    end

    # Per stream, its 512-byte reads (the raw path's input), binary like Net::HTTP's.
    def reads(size = 512)
      @reads ||= {}
      @reads[size] ||= streams.map do |sse|
        (0...sse.bytesize).step(size).map { |at| sse.byteslice(at, size).b.freeze }.freeze
      end.freeze
    end

    def sse
      @sse ||= streams.join.b.freeze
    end

    # This workload's streams `times` over, each copy in its own memory,
    # laid out one after the other as a single larger workload's are: so
    # running it reads as many distinct bytes as a workload `times` the
    # size (see Measure#scaling).
    def spread(times)
      whole = (sse * times).freeze
      copies = (0...times).flat_map do |copy|
        at = copy * sse.bytesize
        streams.map { |stream| whole.byteslice(at, stream.bytesize).tap { at += stream.bytesize }.freeze }
      end
      Workload.new(name: "#{name} x#{times}", description: "#{description}, #{times} copies",
                   streams: copies, partial: partial, protocol: protocol)
    end

    def bytes
      sse.bytesize
    end

    # SSE events, counted as data lines ([DONE] included).
    def events
      @events ||= sse.scan(/^data:/).size
    end
  end

  # Deterministic generators for the benchmark's workloads. Every stream is
  # shaped like OpenAI's: a role chunk, content or tool-call deltas, a finish
  # chunk, a usage chunk, `[DONE]`; each chunk carries the fields a real one
  # does (id, object, created, model, system_fingerprint), which a decoder
  # must read past.
  module Workloads
    # Text with what JSON must escape (quotes, a backslash, a tab) and
    # multibyte characters.
    WORDS = (%w[the stream of tokens arrives one delta at a time and each carries a word or two with
                punctuation numbers like 42 or 3.14 unicode: café naïve 日本語 emoji 🎉 done] +
             ['"quotes",', "a\\backslash", "tabs\tand", "commas,"]).freeze

    module_function

    # A chunk with the common envelope around `choice` (nil: no choices).
    # As OpenAI's, the envelope is the same on every chunk of a stream.
    def chunk(choice, usage: nil)
      body = {
        id: "chatcmpl-AbC9bench0Xyz", object: "chat.completion.chunk", created: 1_733_000_000,
        model: "gpt-4o-2024-08-06", system_fingerprint: "fp_50cad350e4",
        choices: choice ? [{ index: 0 }.merge(choice)] : []
      }
      body[:usage] = usage if usage
      "data: #{JSON.generate(body)}\n\n"
    end

    def delta(delta, finish_reason: nil)
      chunk({ delta: delta, logprobs: nil, finish_reason: finish_reason })
    end

    def tail(finish_reason)
      usage = { prompt_tokens: 1200, completion_tokens: 800, total_tokens: 2000,
                prompt_tokens_details: { cached_tokens: 1024 } }
      "#{delta({}, finish_reason: finish_reason)}#{chunk(nil, usage: usage)}data: [DONE]\n\n"
    end

    # `count` content deltas of one to three words each.
    def text(count, seed: 1)
      rng = Random.new(seed)
      sse = +delta({ role: "assistant", content: "" })
      count.times do
        words = Array.new(rng.rand(1..3)) { WORDS[rng.rand(WORDS.size)] }
        sse << delta({ content: "#{words.join(" ")} " })
      end
      sse << tail("stop")
      build("text_#{count / 1000}k", "#{count} text deltas", sse, false)
    end

    # JSON arguments of about `size` bytes: a few short keys and one long
    # string (what create_artifact or a file edit sends).
    def arguments(size, seed:)
      rng = Random.new(seed)
      body = +""
      body << WORDS[rng.rand(WORDS.size)] << (rng.rand(8).zero? ? "\n" : " ") while body.bytesize < size
      JSON.generate({ path: "docs/notes-#{seed}.md", mode: "append", body: body, lines: [1, 2, 3], draft: false })
    end

    # Fragments of `step` bytes, never splitting a UTF-8 character (a server
    # sends whole characters; splitting inside one is the parser's business
    # and tested elsewhere).
    def fragments(text, step)
      out = []
      rest = text
      until rest.empty?
        piece = rest.byteslice(0, step)
        piece = rest.byteslice(0, piece.bytesize + 1) until piece.valid_encoding?
        out << piece
        rest = rest.byteslice(piece.bytesize..)
      end
      out
    end

    def tool_call_deltas(index, size, step, seed:)
      head = delta({ tool_calls: [{ index: index, id: "call_bench#{seed}", type: "function",
                                    function: { name: "write_file", arguments: "" } }] })
      fragments(arguments(size, seed: seed), step).reduce(+head) do |sse, fragment|
        sse << delta({ tool_calls: [{ index: index, function: { arguments: fragment } }] })
      end
    end

    # `calls` tool calls one after the other, arguments of `size` bytes in
    # `step`-byte fragments.
    def tools(name, description, calls:, size:, partial:, step: 5)
      sse = +delta({ role: "assistant", content: nil })
      calls.times { |i| sse << tool_call_deltas(i, size, step, seed: 100 + i) }
      sse << tail("tool_calls")
      build(name, description, sse, partial)
    end

    # Mistral: every call complete in one delta, finish_reason in the same chunk.
    def mistral
      calls = Array.new(3) do |i|
        { id: "mistral#{i}", type: "function",
          function: { name: "lookup", arguments: JSON.generate({ query: "item #{i}", limit: 5 + i }) } }
      end
      sse = [delta({ role: "assistant", content: "" }),
             delta({ content: "", tool_calls: calls }, finish_reason: "tool_calls"),
             chunk(nil, usage: { prompt_tokens: 90, completion_tokens: 40, total_tokens: 130 }),
             "data: [DONE]\n\n"].join
      build("mistral_3_in_1", "Mistral: 3 complete calls in one chunk", sse, false)
    end

    # Every recorded stream of spec/fixtures, one after the other, each
    # with a fresh processor (nil when there are none). Some of them end in
    # an error; the paths rescue it, as a caller would.
    def recorded(root)
      paths = Dir.glob(File.join(root, "spec/fixtures/*.sse"))
      return nil if paths.empty?

      Workload.new(name: "recorded", description: "#{paths.size} recorded streams of spec/fixtures, mixed",
                   streams: paths.map { |p| File.binread(p).freeze }, partial: true)
    end

    def build(name, description, sse, partial, protocol: :chat)
      Workload.new(name: name, description: description, streams: [sse.b.freeze], partial: partial,
                   protocol: protocol)
    end

    # The suite, in table order. `scale: false` leaves out the large members
    # of the scaling pairs.
    def all(root, scale: true)
      list = [
        text(2_000),
        tools("tools_4k", "3 calls, 4 KB args, 5-byte fragments", calls: 3, size: 4096, partial: false),
        tools("tools_4k_partial", "the same, partial_tool_calls", calls: 3, size: 4096, partial: true),
        tools("args_40k_partial", "1 call, 40 KB args, partial", calls: 1, size: 40_960, partial: true),
        mistral,
        recorded(root),
        *ResponsesWorkloads.all
      ].compact
      return list unless scale

      list.flat_map { |w| [w, large(w.name)].compact }
    end

    # One workload by name (bench/count). A large one is built alone,
    # without the rest of the suite.
    def named(root, name)
      small = LARGE.key(name)
      return large(small) if small

      all(root, scale: false).find { |w| w.name == name }
    end

    # The scaling pairs: small => large (the large one follows it in the table).
    LARGE = { "text_2k" => "text_20k", "args_40k_partial" => "args_400k_partial" }.freeze

    def large(small)
      case small
      when "text_2k" then text(20_000)
      when "args_40k_partial"
        tools("args_400k_partial", "1 call, 400 KB args, partial", calls: 1, size: 409_600, partial: true)
      end
    end
  end
end

require_relative "responses_workloads"
