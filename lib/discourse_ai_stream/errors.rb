# frozen_string_literal: true

require "json"

module DiscourseAiStream
  # Tag of every error this gem raises: `rescue DiscourseAiStream::Error`
  # catches them all, including ToolArgumentsError, which is also a
  # JSON::ParserError so that code written for the stock processor (which
  # raised JSON::ParserError on bad arguments) keeps working.
  module Error
    # Items (Strings and ToolCalls) the failing call had already produced.
    # They were not returned because the call raised; nothing is lost.
    attr_reader :items

    private

    def take_items(items)
      @items = Array(items).freeze
    end
  end

  # The provider reported an error inside the stream (after HTTP 200).
  class ProviderError < StandardError
    include Error

    # The provider's error object (or the whole event), symbol keys.
    attr_reader :payload

    def initialize(message = "provider error", payload: nil, items: [])
      super(message)
      @payload = payload
      take_items(items)
    end
  end

  # Bytes or values that cannot be read as a stream of chunks.
  class StreamError < StandardError
    include Error

    # :invalid_json, :invalid_utf8, :too_deep, :line_too_long, :invalid_chunk
    attr_reader :kind
    # The start of the offending data (never the whole payload).
    attr_reader :excerpt

    def initialize(message = "invalid stream", kind: nil, excerpt: nil, items: [])
      super(message)
      @kind = kind
      @excerpt = excerpt
      take_items(items)
    end
  end

  # A tool call whose arguments are not valid JSON, even after repair.
  class ToolArgumentsError < JSON::ParserError
    include Error

    attr_reader :tool_id, :tool_name, :raw_arguments

    def initialize(message = "invalid tool arguments", tool_id: nil, tool_name: nil, raw_arguments: nil, items: [])
      super(message)
      @tool_id = tool_id
      @tool_name = tool_name
      @raw_arguments = raw_arguments
      take_items(items)
    end
  end

  # A processor was used by two threads at once, or re-entered from a
  # callback. Use one processor per stream.
  class ConcurrencyError < StandardError
    include Error

    def initialize(message = "processor in use", items: [])
      super(message)
      take_items(items)
    end
  end

  # The tool call class raised while the processor built the ToolCall of a
  # completed call (its `new`, or `parameters=` / `partial=` followed by a
  # `new` that raised too). `tool_id`, `tool_name` and `error` (the exception
  # it raised) are about the first such call, `tool_ids` lists them all;
  # `items` has everything else the read produced. The processor stays usable.
  class ToolCallError < StandardError
    include Error

    attr_reader :tool_id, :tool_name, :tool_ids, :error

    def initialize(message = "tool call class raised", tool_id: nil, tool_name: nil, tool_ids: nil, error: nil,
                   items: [])
      super(message)
      @tool_id = tool_id
      @tool_name = tool_name
      @tool_ids = (tool_ids || [tool_id].compact).freeze
      @error = error
      take_items(items)
    end
  end

  # A bug in the gem, caught before it could crash the process. The
  # processor that raised it refuses further calls.
  class InternalError < StandardError
    include Error

    def initialize(message = "internal error", items: [])
      super(message)
      take_items(items)
    end
  end
end
