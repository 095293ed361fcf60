# frozen_string_literal: true

require "json"
require "optparse"
require_relative "../discourse_ai_stream"

module DiscourseAiStream
  # `discourse-ai-stream`: replay a saved raw response, or audit many for
  # the calls the legacy Discourse processor dropped. `run` returns the exit
  # status instead of exiting, so specs can drive it in-process.
  class CLI
    USAGE = <<~TEXT
      Usage:
        discourse-ai-stream replay FILE [--protocol chat|responses] [--partial] [--json]
                                        [--usage as_sent|net_of_cache]
        discourse-ai-stream audit [--json] FILE... | -

      replay  Decodes one saved raw SSE response (FILE, or - for stdin) and prints
              its protocol, text, each tool call (id, name, parameters), the
              usage and the anomalies. The protocol (chat completions or the
              Responses API) is the one the stream holds events of; --protocol
              sets it. --partial also shows the partial tool call updates;
              --usage reads a chat stream's usage as that mode.
      audit   For each response: the tool calls it requested, and how many of
              them a processor that reads only tool_calls[0] of each chunk (the
              legacy Discourse one) would have run. A file of JSON lines with a
              raw_response_payload each (an ai_api_audit_logs export) holds one
              response per line. Without FILE, reads stdin.

      Exit status: 0 fine; 1 some response lost calls (audit), or the stream
      raised an error or held no event of either protocol (replay); 2 bad
      usage or unreadable input.
    TEXT

    # Bad arguments or input: printed with the usage hint, exit status 2.
    class UsageError < StandardError; end

    def initialize(stdin: $stdin, stdout: $stdout, stderr: $stderr)
      @stdin = stdin
      @stdout = stdout
      @stderr = stderr
    end

    # Arguments that are not text are taken as bytes: a file name need not
    # be UTF-8, and OptionParser raises on one that is not.
    def run(argv)
      dispatch(*argv.map { |arg| arg.valid_encoding? ? arg : arg.b })
    rescue UsageError, OptionParser::ParseError => e
      @stderr.puts "discourse-ai-stream: #{e.message}"
      @stderr.puts "Try `discourse-ai-stream help`."
      2
    rescue SystemCallError, IOError => e
      @stderr.puts "discourse-ai-stream: #{e.message}"
      2
    end

    attr_reader :stdin

    # Prints `text`; nil.
    def say(text) = @stdout.puts(text)

    def dispatch(command = nil, *args)
      case args.intersect?(%w[-h --help]) ? "help" : command
      when "replay" then Replay.new(self).run(args)
      when "audit" then AuditCommand.new(self).run(args)
      when "help", "-h", "--help" then say(USAGE) || 0
      when "version", "--version" then say("discourse-ai-stream #{VERSION}") || 0
      else raise UsageError, command ? "unknown command #{command.inspect}" : "no command given"
      end
    end

    # The bytes of FILE (a pipe too), or of stdin for "-".
    def read_input(name)
      return stdin.read.to_s.b if name == "-"
      raise UsageError, "#{name}: no such file" unless File.exist?(name)
      raise UsageError, "#{name}: is a directory" if File.directory?(name)

      File.binread(name)
    end
  end
end

require_relative "cli/replay"
require_relative "cli/audit_command"
