# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"

# final_log_update of each generation copies the processor's usage readers
# into the audit log row; the gem's processor must report what that
# generation's readers mean.
RSpec.describe "usage in the audit log with the gem installed", gc_stress: false do
  include_context "with the Discourse stand-ins"

  def stream_into_log(chunks)
    log = AiApiAuditLog.new
    reads = chunks.map { |chunk| "data: #{chunk}\n\n" } << "data: [DONE]\n\n"
    DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral")).perform_stream(reads, log: log)
    log
  end

  # The fields of the audit log row, with the gem's processor and with
  # the stock one.
  def logs(chunks, fields)
    integration.uninstall!
    stock = stream_into_log(chunks)
    integration.install!
    ours = stream_into_log(chunks)
    [fields.map { |field| ours[field] }, fields.map { |field| stock[field] }]
  end

  let(:cached_usage_chunk) do
    JSON.generate(choices: [], usage: { prompt_tokens: 172, completion_tokens: 23,
                                        prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 30 } })
  end

  # What each generation's final_log_update makes of the cached usage chunk.
  usage_columns = %i[request_tokens response_tokens cached_tokens cache_read_tokens cache_write_tokens]
  {
    legacy: ["reports prompt_tokens as sent and cache reads as cached_tokens", [172, 23, 100, nil, nil]],
    current: ["reports prompt_tokens net of cache reads and writes, and both cache counts", [42, 23, nil, 100, 30]]
  }.each do |generation, (cached_usage, logged)|
    context "with the #{generation} generation" do
      before { install_into(generation) }

      it "writes the bug report's usage into request_tokens and response_tokens" do
        log = stream_into_log([DiscourseStandIns::MISTRAL_CHUNK])
        expect([log.request_tokens, log.response_tokens]).to eq([172, 23])
        expect(log.raw_response_payload).to eq(DiscourseStandIns::MISTRAL_SSE)
      end

      it cached_usage do
        log = stream_into_log([cached_usage_chunk])
        expect(usage_columns.map { |column| log[column] }).to eq(logged)
      end

      it "agrees with Discourse's own #{generation} processor" do
        ours, stock = logs([cached_usage_chunk], usage_columns)
        expect(ours).to eq(stock)
      end
    end
  end

  # docs/usage-numbers.md: with several usage chunks the gem keeps the latest value of each
  # field and never lets a null erase one; the stock processors do not.
  context "with several usage chunks in one stream" do
    def usage_chunk(usage)
      JSON.generate(choices: [], usage: usage)
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
end
