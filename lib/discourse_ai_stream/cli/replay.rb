# frozen_string_literal: true

module DiscourseAiStream
  class CLI
    # `replay FILE`: feeds a saved response to a processor line by line, as
    # a stream arrives, and shows what came out. The protocol is the one
    # whose processor read an event of it (the other reports the stream as
    # a wrong_protocol anomaly); the chat processor's account when neither.
    # An error event is both APIs': a stream in which the chat processor
    # found nothing else is the Responses API's when that processor read an
    # event of its API in it.
    class Replay
      PROTOCOLS = { "chat" => OpenAiMessageProcessor, "responses" => OpenAiResponsesMessageProcessor }.freeze

      def initialize(cli)
        @cli = cli
        @options = {}
      end

      def run(args)
        files = parser.parse(args, into: @options)
        raise UsageError, "replay needs exactly one FILE (or -), got #{files.size}" unless files.size == 1

        raw = @cli.read_input(files.first)
        outcome = decode(raw, @options[:protocol] || "chat")
        outcome = detect(raw, outcome) unless @options[:protocol]
        outcome.delete(:partial_updates) unless @options[:partial]
        @cli.say(@options[:json] ? JSON.generate(outcome) : text(outcome).join("\n"))
        outcome[:error] || wrong_protocol?(outcome) ? 1 : 0
      end

      private

      # Each option sets the @options entry of its name.
      def parser
        OptionParser.new do |opts|
          opts.on("--partial")
          opts.on("--json")
          opts.on("--usage MODE", OpenAiMessageProcessor::USAGE_MODES.keys.map(&:to_s))
          opts.on("--protocol NAME", PROTOCOLS.keys)
        end
      end

      def wrong_protocol?(outcome) = outcome[:anomalies].any? { |anomaly| anomaly[:kind] == "wrong_protocol" }

      # The Responses API's outcome instead of the chat one's, when it read
      # the stream where the chat processor did not (see the class comment).
      def detect(raw, chat)
        return chat unless wrong_protocol?(chat) || nothing?(chat)

        responses = decode(raw, "responses")
        Audit.responses_stream?(responses[:anomalies]) ? responses : chat
      end

      def nothing?(outcome) = %i[text tool_calls partial_updates].all? { |key| outcome[key].empty? }

      def decode(raw, protocol)
        options = { partial_tool_calls: @options[:partial], tool_call_class: DiscourseAiStream::ToolCall,
                    on_anomaly: Audit::QUIET }
        options[:usage] = @options[:usage] if @options[:usage] && protocol == "chat"
        processor = PROTOCOLS.fetch(protocol).new(**options)
        outcome = { protocol: protocol, text: +"", tool_calls: [], partial_updates: [], usage: nil, anomalies: [],
                    error: nil, errors: [] }
        raw.each_line { |line| break unless feed(outcome) { processor.decode_chunk(line) } }
        feed(outcome) { processor.finish }
        outcome[:usage] = usage(processor)
        outcome[:anomalies] = processor.anomalies.map { |anomaly| anomaly.compact.transform_values(&:to_s) }
        outcome
      end

      # Takes the items of one call; false when the stream cannot go on.
      # `error` is the first error, `errors` all of them.
      def feed(outcome)
        take(outcome, yield)
        true
      rescue DiscourseAiStream::Error => e
        take(outcome, e.items)
        outcome[:errors] << { class: e.class.name, message: e.message }
        outcome[:error] ||= outcome[:errors].first
        e.is_a?(ToolArgumentsError)
      end

      # ToolCalls are snapshot now: with --partial the same object comes
      # again later, changed.
      def take(outcome, items)
        items.each do |item|
          next outcome[:text] << item if item.is_a?(String)

          call = { id: item.id, name: item.name, parameters: Marshal.load(Marshal.dump(item.parameters)) }
          (item.partial? ? outcome[:partial_updates] : outcome[:tool_calls]) << call
        end
      end

      def usage(processor)
        %i[prompt_tokens completion_tokens cache_read_tokens cache_write_tokens].to_h do |reader|
          [reader, processor.public_send(reader)]
        end.merge(mode: processor.usage_mode)
      end

      def text(outcome)
        lines = ["protocol: #{outcome[:protocol]}", "text: #{JSON.generate(outcome[:text])}"]
        lines.concat(call_lines("partial", outcome[:partial_updates]))
        lines.concat(call_lines("tool call", outcome[:tool_calls]))
        lines << "tool calls: none" if outcome[:tool_calls].empty?
        lines << usage_line(outcome[:usage])
        lines.concat(anomaly_lines(outcome[:anomalies]))
        lines.concat(outcome[:errors].map { |error| "error: #{error[:class]}: #{error[:message]}" })
      end

      def call_lines(label, calls)
        Array(calls).each_with_index.map do |call, i|
          "#{label} #{i + 1}: #{call[:name]} (id #{call[:id]}) #{JSON.generate(call[:parameters])}"
        end
      end

      def usage_line(usage)
        counts = usage.except(:mode).map { |reader, value| "#{reader} #{value.nil? ? "-" : value}" }
        "usage (#{usage[:mode]}): #{counts.join(", ")}"
      end

      def anomaly_lines(anomalies)
        return ["anomalies: none"] if anomalies.empty?

        anomalies.map do |anomaly|
          where = anomaly.slice(:name, :id, :index, :field).map { |key, value| "#{key} #{value}" }
          "anomaly #{anomaly[:kind]}: #{anomaly[:message]}#{" (#{where.join(", ")})" unless where.empty?}"
        end
      end
    end
  end
end
