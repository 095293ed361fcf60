# frozen_string_literal: true

require "json"
require_relative "conformance_helpers"

# Streams with the quirks of Discourse's endpoint specs, written here from
# the upstream facts, for the conformance specs that replay them through the
# processor and through the Discourse stand-ins. Each gives `payloads` (the
# events' JSON as on the wire, for the Hash path), `body` (the raw bytes) and,
# where the upstream spec splits the body itself, `pieces` (its reads).
module UpstreamBodies
  module_function

  # The compliance mocks (endpoint_compliance.rb with OpenAiMock / VllmMock):
  # one delta per event in a choice with no index, `finish_reason` ("stop_sequence"
  # on the last event) and `index` at the top level of the event, events joined by
  # a blank line, `data: [DONE]` glued onto the last event's line.
  def compliance(deltas)
    payloads = deltas.each_with_index.map do |delta, serial|
      JSON.generate({ id: format("chatcmpl-%032x", serial), object: "chat.completion.chunk", created: 1_700_000_000,
                      model: "mock-model", choices: [{ delta: delta }],
                      finish_reason: serial == deltas.size - 1 ? "stop_sequence" : nil, index: 0 })
    end
    { payloads: payloads, body: "#{payloads.map { |payload| "data: #{payload}" }.join("\n\n")}data: [DONE]" }
  end

  COMPLIANCE_WORDS = ["Mount", "ain", " ", "Tree ", "Frog"].freeze
  COMPLIANCE_TOOL_DELTAS = [
    { id: "tool_0", function: {} },
    { id: "tool_0", function: { name: "get_weather", arguments: "" } },
    { id: "tool_0", function: { arguments: "" } },
    { id: "tool_0", function: { arguments: "{" } },
    { id: "tool_0", function: { arguments: ' "location": "Sydney"' } },
    { id: "tool_0", function: { arguments: ' ,"unit": "c" }' } }
  ].freeze
  SYDNEY = ["tool_0", "get_weather", { location: "Sydney", unit: "c" }].freeze

  def compliance_text
    compliance(COMPLIANCE_WORDS.map { |word| { content: word } })
  end

  def compliance_tool
    compliance(COMPLIANCE_TOOL_DELTAS.map { |delta| { tool_calls: [delta] } })
  end

  # "recovers from malformed streamed payloads" / "will automatically recover from a
  # bad payload": four text events around one whose JSON lacks its closing brace,
  # read in pieces cut inside `data:`, inside JSON strings and keys.
  MALFORMED_TEXT = "test,test2 ,test3,test4"

  def malformed
    good = ["test,", "test2 ,", "test3,", "test4"].map do |text|
      JSON.generate({ choices: [{ delta: { content: text } }] })
    end
    payloads = [good[0], '{"choices":[{"delta":{"content":"test1 ,"}}]', *good[1..]]
    body = "#{payloads.map { |payload| "data: #{payload}" }.join("\n\n")}\n\ndata: [DONE]"
    markers = ["d", "a", "t", "a", ":", " ", "{", "test", "1", " ", '"delta":', 'test3,"}}]', "{", '"', "d",
               'test4"}}]', "[D"]
    { payloads: payloads, body: body, pieces: ConformanceHelpers.cut_after(body, markers) }
  end

  # "properly handles spaces in tools payload and partial tool calls": a header, then
  # argument fragments in events with a space after each colon, then an empty
  # tool_calls delta; the reads cut inside keys and values.
  ADABAS = ['{"', "query", '":"', "Ad", "ab", "as", " ", "9", ".", "1", '"}'].freeze
  GOOGLE = { id: "func_id", name: "google", parameters: { query: "Adabas 9.1" }, partial: false }.freeze

  def spaced
    header = { index: 0, id: "func_id", type: "function", function: { name: "google", arguments: "" } }
    payloads = [JSON.generate({ choices: [{ index: 0,
                                            delta: { role: "assistant", content: nil, tool_calls: [header] } }] })]
    ADABAS.each do |part|
      delta = { tool_calls: [{ index: 0, function: { arguments: part } }] }
      payloads << JSON.generate({ choices: [{ index: 0, delta: delta }] }, space: " ")
    end
    payloads << JSON.generate({ choices: [{ index: 0, delta: { tool_calls: [] } }] }, space: " ")
    marked = spaced_cuts(payloads.map { |payload| "data: #{payload}" })
    { payloads: payloads, body: marked.delete("\0"), pieces: marked.split("\0") }
  end

  # The upstream reads, cut at the same places ("\0" marks a cut).
  def spaced_cuts(lines)
    lines[0] = lines[0].sub('"go', "\"go\0").sub('"arg', "\"arg\0")
    lines[2] = lines[2].sub('"ch', "\"ch\0")
    lines[5] = lines[5].sub('"ab"', "\"a\0b\"")
    lines[7] = lines[7].sub('"arguments": " "', "\"arguments\": \0\"\0 \"")
    lines[10] = lines[10].sub('"argume', "\"argume\0")
    "#{lines.join("\n\n")}\n\ndata: [D\0ONE]"
  end
end
