# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/discourse_stand_ins"
require_relative "support/upstream_bodies"

# The endpoint streams whose upstream assertions depend on what Discourse's
# endpoint does around the processor (each ToolCall once per read, the
# caller's `partial.dup`, the warn line, the audit log), replayed through
# the Discourse stand-ins with the gem installed (see spec/discourse/).
RSpec.describe "Discourse's endpoint streams with the gem installed", :conformance, gc_stress: false do
  include_context "with the Discourse stand-ins"

  before { install_into(:current) }

  def open_ai
    DiscourseAi::Completions::Endpoints::OpenAi.new(llm_model("open_ai"))
  end

  # upstream: open_ai_spec.rb "recovers from malformed streamed payloads" (newest) and
  # "will automatically recover from a bad payload" (older)
  it "goes on past the unreadable event, gives the text on both sides and logs a warning" do
    delivered = []
    open_ai.perform_stream(UpstreamBodies.malformed[:pieces]) { |item| delivered << item }
    expect(delivered.join).to eq(UpstreamBodies::MALFORMED_TEXT)
    expect(logger.warnings).to include(a_string_including("test1 ,"))
  end

  # upstream: open_ai_spec.rb (older) "properly handles spaces in tools payload and partial tool calls"
  it "shows the call once per read as it stands, and completes it in the read of the empty tool delta" do
    seen = []
    open_ai.perform_stream(UpstreamBodies.spaced[:pieces], partial_tool_calls: true) { |item| seen << item.dup }
    expect(seen.map { |call| call.parameters[:query] }).to eq(["Ad", "Adabas", "Adabas 9.", "Adabas 9.1"])
    expect(seen.last).to eq(DiscourseAi::Completions::ToolCall.new(id: "func_id", name: "google",
                                                                   parameters: { query: "Adabas 9.1" }))
    expect(seen.last.partial?).to be(false)
  end

  # upstream: endpoint_compliance.rb streaming_mode_tools, with OpenAiMock (one character per read)
  it "hands the caller exactly the one completed call of the compliance tool stream" do
    delivered = open_ai.perform_stream(UpstreamBodies.compliance_tool[:body].chars)
    id, name, parameters = UpstreamBodies::SYDNEY
    expect(delivered).to eq([DiscourseAi::Completions::ToolCall.new(id: id, name: name, parameters: parameters)])
  end

  # upstream: open_ai_spec.rb (older) "uses proper token accounting"
  it "writes the stream's usage to the audit log" do
    usage = { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29 }
    events = [{ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: nil }], usage: nil },
              { choices: [{ index: 0, delta: { content: "Hello" }, finish_reason: nil }], usage: nil },
              { choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: nil }, { choices: [], usage: usage }]
    reads = events.map { |chunk| "data: #{JSON.generate(chunk)}\n\n" } << "data: [DONE]"
    log = AiApiAuditLog.new
    expect(open_ai.perform_stream(reads, log: log)).to eq(["Hello"])
    expect([log.request_tokens, log.response_tokens]).to eq([20, 9])
  end
end
