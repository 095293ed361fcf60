# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/responses_streams"
require_relative "support/conformance_helpers"

# Conformance with the newest specs of discourse/discourse that drive these
# two processors: plugins/discourse-ai/spec/lib/completions/
# output_limit_spec.rb (commit 7a4684a2; its other examples drive the
# Anthropic, Converse and Nova processors) and
# open_ai_responses_message_processor_spec.rb (commit dea02df6). Each group
# names the upstream example it mirrors; the inputs and expected values are
# the upstream facts, the specs are ours. A streamed example runs on the Hash
# path (each event parsed with Symbol keys, as Discourse parses it) and on
# the raw path (the events as SSE bytes: the whole body in one read, one byte
# per read, and random splits with a fixed seed).
RSpec.describe "Discourse's newest output-limit and Responses processor specs", :conformance do
  include ResponsesStreams

  let(:chat) { DiscourseAiStream::OpenAiMessageProcessor }
  let(:responses) { DiscourseAiStream::OpenAiResponsesMessageProcessor }

  # The body cut into reads of 1 to 23 bytes, the same each run.
  def random_reads(body)
    random = Random.new(20_261_206)
    reads = []
    reads << body.byteslice(reads.sum(&:bytesize), random.rand(1..23)) while reads.sum(&:bytesize) < body.bytesize
    reads
  end

  # The events as the wire carries them: `data:` lines (chat), or `event:`
  # and `data:` lines (Responses).
  def body_of(klass, events)
    return sse(events) if klass == responses

    "#{events.map { |event| "data: #{JSON.generate(event)}\n\n" }.join}data: [DONE]\n\n".b
  end

  # Runs `events` through new processors of `klass` every way, and yields
  # for each: the way, the processor, what it returned before finish, the
  # stop reason then, and what finish returned.
  def each_path(klass, events, **options)
    processor = klass.new(**options)
    items = events.flat_map { |event| Array(processor.process_streamed_message(event)) }
    yield "the Hash path", processor, items, processor.stop_reason, processor.finish
    body = body_of(klass, events)
    { "one read" => [body], "one byte per read" => body.bytes.map(&:chr), "random splits" => random_reads(body) }
      .each do |way, reads|
        processor = klass.new(**options)
        items = reads.flat_map { |read| processor.decode_chunk(read) }
        yield "the raw path, #{way}", processor, items, processor.stop_reason, processor.finish
      end
  end

  # upstream: output_limit_spec.rb "distinguishes Responses API output exhaustion from a completed answer"
  describe "the Responses API's stop reason" do
    it "is the incomplete reason of a whole response" do
      processor = responses.new
      processor.process_message(status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, output: [])
      expect(processor.stop_reason).to eq("max_output_tokens")
    end

    { { type: "response.incomplete", response: { incomplete_details: { reason: "max_output_tokens" } } } =>
        "max_output_tokens",
      { type: "response.completed", response: { output: [] } } => nil }.each do |event, reason|
      it "is #{reason.inspect} after #{event[:type]}" do
        each_path(responses, [event]) do |way, processor, items, before_finish, finished|
          expect([items, before_finish, finished, processor.stop_reason]).to eq([[], reason, [], reason]), way
        end
      end
    end
  end

  # upstream: output_limit_spec.rb "retains the chat completion length stop reason"
  it "keeps a chat completion's length stop reason, and its text" do
    event = { choices: [{ delta: { content: "Partial" }, finish_reason: "length" }] }
    each_path(chat, [event]) do |way, processor, items, before_finish, finished|
      expect([items, before_finish, finished, processor.stop_reason]).to eq([["Partial"], "length", [], "length"]), way
    end
  end

  describe "native web tool activity" do
    let(:streamed_item) do
      { id: "ws_1", type: "web_search_call", status: "completed",
        action: { type: "search", queries: ["Hacker News homepage"], query: "Hacker News homepage" } }
    end
    let(:completed_item) do
      sources = [{ type: "url_citation", url: "https://news.ycombinator.com", title: "Hacker News" }]
      streamed_item.merge(action: streamed_item[:action].merge(sources: sources))
    end
    let(:message_item) do
      { id: "msg_1", type: "message", role: "assistant",
        content: [{ type: "output_text", text: "HN summary",
                    annotations: [{ type: "url_citation", url: "https://news.ycombinator.com", title: "Hacker News" }] }] }
    end

    # upstream: open_ai_responses_message_processor_spec.rb "emits a thinking item for streamed web search calls"
    it "gives a thinking item for a streamed web search, and finish the completed response's output items" do
      events = [done(0, streamed_item), done(1, message_item),
                { type: "response.completed", response: { output: [completed_item, message_item] } }]
      each_path(responses, events, output_thinking: true) do |way, _, items, _, finished|
        # Upstream reads nothing of the message's done item; its text came
        # with no delta, so it is handed out from there (rule 80).
        expect(items.size).to eq(2), way
        expect(items.last).to eq("HN summary"), way
        expect(items.first).to be_a(DiscourseAiStream::Thinking)
          .and have_attributes(message: "Web search: Hacker News homepage", provider_info: {}, partial?: false)
        expect(finished.last.provider_info.dig(:open_ai_responses, :output_items))
          .to eq([completed_item, message_item]), way
      end
    end

    # upstream: open_ai_responses_message_processor_spec.rb "emits a thinking item for non-streamed web search calls"
    it "gives a thinking item carrying the output items for a whole response's web search, then its text" do
      output = [{ id: "ws_1", type: "web_search_call", status: "completed",
                  action: { type: "search", query: "Hacker News homepage" } },
                { id: "msg_1", type: "message", content: [{ type: "output_text", text: "HN summary" }] }]
      # Symbol keys, as Discourse parses a body, and String keys.
      [{ output: output }, JSON.parse(JSON.generate(output: output))].each do |body|
        result = responses.new(output_thinking: true).process_message(body)
        expect(result.first).to be_a(DiscourseAiStream::Thinking)
          .and have_attributes(message: "Web search: Hacker News homepage")
        expect(result.first.provider_info.dig(:open_ai_responses, :output_items)).to eq(output)
        expect(result.last).to eq("HN summary")
      end
    end
  end

  # upstream: open_ai_responses_message_processor_spec.rb "separates uncached, cache-read, and cache-write input tokens"
  it "separates uncached, cache-read and cache-write input tokens" do
    processor = responses.new
    processor.process_message(output: [], usage: { input_tokens: 2_006, output_tokens: 300,
                                                   input_tokens_details: { cached_tokens: 1_920,
                                                                           cache_write_tokens: 64 } })
    expect(token_counts(processor)).to eq(prompt: 22, completion: 300, cache_read: 1_920, cache_write: 64)
  end
end
