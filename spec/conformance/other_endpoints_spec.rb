# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "support/conformance_helpers"
require_relative "support/stream_cases"

# Conformance with the OpenAI-compatible streams and bodies of
# discourse/discourse plugins/discourse-ai/spec/lib/completions/endpoints/
# vllm_spec.rb, samba_nova_spec.rb and open_router_spec.rb (their compliance
# mock streams are in compliance_streams_spec.rb). What those endpoints do
# on their own (vLLM turns reasoning_content into Thinking objects in its own
# decode_chunk) is not the processor's: here the processor must give the
# text and usage, and never reasoning as text.
# The examples are declared by StreamCases#stream and #response.
# rubocop:disable RSpec/EmptyExampleGroup
RSpec.describe "Discourse's vLLM, SambaNova and OpenRouter endpoint streams", :conformance do
  extend StreamCases

  describe "vllm_spec.rb" do
    # upstream: "can properly include usage in streaming mode": usage on every chunk,
    # growing; the finish chunk has content "" and a stop_reason; then a usage-only chunk.
    words = ["Hello", " Sam", ".", " It", "'s", " nice", " to", " meet", " you", ".", " Is", " there", " something",
             " I", " can", " help", " you", " with", " or", " would", " you", " like", " to", " chat", "?"]
    usage_at = ->(done) { { prompt_tokens: 46, total_tokens: 46 + done, completion_tokens: done } }
    cumulative = [delta_event({ role: "assistant", content: "" }, logprobs: nil, usage: usage_at.call(0))]
    words.each_with_index { |word, at| cumulative << delta_event({ content: word }, usage: usage_at.call(at + 1)) }
    cumulative << event(choices: [{ index: 0, delta: { content: "" }, finish_reason: "stop", stop_reason: nil }],
                        usage: usage_at.call(26))
    cumulative << event(choices: [], usage: usage_at.call(26))
    stream "text with cumulative usage on every chunk",
           payloads: cumulative, body: sse_body(cumulative, done: "data: [DONE]") do |steps, processor, _|
      expect(text_of(steps)).to eq("Hello Sam. It's nice to meet you. Is there something I can help you with " \
                                   "or would you like to chat?")
      expect(token_counts(processor)).to include(prompt: 46, completion: 26)
    end

    # upstream: "includes stream_options with include_usage in streaming mode"
    bare = [JSON.generate({ choices: [{ delta: { content: "hello" } }] })]
    stream "one bare text event, no line break after [DONE]",
           payloads: bare, body: sse_body(bare, done: "data: [DONE]") do |steps, _, _|
      expect(items_of(steps)).to eq(["hello"])
    end

    # upstream: "streams Thinking partials followed by content" (the Thinking objects
    # are vLLM's own decode_chunk's; the processor gives the content and the usage)
    reasoning = [{ choices: [{ delta: { role: "assistant", reasoning_content: "Let me " } }] },
                 { choices: [{ delta: { reasoning_content: "think." } }] },
                 { choices: [{ delta: { content: "The answer" } }] },
                 { choices: [{ delta: { content: " is 4." } }], usage: { prompt_tokens: 10, completion_tokens: 20 } }]
                .map { |chunk| JSON.generate(chunk) }
    stream "reasoning_content, then content with usage on the last content chunk",
           payloads: reasoning do |steps, processor, _|
      expect(text_of(steps)).to eq("The answer is 4.")
      expect(call_updates(steps)).to eq([])
      expect(token_counts(processor)).to include(prompt: 10, completion: 20)
    end

    # upstream: "correctly accounts for tokens in non streaming mode" (an empty tool_calls list)
    title = "Random Number Generator Produces Smallest Possible Result"
    response "upstream \"correctly accounts for tokens in non streaming mode\"",
             { id: "chat-nonstream", object: "chat.completion",
               choices: [{ index: 0, message: { role: "assistant", content: title, tool_calls: [] }, logprobs: nil,
                           finish_reason: "stop", stop_reason: nil }],
               usage: { prompt_tokens: 146, total_tokens: 156, completion_tokens: 10 }, prompt_logprobs: nil },
             items: [title], usage: { prompt: 146, completion: 10 }
    # upstream: "is able to invoke XML tools correctly" (native tools off: text for Discourse)
    xml = "<function_calls>\n<invoke>\n<tool_name>calculate</tool_name>\n<parameters>\n<expression>1+1</expression>" \
          "</parameters>\n</invoke>\n</function_calls>\nshould be ignored\n"
    response "upstream \"is able to invoke XML tools correctly\"",
             { choices: [{ message: { role: "assistant", content: xml }, finish_reason: "stop", index: 0 }],
               usage: { prompt_tokens: 337, completion_tokens: 162, total_tokens: 499 } },
             items: [xml], usage: { prompt: 337, completion: 162 }
    # upstream: "returns Thinking and content for non-streaming response with output_thinking" and
    # "omits Thinking when output_thinking is false"
    response "upstream reasoning_content in a whole message",
             { choices: [{ message: { role: "assistant", content: "The answer is 4.",
                                      reasoning_content: "Let me think step by step: 2+2=4" } }],
               usage: { prompt_tokens: 10, completion_tokens: 20 } },
             items: ["The answer is 4."], usage: { prompt: 10, completion: 20 }
    # upstream: "sends chat_template_kwargs when enable_thinking is set" and the example without it
    response "upstream enable_thinking", { choices: [{ message: { role: "assistant", content: "hello" } }],
                                           usage: { prompt_tokens: 10, completion_tokens: 5 } },
             items: ["hello"], usage: { prompt: 10, completion: 5 }
  end

  describe "samba_nova_spec.rb" do
    # upstream: "can stream completions": spaces after every colon and comma, the first
    # line indented by four spaces, and a usage chunk with SambaNova's own extra fields.
    samba = [JSON.generate({ id: "samba-1", object: "chat.completion.chunk", created: 1_721_336_361, model: "llama3-8b",
                             system_fingerprint: "fastcoe",
                             choices: [{ index: 0, delta: { content: "I am a bot" }, logprobs: nil,
                                         finish_reason: nil }] },
                           space: " "),
             JSON.generate({ id: "samba-1", object: "chat.completion.chunk", created: 1_721_336_361, model: "llama3-8b",
                             system_fingerprint: "fastcoe", choices: [],
                             usage: { is_last_response: true, total_tokens: 62, prompt_tokens: 21,
                                      completion_tokens: 41,
                                      time_to_first_token: 0.0915, total_latency: 0.168,
                                      completion_tokens_per_sec: 244.02 } }, space: " ")]
    samba_body = "    data: #{samba[0]}\n\ndata: #{samba[1]}\n\ndata: [DONE]\n"
    stream "text with a leading-space data line, then usage",
           payloads: samba, body: samba_body do |steps, processor, _|
      expect(items_of(steps)).to eq(["I am a bot"])
      expect(token_counts(processor)).to include(prompt: 21, completion: 41)
    end

    # upstream: "can perform regular completions"
    response "upstream \"can perform regular completions\"", { choices: [{ message: { content: "I am a bot" } }] },
             items: ["I am a bot"]
  end

  describe "open_router_spec.rb" do
    # upstream: "supports provider quantization and order selection", "sends thinking effort using
    # OpenRouter reasoning parameter", "preserves legacy reasoning_effort custom parameter ...",
    # "excludes disabled parameters from the request": whole messages only.
    %w[world reasoned legacy].push("test response").each do |text|
      response "upstream text #{text.inspect}", { choices: [{ message: { role: "assistant", content: text } }] },
               items: [text]
    end
  end
end
# rubocop:enable RSpec/EmptyExampleGroup
