# frozen_string_literal: true

require_relative "../support/chunks"
require_relative "../support/discourse_stand_ins"

# Discourse lets an error out of decode_chunk fail the request. The gem's
# errors carry the items the failing read produced besides the error; with
# the gem installed those reach the caller first, and the error is raised
# by the next decode_chunk or by decode_chunk_finish.
RSpec.describe "errors in a stream with the gem installed", gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:good_call) { { index: 0, id: "call_good", function: { name: "search", arguments: '{"q":"rust"}' } } }
  let(:bad_call) { { index: 1, id: "call_bad", function: { name: "fetch", arguments: '{"url":1}}x' } } }
  let(:text_after) { sse([text_chunk("after the error")], done: false) }

  def calls_chunk(*calls)
    tool_chunk(calls, finish: "tool_calls")
  end

  def run(reads, name: "Mistral")
    delivered = []
    endpoint = DiscourseAi::Completions::Endpoints.const_get(name).new(llm_model(name.downcase))
    error = nil
    begin
      endpoint.perform_stream(reads) { |item| delivered << item }
    rescue StandardError => e
      error = e
    end
    [delivered, error]
  end

  DiscourseStandIns::GENERATIONS.each do |generation|
    context "with the #{generation} generation" do
      before { install_into(generation) }

      it "delivers the calls of a read before the provider error that ends it, then raises" do
        delivered, error = run([sse([calls_chunk(good_call), { error: { message: "rate limited" } }], done: false)])
        expect(final_calls(delivered)).to eq([["call_good", "search", { q: "rust" }]])
        expect(error).to be_a(DiscourseAiStream::ProviderError)
        expect(error.message).to eq("rate limited")
        expect(logger.warnings.grep(/ProviderError in a read that also produced 1 item/).size).to eq(1)
        expect(logger.warnings.grep(/provider error in the stream: rate limited/).size).to eq(1)
      end

      it "delivers the good call beside one with broken arguments, then raises ToolArgumentsError" do
        delivered, error = run([sse([calls_chunk(good_call, bad_call)], done: false)])
        expect(final_calls(delivered).map(&:first)).to eq(["call_good"])
        expect(error).to be_a(DiscourseAiStream::ToolArgumentsError)
        expect(error.tool_id).to eq("call_bad")
      end

      it "raises on the next read, before decoding it" do
        reads = [sse([calls_chunk(good_call), { error: { message: "overloaded" } }], done: false), text_after]
        delivered, error = run(reads)
        expect(error).to be_a(DiscourseAiStream::ProviderError)
        expect(delivered.grep(String)).to eq([])
        expect(final_calls(delivered).map(&:first)).to eq(["call_good"])
      end

      it "raises at once when the failing read produced nothing else" do
        delivered, error = run([sse([{ error: { message: "rate limited" } }], done: false), text_after])
        expect(error).to be_a(DiscourseAiStream::ProviderError)
        expect(delivered).to eq([])
        expect(logger.warnings.grep(/in a read that also produced/)).to eq([])
      end

      it "delivers the failing event's own items through a decode_chunk of the endpoint's (Vllm)" do
        delivered, error = run([sse([calls_chunk(good_call, bad_call)], done: false)], name: "Vllm")
        expect(final_calls(delivered).map(&:first)).to eq(["call_good"])
        expect(error).to be_a(DiscourseAiStream::ToolArgumentsError)
      end

      # The endpoint's own decode_chunk calls the processor event by event:
      # the error of a late event of the read must not take the earlier
      # events' items with it (the stock processor, which drops it, hands
      # them out).
      it "delivers the items of a read's earlier events before its error, through the endpoint's decode_chunk" do
        read = sse([text_chunk("hi"), calls_chunk(good_call), { error: { message: "boom" } }, text_chunk("later")],
                   done: false)
        delivered, error = run([read], name: "Vllm")
        expect(delivered.grep(String)).to eq(%w[hi later])
        expect(final_calls(delivered)).to eq([["call_good", "search", { q: "rust" }]])
        expect(error).to be_a(DiscourseAiStream::ProviderError)
        expect(error.message).to eq("boom")
        label = "vllm (DiscourseAi::Completions::Endpoints::Vllm)"
        expect(tally.counts).to eq([1, { [:provider_error, label] => 1 }])
        # The same on the fast path's endpoints with fast_decode: false.
        install_into(generation, fast_decode: false)
        delivered, error = run([read])
        expect([delivered.grep(String), final_calls(delivered).map(&:first)]).to eq([%w[hi later], ["call_good"]])
        expect(error).to be_a(DiscourseAiStream::ProviderError)
      end
    end
  end

  it "leaves errors alone once uninstalled" do
    install_into(:current)
    integration.uninstall!
    delivered, error = run([sse([calls_chunk(good_call, bad_call)], done: false)])
    expect(error).to be_a(JSON::ParserError)
    expect(delivered).to eq([])
  end
end
