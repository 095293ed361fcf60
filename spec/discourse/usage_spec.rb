# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"

# final_log_update of each generation copies the processor's usage readers
# into the audit log row; the gem's processor must report what that
# generation's readers mean.
RSpec.describe "usage in the audit log with the gem installed", gc_stress: false do
  include DiscourseStandIns

  before { stub_rails_logger }
  after { DiscourseAiStream::Discourse.uninstall! }

  def stream_into_log(chunks)
    log = AiApiAuditLog.new
    reads = chunks.map { |chunk| "data: #{chunk}\n\n" } << "data: [DONE]\n\n"
    DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral")).perform_stream(reads, log: log)
    log
  end

  let(:cached_usage_chunk) do
    JSON.generate(choices: [], usage: { prompt_tokens: 172, completion_tokens: 23,
                                        prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 30 } })
  end

  context "with the legacy generation" do
    before do
      load_discourse_stand_ins(generation: :legacy)
      DiscourseAiStream::Discourse.install!
    end

    it "writes the bug report's usage into request_tokens and response_tokens" do
      log = stream_into_log([DiscourseStandIns::MISTRAL_CHUNK])
      expect([log.request_tokens, log.response_tokens]).to eq([172, 23])
      expect(log.raw_response_payload).to eq(DiscourseStandIns::MISTRAL_SSE)
    end

    it "reports prompt_tokens as sent and cache reads as cached_tokens" do
      log = stream_into_log([cached_usage_chunk])
      expect([log.request_tokens, log.response_tokens, log.cached_tokens]).to eq([172, 23, 100])
      expect([log.cache_read_tokens, log.cache_write_tokens]).to eq([nil, nil])
    end

    it "agrees with Discourse's own legacy processor" do
      DiscourseAiStream::Discourse.uninstall!
      stock = stream_into_log([cached_usage_chunk])
      DiscourseAiStream::Discourse.install!
      ours = stream_into_log([cached_usage_chunk])
      fields = %i[request_tokens response_tokens cached_tokens]
      expect(fields.map { |field| ours[field] }).to eq(fields.map { |field| stock[field] })
    end
  end

  # docs/usage-numbers.md: with several usage chunks the gem keeps the latest value of each
  # field and never lets a null erase one; the stock processors do not.
  context "with several usage chunks in one stream" do
    def usage_chunk(usage)
      JSON.generate(choices: [], usage: usage)
    end

    def logs(chunks, fields)
      DiscourseAiStream::Discourse.uninstall!
      stock = stream_into_log(chunks)
      DiscourseAiStream::Discourse.install!
      ours = stream_into_log(chunks)
      [fields.map { |field| ours[field] }, fields.map { |field| stock[field] }]
    end

    it "logs the last counts where the legacy processor kept the first (zeros first, as LocalAI sends)" do
      load_discourse_stand_ins(generation: :legacy)
      chunks = [usage_chunk(prompt_tokens: 0, completion_tokens: 0),
                usage_chunk(prompt_tokens: 172, completion_tokens: 23, prompt_tokens_details: { cached_tokens: 100 })]
      ours, stock = logs(chunks, %i[request_tokens response_tokens cached_tokens])
      expect(ours).to eq([172, 23, 100])
      expect(stock).to eq([0, 0, 100])
    end

    it "keeps earlier counts that a later usage leaves out, where the current processor zeroes them" do
      load_discourse_stand_ins(generation: :current)
      chunks = [usage_chunk(prompt_tokens: 172, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 100 }),
                usage_chunk(completion_tokens: 23)]
      ours, stock = logs(chunks, %i[request_tokens response_tokens cache_read_tokens cache_write_tokens])
      expect(ours).to eq([72, 23, 100, 0])
      expect(stock).to eq([0, 23, 0, 0])
    end

    it "takes a later completion_tokens of 0, which the current processor ignores" do
      load_discourse_stand_ins(generation: :current)
      chunks = [usage_chunk(prompt_tokens: 172, completion_tokens: 23),
                usage_chunk(prompt_tokens: 172, completion_tokens: 0)]
      ours, stock = logs(chunks, %i[request_tokens response_tokens])
      expect(ours).to eq([172, 0])
      expect(stock).to eq([172, 23])
    end
  end

  context "with the current generation" do
    before do
      load_discourse_stand_ins(generation: :current)
      DiscourseAiStream::Discourse.install!
    end

    it "writes the bug report's usage into request_tokens and response_tokens" do
      log = stream_into_log([DiscourseStandIns::MISTRAL_CHUNK])
      expect([log.request_tokens, log.response_tokens]).to eq([172, 23])
    end

    it "reports prompt_tokens net of cache reads and writes, and both cache counts" do
      log = stream_into_log([cached_usage_chunk])
      expect([log.request_tokens, log.response_tokens]).to eq([42, 23])
      expect([log.cache_read_tokens, log.cache_write_tokens]).to eq([100, 30])
      expect(log.cached_tokens).to be_nil
    end

    it "agrees with Discourse's own current processor" do
      DiscourseAiStream::Discourse.uninstall!
      stock = stream_into_log([cached_usage_chunk])
      DiscourseAiStream::Discourse.install!
      ours = stream_into_log([cached_usage_chunk])
      fields = %i[request_tokens response_tokens cache_read_tokens cache_write_tokens]
      expect(fields.map { |field| ours[field] }).to eq(fields.map { |field| stock[field] })
    end
  end
end
