# frozen_string_literal: true

require "json"

module Bench
  # The ways one workload is driven through. Each runs a whole stream, from
  # a fresh processor to `finish`, and discards what comes out.
  module Paths
    # The Ruby floor's line splitter: data lines of a stream of reads, as
    # UTF-8 Strings without the "data: " prefix (one String per data line,
    # nothing else per line). `[DONE]` and other lines are skipped.
    module Lines
      DATA_OBJECT = /\Gdata: ?\{/

      def self.each_data(reads)
        buffer = +""
        reads.each do |read|
          buffer << read
          start = 0
          while (line_end = buffer.index("\n", start))
            if DATA_OBJECT.match?(buffer, start)
              from = buffer.getbyte(start + 5) == 32 ? start + 6 : start + 5
              yield buffer.byteslice(from, line_end - from).force_encoding(Encoding::UTF_8)
            end
            start = line_end + 1
          end
          buffer = buffer.byteslice(start..)
        end
      end
    end

    module_function

    def processor(workload)
      klass = if workload.responses?
                DiscourseAiStream::OpenAiResponsesMessageProcessor
              else
                DiscourseAiStream::OpenAiMessageProcessor
              end
      klass.new(partial_tool_calls: workload.partial, tool_call_class: DiscourseAiStream::ToolCall)
    end

    # decode_chunk on each 512-byte read.
    def raw(workload)
      workload.reads.each do |reads|
        processor = processor(workload)
        reads.each { |read| processor.decode_chunk(read) }
        processor.finish
      rescue DiscourseAiStream::Error
        nil
      end
    end

    # What Discourse does around the processor: JSON.parse each event with
    # symbolize_names, hand the Hash to process_streamed_message.
    def hash(workload, make = -> { processor(workload) })
      workload.reads.each do |reads|
        processor = make.call
        Lines.each_data(reads) do |payload|
          processor.process_streamed_message(JSON.parse(payload, symbolize_names: true))
        end
        processor.finish
      rescue DiscourseAiStream::Error
        nil
      end
    end

    # The floor for any Ruby decoder: split lines, parse each data line.
    def floor(workload)
      workload.reads.each do |reads|
        Lines.each_data(reads) { |payload| JSON.parse(payload, symbolize_names: true) }
      end
    end

    # The stock Ruby processor on the Hash path, when one was loaded (see
    # bench/README.md).
    def stock(workload)
      stock = stock_class(workload)
      hash(workload, -> { stock.new(partial_tool_calls: workload.partial) })
    end

    # The stock class for the workload's protocol, when one was loaded.
    def stock_class(workload)
      name = workload.responses? ? :OpenAiResponsesMessageProcessor : :OpenAiMessageProcessor
      return unless defined?(::DiscourseAi::Completions) && ::DiscourseAi::Completions.const_defined?(name)

      ::DiscourseAi::Completions.const_get(name)
    end
  end
end
