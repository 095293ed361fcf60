# frozen_string_literal: true

require "json"

# The recorded streams of spec/fixtures/*.sse and the two ways of feeding
# them to a processor: raw bytes through decode_chunk, and the Hash path
# Discourse uses (split into events, JSON.parse with symbol keys,
# process_streamed_message on each).
module SseFixtures
  FIXTURE_DIR = File.expand_path("../fixtures", __dir__)
  BOM = "\uFEFF"

  module_function

  def fixture_names
    Dir[File.join(FIXTURE_DIR, "*.sse")].map { |path| File.basename(path, ".sse") }.sort
  end

  # A fixture's bytes, binary encoded (as an HTTP body read arrives).
  def fixture_bytes(name)
    File.binread(File.join(FIXTURE_DIR, "#{name}.sse"))
  end

  # The data payloads of an SSE stream, one String per event: lines end in
  # CRLF, LF or CR; comments are skipped; `data:` loses one optional space;
  # several data lines of an event are joined with "\n"; a last event
  # without its blank line still counts. Other fields are ignored.
  def sse_data_payloads(bytes)
    payloads = []
    data = []
    text = bytes.dup.force_encoding(Encoding::UTF_8).delete_prefix(BOM)
    text.split(/\r\n|\r|\n/, -1).each do |line|
      if line.empty?
        payloads << data.join("\n") unless data.empty?
        data = []
      elsif !line.start_with?(":")
        field, value = line.split(":", 2)
        data << value.to_s.delete_prefix(" ") if field == "data"
      end
    end
    payloads << data.join("\n") unless data.empty?
    payloads
  end

  # The events Discourse hands to process_streamed_message: payloads that
  # parse as a JSON object. `[DONE]`, keep-alives and anything else are
  # skipped, as Discourse's decoder skips what it cannot parse. With
  # `symbolize_names: false`, String keys, as a plain JSON.parse gives.
  def sse_events(bytes, symbolize_names: true)
    sse_data_payloads(bytes).filter_map do |payload|
      parsed = JSON.parse(payload, symbolize_names: symbolize_names)
      parsed if parsed.is_a?(Hash)
    rescue JSON::ParserError
      nil
    end
  end

  # Items of the Hash path: each event's result flattened, nils dropped
  # (what Discourse's decode_chunk does), then finish.
  def hash_path_items(processor, events)
    [*events.flat_map { |event| [processor.process_streamed_message(event)].flatten.compact }, *processor.finish]
  end

  # Splits bytes into reads of `size` bytes.
  def reads_of(bytes, size)
    (0...bytes.bytesize).step(size).map { |offset| bytes.byteslice(offset, size) }
  end

  # Items as plain values to compare: Strings stay, tool calls and
  # thinking become Hashes. What the round trip adds (rules 77 to 79) is
  # there when there is some, with each turn's name (unique per response)
  # as `:named`.
  def summarize(items)
    items.map do |item|
      next item if item.is_a?(String)
      next { thinking: item.message, provider_info: named_turns(item.provider_info) } unless item.respond_to?(:id)

      call = { id: item.id, name: item.name, parameters: item.parameters, partial: item.partial? }
      item.provider_data.empty? ? call : call.merge(provider_data: named_turns(item.provider_data))
    end
  end

  def named_turns(data)
    data.transform_values { |inner| inner.is_a?(Hash) && inner[:turn] ? inner.merge(turn: :named) : inner }
  end

  # What `summarize` gives for a completed call.
  def done_call(id, name, parameters = {})
    { id: id, name: name, parameters: parameters, partial: false }
  end

  USAGE_READERS = %i[prompt_tokens completion_tokens cache_read_tokens cache_write_tokens cached_tokens].freeze

  def usage_of(processor)
    USAGE_READERS.to_h { |reader| [reader, processor.public_send(reader)] }
  end

  def anomaly_kinds(processor)
    processor.anomalies.map { |anomaly| anomaly[:kind] }
  end
end

RSpec.configure { |config| config.include SseFixtures }
