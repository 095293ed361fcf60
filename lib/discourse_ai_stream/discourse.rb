# frozen_string_literal: true

require "set"

module DiscourseAiStream
  # Puts the gem's processor into a running Discourse:
  #
  #   after_initialize do
  #     reloadable_patch { DiscourseAiStream::Discourse.install! }
  #   end
  #
  # Every endpoint class under DiscourseAi::Completions::Endpoints that has a
  # `processor` method gets a patch module prepended. The patch lets the
  # endpoint build its processor as before and, when the result is the stock
  # OpenAiMessageProcessor or OpenAiResponsesMessageProcessor (the Responses
  # API), hands out the gem's matching processor instead (one per stock
  # instance, so per request). Other processors (Anthropic's, ...) pass
  # through untouched. Nothing here needs Discourse to be loaded until
  # install! is called.
  module Discourse
    NAMESPACE = "DiscourseAi::Completions"
    ENDPOINTS = "#{NAMESPACE}::Endpoints".freeze
    STOCK_PROCESSOR = "#{NAMESPACE}::OpenAiMessageProcessor".freeze
    STOCK_RESPONSES_PROCESSOR = "#{NAMESPACE}::OpenAiResponsesMessageProcessor".freeze
    # The stock processors the gem stands in for, by name (status's entries
    # for them; the others are the dialects the reasoning replay writes).
    STOCK_PROCESSORS = [STOCK_PROCESSOR, STOCK_RESPONSES_PROCESSOR].freeze
    # The endpoints that build them (others inherit from these).
    OPENAI_ENDPOINTS = ["#{ENDPOINTS}::OpenAi", "#{ENDPOINTS}::OpenAiResponses"].freeze
    # Public methods of the stock processors that only their own JSON
    # tracker calls: the gem's processors need not have them.
    INTERNAL_CALLBACKS = %i[notify_progress current_tool_progress].freeze
    # Loaded when first used: it names the gem's processors, which the
    # native extension defines (see discourse_ai_stream/host).
    autoload :Session, File.expand_path("discourse/session", __dir__)
    # Names the gem's processor too: loaded by install!, which does not run
    # it without the native extension.
    autoload :Replay, File.expand_path("discourse/replay", __dir__)

    class << self
      # Patches every endpoint class defined now (after a code reload: the
      # new class objects). Classes that already carry the patch are left
      # alone, so calling it again changes nothing but the settings.
      # fast_decode: endpoints whose decode_chunk is the stock one let the
      # gem's processor decode the raw bytes (no JsonStreamDecoder).
      # Each stock processor is compared with the gem's first (see status).
      # enabled: a callable asked on every use (a site setting): while it
      # returns false, the patches pass everything to the stock code, as
      # after uninstall!, at once and in every process that reads it.
      # replay: true, false or a callable asked on every use (nil counts as
      # true): the chat processor hands out what reasoning models need back
      # on the next request, and the ChatGpt dialect family sends it
      # (Replay; docs/discourse.md#reasoning-models-in-a-tool-loop).
      # Returns the classes patched by this call.
      # Whatever it raises stays here (install_error): the site boots with
      # its own processors, and the admin dashboard says why.
      def install!(fast_decode: true, enabled: nil, replay: true)
        @install_error = nil
        unless lookup(ENDPOINTS).is_a?(Module)
          warn_log("discourse_ai_stream: #{ENDPOINTS} is not defined; nothing installed")
          return []
        end

        return stand_aside(DiscourseAiStream.load_error.message) if DiscourseAiStream.load_error

        install(fast_decode, enabled, replay)
      rescue StandardError, ScriptError => e
        @installed = false
        @install_error = e
        stand_aside("install! raised #{e.class}: #{e.message}")
      end

      # What the last install! raised (it then left the stock processors in
      # place), or nil.
      attr_reader :install_error

      # True between install! and uninstall!, while `enabled` allows it.
      def installed? = @installed == true && enabled?

      # A prepended module cannot be removed: the patches stay in place and
      # pass everything through to the stock code until install! runs again.
      def uninstall!
        @installed = false
        @status = nil
        @install_error = nil
      end

      # Not asked of `enabled`: a response whose processor is the gem's is
      # decoded by it to its end, also when the setting goes off meanwhile.
      def fast_decode? = @installed == true && @fast_decode != false

      # Whether the chat processor of `endpoint` hands out what the next
      # request carries back: replay on, on the newest generation (whose
      # Prompt keeps a Thinking's provider_info and each call's
      # provider_data), and where the endpoint's decode_chunk is the stock
      # one (vLLM's own reads reasoning itself, and its dialect replays it).
      def round_trip_for?(endpoint)
        replay? && generation == :newest && Patch.stock_decode?(endpoint.class)
      end

      # Whether reasoning goes back now: installed, and install!'s `replay`
      # switch (on when not given) allows it.
      def replay? = installed? && asked(@replay, "replay", "replay off")

      # Who a response comes from, as the data carried back names it, and
      # whom it goes back to (Replay): "ID:NAME" of an LlmModel; nil
      # without one.
      def model_identity(llm_model)
        return unless llm_model

        id = llm_model.id if llm_model.respond_to?(:id)
        name = llm_model.name if llm_model.respond_to?(:name)
        "#{id}:#{name}" unless id.nil? && name.nil?
      end

      # The stock processor classes (by name) that patched endpoints replace,
      # with the gem's class that stands in for each.
      def replaced_processors = Session::REPLACED

      # What the last install! decided, per stock processor class name:
      # `{ replaced: true, missing: [] }`, or `{ replaced: false, reason:,
      # missing: }` when the stock class is left in place, because it is not
      # loaded or has public methods (`"#stop_reason"`) or `initialize`
      # keywords (`"initialize(strict:)"`) the gem's lacks; and per dialect
      # class of the ChatGpt family, whether the gem writes its tool-call
      # turns (Replay; `missing` always empty). Empty before, and after
      # uninstall!.
      def status = @status || {}

      # Endpoint classes of the current namespace that carry the patch.
      def patched_classes = endpoint_classes.select { |klass| Patch.applied?(klass) }

      # :newest, :current or :legacy, from the readers of the stock processor
      # class (the newest answers stop_reason; current Discourse logs
      # cache_read_tokens / cache_write_tokens, the legacy one cached_tokens).
      # nil when there is no stock class.
      def generation(stock_class = lookup(STOCK_PROCESSOR))
        return unless stock_class.is_a?(Class)
        return :newest if stock_class.method_defined?(:stop_reason)

        legacy = stock_class.method_defined?(:cached_tokens) && !stock_class.method_defined?(:cache_read_tokens)
        legacy ? :legacy : :current
      end

      # The streams that lost or refused something, counted for the health
      # report (see Reporter and Tally).
      def tally = @tally ||= Tally.new

      # The usage mode of Discourse's own accounting: the legacy processor
      # reports prompt_tokens as sent, every later generation net of cache.
      def usage_mode(stock_class = lookup(STOCK_PROCESSOR))
        generation(stock_class) == :legacy ? :as_sent : :net_of_cache
      end

      # The output_limit a new processor follows by default: the host's, the
      # class loaded as `stock_name` (the gem's own, when it stands under
      # that name): :drop where it answers stop_reason, as the newest
      # Discourse; :keep under an older one; :drop_cut outside Discourse.
      def output_limit(stock_name) = { newest: :drop, nil => :drop_cut }.fetch(generation(lookup(stock_name)), :keep)

      # The keywords `klass.new` takes, or nil when it takes any (also a
      # factory that is not a class, and C-defined initializers).
      def keywords(klass)
        params = klass.is_a?(Module) ? klass.instance_method(:initialize).parameters : [[:keyrest]]
        return if params.any? { |type, _| %i[rest keyrest].include?(type) }

        params.filter_map { |type, name| name if %i[key keyreq].include?(type) }
      end

      # Where warnings go: this when set, else Rails.logger, else stderr.
      attr_writer :logger

      def logger = @logger || (::Rails.logger if defined?(::Rails) && ::Rails.respond_to?(:logger))

      def warn_log(message, level = :warn)
        target = logger
        target ? target.public_send(level, message) : Kernel.warn(message)
      rescue StandardError => e
        Kernel.warn("#{message} (logger raised #{e.class}: #{e.message})")
      end

      # Items as the stock decode_chunk returns them: no nil, and each
      # ToolCall object once (a partial call may come back several times).
      def distinct_calls(items)
        seen = Set.new.compare_by_identity
        items.compact.select { |item| item.is_a?(String) || seen.add?(item) }
      end

      # The constant now bound to `path`, or nil. Looked up on every call:
      # after a code reload the names point at new objects.
      def lookup(path)
        path.split("::").reduce(Object) do |scope, name|
          return nil unless scope.is_a?(Module) && scope.const_defined?(name, false)

          scope.const_get(name, false)
        end
      rescue NameError, LoadError
        nil
      end

      # Whether an endpoint class that builds Discourse's OpenAI processors
      # hands out its processor through a patched `processor` method: those
      # of OpenAI's two APIs where the site has them, else any endpoint.
      def processor_patched?
        openai = OPENAI_ENDPOINTS.map { |name| lookup(name) }.grep(Class)
        return !patched_classes.empty? if openai.empty?

        openai.any? { |klass| Patch.endpoint?(klass) && klass.instance_method(:processor).owner.is_a?(Patch) }
      end

      private

      def install(fast_decode, enabled, replay)
        @status = Session::REPLACED.to_h { |name, ours| [name, decide(lookup(name), ours)] }
        @fast_decode = fast_decode ? true : false
        @enabled = enabled
        @replay = replay
        @status.merge!(Replay.install(replay))
        patched = endpoint_classes.select { |klass| Patch.apply(klass) }
        @installed = true
        unless processor_patched?
          warn_log("discourse_ai_stream: the OpenAI endpoints of #{ENDPOINTS} have no processor method; their " \
                   "processors were not replaced")
        end
        patched
      end

      # Without the native extension there is no processor of the gem's, and
      # after install! raised none is handed out: every stock one stays in
      # place, and status says why. The error line of
      # discourse_ai_stream/host may have gone to stderr: Discourse loads
      # plugins before Rails.logger is set; install! runs after.
      def stand_aside(why)
        warn_log("discourse_ai_stream #{VERSION}: install! left Discourse's own processors in place: #{why}", :error)
        reason = if @install_error
                   "install! raised (DiscourseAiStream::Discourse.install_error says what)"
                 else
                   "the gem's native extension did not load (DiscourseAiStream.load_error says why)"
                 end
        @status = STOCK_PROCESSORS.to_h do |name|
          [name, { replaced: false, reason: reason, missing: [] }]
        end
        []
      end

      def enabled? = asked(@enabled, "enabled", "stock processors in use")

      # A switch of install!: nil or true is on, false off, a callable is
      # asked now; one that raises counts as off, with a warn line saying
      # `outcome`.
      def asked(switch, name, outcome)
        return switch != false unless switch.respond_to?(:call)

        switch.call ? true : false
      rescue StandardError => e
        warn_log("discourse_ai_stream: the #{name} check raised #{e.class}: #{e.message}; #{outcome}")
        false
      end

      # Whether the gem's class `ours` can stand in for the stock class: it
      # must answer every public method and keyword the stock one does.
      def decide(stock, ours)
        return { replaced: false, reason: "not loaded", missing: [] } unless stock.is_a?(Class)

        methods = stock.public_instance_methods - ours.public_instance_methods - INTERNAL_CALLBACKS
        missing = methods.sort.map { "##{_1}" }
        missing += ((keywords(stock) || []) - keywords(ours)).map { "initialize(#{_1}:)" }
        return { replaced: true, missing: [] } if missing.empty?

        reason = "the gem's #{ours.name} lacks #{missing.join(", ")}"
        warn_log("discourse_ai_stream #{VERSION}: left #{stock.name} in place: #{reason}", :error)
        { replaced: false, reason: reason, missing: missing }
      end

      # The classes of the namespace, and subclasses of Endpoints::Base
      # defined elsewhere (another plugin's endpoint); none without it.
      def endpoint_classes
        endpoints = lookup(ENDPOINTS)
        return [] unless endpoints.is_a?(Module)

        found = endpoints.constants.sort.filter_map do |name|
          value = endpoints.const_get(name, false)
          value if value.is_a?(Class)
        rescue StandardError, ScriptError => e
          # An endpoint file that fails to load must not take the site down.
          warn_log("discourse_ai_stream: skipped #{endpoints.name}::#{name}: #{e.class}: #{e.message}")
          nil
        end
        base = found.find { |klass| klass.name == "#{ENDPOINTS}::Base" }
        (found | descendants(base)).select { |klass| Patch.endpoint?(klass) }
      end

      def descendants(klass) = klass ? klass.subclasses.flat_map { |sub| [sub, *descendants(sub)] } : []
    end
  end
end

require_relative "discourse/reporter"
require_relative "discourse/tally"
require_relative "discourse/health"
require_relative "discourse/patch"
require_relative "discourse/host_read"
