# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # The module prepended to one endpoint class. It wraps only the methods
    # that class defines itself (in its body or in a module it includes, such
    # as OpenAiShared): a subclass that defines none of them (Mistral) runs
    # its parent's patch, one that overrides decode_chunk (Vllm) gets its
    # own. Each wrapper keeps the visibility of the method it wraps.
    #
    # Wrappers:
    # - processor: call the original; a stock OpenAiMessageProcessor or
    #   OpenAiResponsesMessageProcessor is swapped for the gem's (see
    #   Session), anything else passes through.
    # - decode_chunk: where the original is the stock one and the processor
    #   is the gem's, the processor decodes the raw bytes itself (fast path);
    #   otherwise the original runs, talking to the gem's processor once
    #   per event: its result gets each reasoning item back in front of its
    #   call, and an event's error waits for the next read, as on the fast
    #   path (see Session.host_read).
    # - decode_chunk, decode_chunk_finish, decode: provider errors are logged
    #   with the endpoint's provider, then raised on; at the end of a
    #   response (decode_chunk_finish, decode), one line counts the
    #   anomalies that were not logged. An error of the gem's
    #   out of decode_chunk that carries items is raised one call later:
    #   decode_chunk returns the items first (see Session).
    # While uninstalled every wrapper only calls the original.
    class Patch < Module
      WRAPPED = %i[processor decode_chunk decode_chunk_finish decode].freeze
      # Owners of the stock decode_chunk: the class in older Discourse, the
      # shared module it was moved to later.
      # OpenAiResponses: the Responses API endpoint's own decode_chunk.
      STOCK_DECODE_OWNERS = ["#{ENDPOINTS}::OpenAi", "#{ENDPOINTS}::OpenAiShared",
                             "#{ENDPOINTS}::OpenAiResponses"].freeze

      class << self
        # A class worth patching: it has a processor method (own or inherited).
        def endpoint?(klass) = klass.method_defined?(:processor) || klass.private_method_defined?(:processor)

        # Whether the decode_chunk instances of `klass` run, under the
        # patches, is the stock one.
        def stock_decode?(klass)
          method = klass.instance_method(:decode_chunk)
          method = method.super_method while method&.owner.is_a?(Patch)
          method ? STOCK_DECODE_OWNERS.include?(method.owner.name) : false
        rescue NameError
          false
        end

        # Whether `klass` carries a patch of its own (not only its parent's).
        def applied?(klass) = klass.ancestors.take_while { |mod| !mod.equal?(klass) }.any?(Patch)

        # Prepends a patch unless `klass` has one or defines nothing to wrap.
        # Returns true when it prepended.
        def apply(klass)
          return false if applied?(klass)

          methods = WRAPPED.select { |name| own_layer(klass).any? { |mod| defines?(mod, name) } }
          return false if methods.empty?

          klass.prepend(new(klass, methods))
          true
        end

        private

        # The class and the modules it includes itself, without its prepends
        # and without what it inherits.
        def own_layer(klass)
          ancestors = klass.ancestors
          start = ancestors.index(klass)
          stop = klass.superclass ? ancestors.index(klass.superclass) : ancestors.size
          ancestors[start...stop].reject { |mod| mod.is_a?(Patch) }
        end

        def defines?(mod, name) = mod.method_defined?(name, false) || mod.private_method_defined?(name, false)
      end

      attr_reader :target_name, :wrapped, :fast_decode

      def initialize(klass, methods)
        super()
        @target_name = klass.name || klass.inspect
        @wrapped = methods.freeze
        @fast_decode = methods.include?(:decode_chunk) && Patch.stock_decode?(klass)
        methods.each do |name|
          send(:"wrap_#{name}")
          private name if klass.private_method_defined?(name)
          protected name if klass.protected_method_defined?(name)
        end
      end

      def inspect = "#<#{self.class.name} #{target_name} #{wrapped.join(",")}#{" fast_decode" if fast_decode}>"
      alias to_s inspect

      private

      def wrap_processor = define_method(:processor) { Session.processor_for(self, super()) }

      def wrap_decode_chunk
        fast = fast_decode
        define_method(:decode_chunk) do |raw|
          Session.decoding(self) do
            ours = fast && Discourse.fast_decode? && Session.ours(processor)
            ours ? ours.decode_chunk(raw) : Session.host_read(self) { super(raw) }
          end
        end
      end

      def wrap_decode_chunk_finish = define_method(:decode_chunk_finish) { Session.finishing(self) { super() } }

      # A whole response, not streamed: its end, as decode_chunk_finish is.
      def wrap_decode = define_method(:decode) { |raw| Session.finishing(self) { super(raw) } }
    end
  end
end
