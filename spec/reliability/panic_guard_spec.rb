# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/chunks"

# A panic in Rust must never reach Ruby as `fatal` (which ends the process):
# it becomes DiscourseAiStream::InternalError, and the processor it happened
# in refuses to be used again.
RSpec.describe "panic guard" do
  it "turns a panic in a native function into InternalError" do
    expect { DiscourseAiStream::Native.panic_for_tests("boom") }
      .to raise_error(DiscourseAiStream::InternalError, /internal error in discourse_ai_stream: boom/) { |e|
        expect(e).to be_a(DiscourseAiStream::Error)
        expect(e).to be_a(StandardError)
      }
  end

  it "poisons the processor a panic happened in, and only that one" do
    broken = DiscourseAiStream::OpenAiMessageProcessor.new
    expect { broken.__send__(:__panic_for_tests) }.to raise_error(DiscourseAiStream::InternalError, /deliberate panic/)
    expect { broken.process_streamed_message(text_chunk("x")) }
      .to raise_error(DiscourseAiStream::InternalError, /stopped after an earlier internal error/)

    healthy = DiscourseAiStream::OpenAiMessageProcessor.new
    expect(healthy.process_streamed_message(text_chunk("x"))).to eq("x")
  end

  it "lets the process keep running after a panic" do
    3.times { expect { DiscourseAiStream::Native.panic_for_tests("again") }.to raise_error(DiscourseAiStream::Error) }
    expect(DiscourseAiStream::OpenAiMessageProcessor.new.decode_chunk(sse([text_chunk("ok")]))).to eq(["ok"])
  end
end
