# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # The gem's processor that stands in for one stock processor, kept on
    # the endpoint instance. Discourse builds an endpoint per request and the
    # endpoint memoizes its processor (in whatever ivar it likes), so keying
    # the session to that stock instance gives one gem processor per
    # request, however the endpoint memoizes. Every instance variable of the
    # endpoint that holds the stock instance is pointed at the gem's
    # processor too, for endpoints that read the ivar directly (older
    # Discourse: `decode_chunk_finish` calls `@processor.finish`).
    #
    # Discourse lets an error out of decode_chunk fail the request, so the
    # items one of the gem's errors carries (what the read produced besides
    # the error) would never reach the caller. Here decode_chunk returns those
    # items and the session keeps the error; the next decode_chunk or
    # decode_chunk_finish raises it before doing anything else. The request
    # still fails, after the caller saw everything the stream produced. An
    # error without items, or while uninstalled, is raised at once.
    class Session
      IVAR = :@discourse_ai_stream_session
      # The stock instance handed out while the gem was switched off: the
      # response it decodes keeps it when the gem is switched on meanwhile.
      DECLINED = :@discourse_ai_stream_declined
      # The gem's processor for each stock processor class name.
      REPLACED = {
        STOCK_PROCESSOR => DiscourseAiStream::OpenAiMessageProcessor,
        STOCK_RESPONSES_PROCESSOR => DiscourseAiStream::OpenAiResponsesMessageProcessor
      }.freeze
      GEM_PROCESSORS = REPLACED.values.freeze
      # The gem's errors that fail a request, with the kind each is counted
      # under (Health::COUNTED). (A ToolArgumentsError is counted by its
      # anomaly, invalid_arguments.)
      FAILED = { DiscourseAiStream::ProviderError => :provider_error, DiscourseAiStream::StreamError => :stream_error,
                 DiscourseAiStream::InternalError => :internal_error,
                 DiscourseAiStream::ToolCallError => :tool_call_failed }.freeze

      attr_reader :stock, :processor, :reporter, :host_read

      class << self
        # What the patched `processor` returns: the gem's processor in place
        # of a stock OpenAiMessageProcessor or OpenAiResponsesMessageProcessor,
        # anything else unchanged.
        def processor_for(endpoint, candidate)
          return decline(endpoint, candidate) unless Discourse.installed?
          return candidate if ours(candidate) || endpoint.instance_variable_get(DECLINED).equal?(candidate)

          session = of(endpoint)
          return session.processor if session&.stock.equal?(candidate)
          return candidate unless stock?(candidate)

          session = new(endpoint, candidate)
          session.adopt(endpoint)
          session.processor
        end

        # `processor` when it is the gem's, else nil.
        def ours(processor) = GEM_PROCESSORS.any? { |klass| processor.is_a?(klass) } ? processor : nil

        # Around decode_chunk: an error of the gem's that carries items is
        # kept, and its items returned.
        def decoding(endpoint, &)
          of(endpoint)&.raise_pending
          begin
            reporting(endpoint, &)
          rescue DiscourseAiStream::Error => e
            # Looked up now: the block may have built this response's session.
            session = of(endpoint)
            raise unless session && Discourse.installed? && !e.items.empty?

            session.defer(e)
          end
        end

        # Around decode_chunk_finish: a kept error is raised instead of
        # finishing. At the end of a response, one line for the anomalies
        # that were not logged.
        def finishing(endpoint, &)
          of(endpoint)&.raise_pending
          reporting(endpoint, &)
        ensure
          of(endpoint)&.reporter&.flush
        end

        # Runs the block; a provider error, or an error of the gem's that
        # fails the request, is logged and counted (once) and raised on.
        # Whatever else leaves it ends the request: the items of a read it
        # interrupted are lost (see Session#interrupted).
        def reporting(endpoint)
          yield
        rescue *FAILED.keys => e
          (of(endpoint)&.reporter || Reporter.new(label(endpoint))).failed(e, failure(e)) if Discourse.installed?
          raise
        rescue Exception # rubocop:disable Lint/RescueException -- counted, then raised as it is
          of(endpoint)&.interrupted
          raise
        end

        # Around a decode_chunk of the host's, which calls the processor
        # once per event (HostRead): its items with each reasoning item in
        # front of its call; an error of an event is raised on the next read.
        # The session is looked up again after the block, which builds it on
        # the response's first read.
        def host_read(endpoint)
          of(endpoint)&.host_read&.start
          items = yield
          session = of(endpoint)
          return items unless session

          error = session.host_read.take_error
          session.defer(error, host: true) if error
          session.host_read.order(items)
        end

        def of(endpoint) = endpoint.instance_variable_get(IVAR)

        # The kind `error` is counted under (FAILED), or nil.
        def failure(error) = FAILED.find { |klass, _| error.is_a?(klass) }&.last

        # By name, so that it holds across code reloads (new class objects)
        # and excludes subclasses; only what install! decided to replace.
        def stock?(candidate) = Discourse.status.dig(candidate.class.name, :replaced) ? true : false

        # "mistral (DiscourseAi::Completions::Endpoints::Mistral)".
        def label(endpoint)
          class_name = endpoint.class.name || endpoint.class.inspect
          provider = provider_name(endpoint)
          provider ? "#{provider} (#{class_name})" : class_name
        end

        # The endpoint's LlmModel, or nil.
        def llm_model(endpoint)
          endpoint.send(:llm_model) if endpoint.respond_to?(:llm_model, true)
        rescue StandardError
          nil
        end

        private

        def decline(endpoint, candidate)
          endpoint.instance_variable_set(DECLINED, candidate) unless ours(candidate)
          candidate
        end

        def provider_name(endpoint)
          model = llm_model(endpoint)
          model.provider&.to_s if model.respond_to?(:provider)
        rescue StandardError
          nil
        end
      end

      def initialize(endpoint, stock)
        @stock = stock
        @reporter = Reporter.new(self.class.label(endpoint))
        @processor = build(endpoint, stock)
        @host_read = HostRead.new(@processor, order: setting(endpoint, stock, :partial_tool_calls))
      end

      # Keeps this session on `endpoint`, and replaces the stock instance
      # with the gem's processor in every ivar of it that holds it (by
      # identity).
      def adopt(endpoint)
        endpoint.instance_variables.each do |name|
          endpoint.instance_variable_set(name, processor) if endpoint.instance_variable_get(name).equal?(stock)
        end
        endpoint.instance_variable_set(IVAR, self)
      end

      # Keeps `error` to raise on the next call; returns the items it carries.
      # `host`: kept by HostRead, so it did not pass Session.reporting, which
      # counts it.
      def defer(error, host: false)
        kind = self.class.failure(error)
        reporter.failed(error, kind) if host && kind
        @pending_error = error
        reporter.deferred(error, host: host)
        Discourse.distinct_calls(error.items)
      end

      # An exception is leaving the endpoint. A read it interrupted holds its
      # items for the next read or finish, which will not come: counted as
      # :interrupted when the processor has an :interrupted anomaly its hook
      # was not given yet (one it was given came with those items).
      def interrupted
        held = processor.anomalies.count { |anomaly| anomaly[:kind] == :interrupted }
        reporter.count(:interrupted) if held > reporter.interruptions
      rescue StandardError
        nil # the exception on its way out matters more than this count
      end

      # Raises the error kept by defer, once.
      def raise_pending
        error = @pending_error
        @pending_error = nil
        raise error if error
      end

      private

      def build(endpoint, stock)
        klass = REPLACED.fetch(stock.class.name)
        options = { partial_tool_calls: setting(endpoint, stock, :partial_tool_calls),
                    tool_call_class: completions_class(:ToolCall), thinking_class: completions_class(:Thinking),
                    on_anomaly: @reporter.method(:anomaly) }
        if klass == DiscourseAiStream::OpenAiResponsesMessageProcessor
          options[:output_thinking] = takes?(stock, :output_thinking) && setting(endpoint, stock, :output_thinking)
        else
          options.merge!(round_trip(endpoint, stock), usage: Discourse.usage_mode(stock.class))
        end
        klass.new(**options)
      end

      # What the chat processor hands out for the next request: on where
      # install! replays it (Discourse.round_trip_for?), with the thinking
      # the endpoint asked for and the model it comes from.
      def round_trip(endpoint, stock)
        return { round_trip: false } unless Discourse.round_trip_for?(endpoint)

        { round_trip: true, output_thinking: setting(endpoint, stock, :output_thinking) && !xml_tools?(endpoint),
          model: Discourse.model_identity(self.class.llm_model(endpoint)) }
      end

      # An endpoint that reads its tools from the text (XML tools) hands
      # every item of a non-streamed response to its XML parser, which takes
      # Strings only: no Thinking there, as from the stock processor. (The
      # request then has no native tool calls to carry reasoning back with.)
      def xml_tools?(endpoint)
        endpoint.respond_to?(:xml_tools_enabled?, true) && endpoint.send(:xml_tools_enabled?) ? true : false
      rescue StandardError, NotImplementedError
        false
      end

      # Whether the stock processor's class takes the keyword: an older
      # Responses processor takes no output_thinking and returns no Thinking,
      # and its Discourse reads none from it.
      def takes?(stock, keyword)
        keywords = Discourse.keywords(stock.class)
        keywords.nil? || keywords.include?(keyword)
      end

      # A setting the stock processor was built with (its ivar), else the
      # endpoint's, else false.
      def setting(endpoint, stock, name)
        ivar = :"@#{name}"
        return stock.instance_variable_get(ivar) ? true : false if stock.instance_variable_defined?(ivar)

        endpoint.respond_to?(name, true) && endpoint.send(name) ? true : false
      end

      # DiscourseAi::Completions::<name> when it is a class, whatever the
      # gem's setting: the bot and the endpoints test
      # `is_a?(DiscourseAi::Completions::ToolCall)`. Else nil: the processor's
      # default, the gem's setting.
      def completions_class(name)
        klass = Discourse.lookup("#{NAMESPACE}::#{name}")
        klass if klass.is_a?(Class)
      end
    end
  end
end
