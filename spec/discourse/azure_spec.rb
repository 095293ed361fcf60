# frozen_string_literal: true

require_relative "../support/discourse_stand_ins"
require_relative "../support/sse_fixtures"

# Azure has no endpoint class of its own in Discourse: Base.endpoint_for
# picks Endpoints::OpenAi for the provider "azure" (OpenAi.can_contact?),
# which builds the stock OpenAiMessageProcessor like it does for OpenAI.
# So the patch of OpenAi is what covers Azure.
RSpec.describe "Azure with the gem installed", gc_stress: false do
  include_context "with the Discourse stand-ins"

  let(:azure_call) { ["call_azure9", "open_ticket", { priority: 2, tags: %w[vpn login] }] }

  def azure_endpoint
    klass = DiscourseAi::Completions::Endpoints::Base.endpoint_for("azure")
    klass.new(llm_model("azure"))
  end

  DiscourseStandIns::GENERATIONS.each do |generation|
    context "with the #{generation} generation" do
      before { load_discourse_stand_ins(generation: generation) }

      it "resolves azure to the OpenAi endpoint class, which install! patches" do
        integration.install!
        expect(DiscourseAi::Completions::Endpoints::Base.endpoint_for("azure"))
          .to be(DiscourseAi::Completions::Endpoints::OpenAi)
        expect(integration.patched_classes).to include(DiscourseAi::Completions::Endpoints::OpenAi)
      end

      [true, false].each do |fast|
        it "gives the Azure endpoint the gem's processor (fast_decode: #{fast})" do
          integration.install!(fast_decode: fast)
          azure = azure_endpoint
          log = AiApiAuditLog.new
          reads = SseFixtures.reads_of(SseFixtures.fixture_bytes("azure_content_filter"), 97)
          items = azure.perform_stream(reads, log: log)

          expect(azure.send(:processor)).to be_a(DiscourseAiStream::OpenAiMessageProcessor)
          expect(items.grep(String).join).to eq("On it.")
          expect(final_calls(items)).to eq([azure_call])
          expect(items.grep_v(String)).to all(be_an_instance_of(DiscourseAi::Completions::ToolCall))
          expect([log.request_tokens, log.response_tokens]).to eq([90, 30])
        end
      end

      it "gets both calls of the bug report's chunk out of the Azure endpoint" do
        integration.install!
        items = azure_endpoint.perform_stream([DiscourseStandIns::MISTRAL_SSE])
        expect(final_calls(items).map(&:first)).to eq(DiscourseStandIns::MISTRAL_IDS)
      end
    end
  end

  it "logs Azure's anomalies under the azure provider" do
    install_into(:current)
    orphan = { choices: [{ delta: { tool_calls: [{ index: 3, function: { arguments: "x" } }] } }] }
    azure_endpoint.perform_stream(["data: #{JSON.generate(orphan)}\n\n"])
    expect(logger.warnings.first)
      .to start_with("discourse_ai_stream: azure (DiscourseAi::Completions::Endpoints::OpenAi): orphan_fragment")
  end
end
