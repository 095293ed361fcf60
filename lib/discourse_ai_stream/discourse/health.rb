# frozen_string_literal: true

require "cgi"

module DiscourseAiStream
  module Discourse
    # What a site's admin should know about the gem, worded once for the two
    # places that say it: the admin dashboard (the problem checks the plugin
    # registers with register_problem_checks) and `rake
    # discourse_ai_stream:check`.
    # Each topic is nil or a Problem:
    # - not_in_use: the gem is installed but not in use, and why: its native
    #   extension did not load, install! raised, install! has not run, it is
    #   switched off, install! left stock processors in place, or it patched
    #   no OpenAI endpoint;
    # - lost_or_refused: the streams of the last 24 hours that lost or
    #   refused something, by anomaly kind and endpoint (Tally).
    module Health
      # The kinds that mean something the server sent reached no caller
      # (lost) or the request failed on it (refused), each with its plain
      # words. The others are repairs, conversions and what the processor
      # ignores by design: the caller got everything (see
      # docs/errors-and-anomalies.md).
      KINDS = {
        dropped_call: "a tool call cut by the output limit was not handed out",
        provider_error: "the provider sent an error inside the stream, and the request failed",
        invalid_arguments: "a tool call's arguments could not be read, and the request failed",
        tool_call_failed: "a tool call could not be built",
        thinking_failed: "a reasoning item could not be built, and was left out",
        wrong_protocol: "the response held no event of the API the endpoint reads",
        input_after_finish: "input came after the end of the response, where no caller reads it",
        interrupted: "an exception (a timeout, a shutdown) ended the request while a read's items were held",
        truncated: "the stream stopped before its end, with tool calls open",
        truncated_event: "the stream stopped inside an event",
        unreadable_event: "an event that could not be read was skipped",
        orphan_fragment: "an arguments fragment matched no tool call",
        fragment_after_completion: "an arguments fragment came for a tool call already complete",
        text_mismatch: "a message's whole text differed from the text its deltas gave, or was not handed out",
        refusal: "the model refused, and no caller got the refusal (Discourse's processors hand out none)"
      }.freeze
      # The gem's own errors that fail a request besides the provider's,
      # counted under these names (no anomaly says them).
      ERRORS = {
        stream_error: "the stream could not be read (a line over the limit, nesting too deep...), and the " \
                      "request failed",
        internal_error: "the gem failed on the stream (a bug it caught), and the request failed"
      }.freeze
      # Every kind a stream is counted under, with its words.
      COUNTED = KINDS.merge(ERRORS).freeze
      TOPICS = %i[not_in_use lost_or_refused].freeze

      # What to tell the admin, the page that says what to do about it, and
      # the cause as it was raised (several lines), if there is one.
      Problem = Struct.new(:text, :url, :cause) do
        # For the admin notice: the text escaped, in the tags Discourse's
        # sanitizer of notices keeps (pre, a).
        def html
          pre = "<pre>#{CGI.escapeHTML(cause)}</pre>" if cause
          "#{CGI.escapeHTML(text)}#{pre} <a href=\"#{url}\" target=\"_blank\" rel=\"noopener\">What to do</a>"
        end
      end

      # The problem checks (problem_checks.rb) include this, each naming
      # its TOPIC. `call` answers with the check's own `problem` or
      # `no_problem`, so in the shape the host's ProblemCheck contract has
      # (an Array in 2024's, one Problem or nil later); the words reach the
      # admin notice as translation data, which the plugin's locale shows
      # whole ("%{message}").
      module Dashboard
        def call
          renew_notice if finding
          finding ? problem : no_problem
        end

        private

        # Discourse keeps a check's notice with the words of the run that
        # made it (its tracker finds the notice by identifier and leaves it
        # as it is) until a run finds nothing. A notice worded otherwise than
        # this finding goes, so the tracker makes it anew with these words.
        def renew_notice
          return unless defined?(::AdminNotice) && ::AdminNotice.respond_to?(:problem)

          message = finding.html
          ::AdminNotice.problem.where(identifier: identifier.to_s).each do |notice|
            details = notice.details.to_h
            notice.destroy unless (details["message"] || details[:message]) == message
          end
        rescue StandardError => e
          Discourse.warn_log("discourse_ai_stream: the dashboard notice #{identifier} was not renewed: " \
                             "#{e.class}: #{e.message}")
        end

        def finding = defined?(@finding) ? @finding : (@finding = Health.problem(self.class::TOPIC))

        def translation_data(_target = nil) = { message: finding&.html.to_s }

        # The key later ProblemChecks default to; the first had no default
        # and raised NotImplementedError, which no rescue of the dashboard's
        # catches.
        def translation_key = "dashboard.problem.#{identifier}"
      end

      # The problem checks' class names, under Discourse's ProblemCheck.
      CHECKS = %i[DiscourseAiStreamNotInUse DiscourseAiStreamLostOrRefused].freeze

      class << self
        # Registers the problem checks with `plugin` (Discourse's
        # Plugin::Instance, in after_initialize), and returns them; none on
        # a Discourse from before plugins could register checks (spring
        # 2024). Loaded afresh on each call, on the ProblemCheck of the day.
        def register_problem_checks(plugin)
          return [] unless plugin.respond_to?(:register_problem_check) && defined?(::ProblemCheck)

          load File.expand_path("problem_checks.rb", __dir__)
          checks = CHECKS.map { |name| ::ProblemCheck.const_get(name, false) }
          checks.each { |check| plugin.register_problem_check(check) }
        end

        def problem(topic)
          raise ArgumentError, "no topic #{topic.inspect}" unless TOPICS.include?(topic)

          public_send(topic)
        end

        def not_in_use
          return not_loaded(DiscourseAiStream.load_error) if DiscourseAiStream.load_error

          return install_failed(Discourse.install_error) if Discourse.install_error

          status = Discourse.status
          return not_run if status.empty?
          return switched_off unless Discourse.installed?

          left_in_place(status) || unpatched
        end

        def lost_or_refused(tally = Discourse.tally)
          streams, rows = tally.counts
          return if streams.zero?

          kinds = rows.group_by { |(kind, _), _| kind }.sort_by { |kind, list| [-list.sum(&:last), kind] }
          words = kinds.map do |kind, list|
            where = list.sort_by { |(_, label), count| [-count, label] }
                        .map { |(_, label), count| "#{count} on #{label}" }
            "#{[kind, COUNTED[kind]].compact.join(", ")}: #{where.join(", ")}"
          end
          Problem.new("In the last 24 hours, #{streams} #{streams == 1 ? "stream" : "streams"} decoded by " \
                      "discourse_ai_stream lost or refused something. #{words.join("; ")}. The Rails log has a " \
                      "warn line for each, with the provider.", page("streams-lost-or-refused-something"))
        end

        private

        def installed_but(words, anchor, cause = nil)
          Problem.new("discourse_ai_stream #{VERSION} is installed but #{words}", page(anchor), cause)
        end

        def page(anchor) = "#{DOCS}/troubleshooting.md##{anchor}"

        def not_loaded(error)
          installed_but("not in use: its native extension did not load, so Discourse's own processors decode " \
                        "every stream. The cause:", "its-native-extension-did-not-load", error.message)
        end

        def not_run
          endpoints = " Discourse AI's endpoints (#{ENDPOINTS}) were not loaded when it started." unless
            Discourse.lookup(ENDPOINTS).is_a?(Module)
          installed_but("not in use: install! has not run in this process.#{endpoints}", "install-has-not-run")
        end

        def switched_off
          installed_but("switched off (install!'s enabled:, the discourse_ai_stream_enabled site setting), so " \
                        "Discourse's own processors decode every stream.", "switched-off")
        end

        # The stock classes are the gem's to replace, but the endpoints that
        # build them carry no patch of their processor method: a Discourse
        # AI whose OpenAI endpoints build their processor in a method of
        # another name (Anthropic's may still have one).
        def unpatched
          return if Discourse.processor_patched?

          installed_but("not in use: the OpenAI endpoints of #{ENDPOINTS} have no processor method, where the gem " \
                        "hands out its processors, so Discourse's own processors decode their streams.",
                        "no-endpoint-class-was-patched")
        end

        def install_failed(error)
          installed_but("not in use: install! raised, so Discourse's own processors decode every stream. The " \
                        "cause:", "install-raised", "#{error.class}: #{error.message}")
        end

        # The processors install! did not replace: those with what the gem
        # lacks, or all of them when it replaced none. (A dialect the replay
        # of reasoning stands aside for is no problem: the check task says
        # which and why.)
        def left_in_place(status)
          status = status.slice(*Discourse::STOCK_PROCESSORS)
          left = status.reject { |_, decision| decision[:replaced] }
          left = left.select { |_, decision| decision[:missing].any? } if left.size < status.size
          return if left.empty?

          names = left.map { |name, decision| "#{name} (#{decision[:reason]})" }.join(" and ")
          installed_but("not in use for #{names}: Discourse's own #{left.size == 1 ? "class stays" : "classes stay"} " \
                        "in place there.", "not-in-use-for-a-stock-class")
        end
      end
    end
  end
end
