# frozen_string_literal: true

require "json"

module DiscourseAiStream
  # Tag of every error this gem raises: `rescue DiscourseAiStream::Error`
  # catches them all, including ToolArgumentsError, which is also a
  # JSON::ParserError so that code written for the stock processor (which
  # raised JSON::ParserError on bad arguments) keeps working.
  #
  # Each class declares its default MESSAGE and the FIELDS it takes as
  # keywords (nil when not given) besides `items`.
  module Error
    FIELDS = [].freeze

    def self.included(klass) = klass.extend(Declaration)

    # `declare "invalid stream", :kind, :excerpt`: the class's MESSAGE, its
    # FIELDS and their readers.
    module Declaration
      def declare(message, *fields)
        const_set(:MESSAGE, message)
        const_set(:FIELDS, fields.freeze)
        attr_reader(*fields)
      end
    end

    # Items (Strings and ToolCalls) the failing call had already produced.
    # They were not returned because the call raised; nothing is lost.
    attr_reader :items

    def initialize(message = self.class::MESSAGE, items: [], **fields)
      unknown = fields.keys - self.class::FIELDS
      raise ArgumentError, "unknown keyword#{"s" if unknown.size > 1}: #{unknown.map(&:inspect).join(", ")}" \
        unless unknown.empty?

      super(message)
      self.class::FIELDS.each { |name| instance_variable_set(:"@#{name}", fields[name]) }
      @items = Array(items).freeze
    end
  end

  # The provider reported an error inside the stream (after HTTP 200).
  class ProviderError < StandardError
    include Error
    # payload: the provider's error object (or the whole event), symbol keys.
    declare "provider error", :payload
  end

  # Bytes or values that cannot be read as a stream of chunks.
  class StreamError < StandardError
    include Error
    # kind: :invalid_json, :invalid_utf8, :too_deep, :line_too_long, :invalid_chunk
    # excerpt: the start of the offending data (never the whole payload).
    declare "invalid stream", :kind, :excerpt
  end

  # A tool call whose arguments are not valid JSON, even after repair.
  class ToolArgumentsError < JSON::ParserError
    include Error
    declare "invalid tool arguments", :tool_id, :tool_name, :raw_arguments
  end

  # A processor was used by two threads at once, or re-entered from a
  # callback. Use one processor per stream. `consumed` false: this call was
  # refused and read nothing (retryable?, once the other call returns);
  # true: a callback re-entered the processor while it built this read's
  # items, so the read was consumed and its items come out of the next read
  # or finish (do not retry it).
  class ConcurrencyError < StandardError
    include Error
    declare "processor in use", :consumed

    def retryable? = !consumed
  end

  # The tool call class raised while the processor built the ToolCall of a
  # completed call (its `new`, or `parameters=` / `partial=` followed by a
  # `new` that raised too). `tool_id`, `tool_name` and `error` (the exception
  # it raised) are about the first such call, `tool_ids` lists them all;
  # `items` has everything else the read produced. The processor stays usable.
  class ToolCallError < StandardError
    include Error
    declare "tool call class raised", :tool_id, :tool_name, :tool_ids, :error

    def initialize(...)
      super
      @tool_ids = (tool_ids || [tool_id].compact).freeze
    end
  end

  # A bug in the gem, caught before it could crash the process. The
  # processor that raised it refuses further calls.
  class InternalError < StandardError
    include Error
    declare "internal error"
  end
end
