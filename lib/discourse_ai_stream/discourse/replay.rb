# frozen_string_literal: true

module DiscourseAiStream
  module Discourse
    # The way back of the reasoning round trip: what a reasoning model
    # streamed with its tool calls (the reasoning under the field the server
    # used, OpenRouter's reasoning_details, each call's extra_content) goes
    # back to that model with the assistant turn that made the calls, which
    # DeepSeek, Kimi, Gemini's OpenAI-compatible URL and OpenRouter require
    # (docs/discourse.md, "Reasoning models").
    #
    # The gem's processor puts that data into the items (ToolCall
    # provider_data and Thinking provider_info under KEY, stamped with the
    # model's identity); Discourse's Prompt keeps it on the :tool_call
    # messages. DialectPatch, prepended to the ChatGpt dialect (which
    # Mistral, OpenAiCompatible and Vllm inherit), writes it into the
    # request:
    # - tool_call_msg: the stock assistant message of one call, plus that
    #   call's extra_content, and the reasoning (each field the server used
    #   holds the message's thinking, "" when there was none) and
    #   reasoning_details, from the message itself or from a :model message
    #   right before it that carries them (a Prompt hands a Thinking to the
    #   next message pushed, which may be text);
    # - model_msg: the stock text message, plus its reasoning when it did
    #   not go to the call after it (DeepSeek V4 wants it back on the
    #   answer that ends a turn of calls, in every later request);
    # - translate: the stock request, then the assistant messages of one
    #   response (the same `turn`) folded into the first of them, the
    #   results of its calls after it in order; reasoning that resumed
    #   after a call is appended, the last reasoning_details (every entry
    #   so far) kept.
    # Only data stamped with the identity of the dialect's own model is
    # written: a fallback model never gets another model's reasoning. A
    # server that refuses the fields (Groq) gets none.
    # Where nothing carries that data, the request is the stock one, the
    # same objects.
    #
    # It stands aside for a dialect class that builds tool-call turns itself
    # below ChatGpt (Vllm, which sends reasoning_content back on its own),
    # while the replay switch is off, on a Discourse older than the newest
    # generation, and for a dialect whose stock message already carries any
    # of these keys (the host replays: left to it, said in status, one warn
    # line).
    module Replay
      CHAT_GPT = "#{NAMESPACE}::Dialects::ChatGpt".freeze
      KEY = OpenAiMessageProcessor::PROVIDER_KEY
      # The fields a server streams reasoning under, which go back as they came.
      FIELDS = %w[reasoning_content reasoning].freeze
      # What an assistant message carries back, besides each call's extra_content.
      REASONING = (FIELDS.map(&:to_sym) + [:reasoning_details]).freeze
      # Groq streams `reasoning`, needs none back, and refuses an assistant
      # message with a field it does not take ("property 'reasoning' is
      # unsupported"): its requests stay stock, by provider or by URL.
      REFUSING_PROVIDERS = %w[groq].freeze
      REFUSING_HOSTS = %r{\Ahttps?://api\.groq\.com(?:[:/]|\z)}i
      IVAR = :@discourse_ai_stream_replay
      OWN = "replays reasoning itself (its own tool_call_msg)"

      # Prepended to the ChatGpt dialect class.
      module DialectPatch
        def translate
          return super unless Replay.active?(self)

          Replay.translating(self) { super }
        end

        private

        def tool_call_msg(msg) = Replay.tool_call(self, msg, super)

        def model_msg(msg) = Replay.text(self, msg, super)
      end

      class << self
        # Called by install!: patches the ChatGpt dialect (the class loaded
        # now) and returns the status entries of its family, by class name.
        def install(replay)
          @host_replays = Set.new
          @newest = Discourse.generation == :newest
          chat_gpt = Discourse.lookup(CHAT_GPT)
          return { CHAT_GPT => entry("not loaded") } unless chat_gpt.is_a?(Class)

          chat_gpt.prepend(DialectPatch) unless chat_gpt <= DialectPatch
          off = off_reason(replay)
          family(chat_gpt).to_h { |klass| [klass.name, entry(off || (OWN if own_tool_calls?(klass)))] }
        end

        # Whether the server behind `model` refuses what the replay writes.
        def refused_by?(model)
          provider = model.provider.to_s if model.respond_to?(:provider)
          url = model.url.to_s if model.respond_to?(:url)
          REFUSING_PROVIDERS.include?(provider) || REFUSING_HOSTS.match?(url.to_s)
        end

        # Whether `dialect`'s requests are written here now.
        def active?(dialect)
          @newest && Discourse.replay? && !own_tool_calls?(dialect.class) &&
            !@host_replays.include?(dialect.class.name)
        end

        # Runs the stock translate (the block) with this request's state on
        # the dialect, then folds each response's calls together.
        def translating(dialect)
          state = Translation.new(dialect)
          dialect.instance_variable_set(IVAR, state)
          state.fold(yield)
        ensure
          dialect.remove_instance_variable(IVAR) if dialect.instance_variable_defined?(IVAR)
        end

        # The stock tool-call message, with what `msg` carries for it.
        def tool_call(dialect, msg, message) = translation(dialect)&.carry(msg, message) || message

        # The stock text message, with the reasoning `msg` carries.
        def text(dialect, msg, message) = translation(dialect)&.text(msg, message) || message

        # The host's stock message already carries `keys`: the class's
        # requests are left to it from now on.
        def host_replays(klass, keys)
          return unless @host_replays.add?(klass.name)

          reason = "the host's dialect already sends #{keys.join(", ")} back"
          Discourse.status[klass.name] = entry(reason)
          Discourse.warn_log("discourse_ai_stream: #{klass.name}: #{reason}; left to it")
        end

        private

        # The translate under way on `dialect` (see translating), or nil.
        def translation(dialect) = (dialect.instance_variable_get(IVAR) if dialect.instance_variable_defined?(IVAR))

        def off_reason(replay)
          return "switched off (install!'s replay:)" if replay == false
          return if @newest

          "Discourse AI's #{Discourse.generation || "unrecognised"} generation: reasoning is read on the newest only"
        end

        def entry(reason) = reason ? { replaced: false, reason: reason, missing: [] } : { replaced: true, missing: [] }

        def family(klass)
          [klass, *klass.subclasses.flat_map { |sub| family(sub) }].select(&:name).uniq.sort_by(&:name)
        end

        # A class below ChatGpt with a tool_call_msg of its own, or a module
        # of its own that has one.
        def own_tool_calls?(klass) = !klass.instance_method(:tool_call_msg).owner.equal?(DialectPatch)
      end

      # One translate of one dialect: whose data may go out, the :model
      # messages' thinking for the call after them, and the response each
      # written assistant message belongs to.
      class Translation
        def initialize(dialect)
          model = dialect.send(:llm_model) if dialect.respond_to?(:llm_model, true)
          # No identity: nothing is this model's, the request stays stock.
          @identity = Discourse.model_identity(model) unless model && Replay.refused_by?(model)
          @class = dialect.class
          @turns = {}.compare_by_identity
          @carried = {}.compare_by_identity
          @moved = Set.new.compare_by_identity
          dialect.prompt.messages.each_cons(2) { |before, after| carry_over(before, after) }
        end

        def carry(msg, message)
          data = ours(msg[:provider_data])
          thinking, info = reasoning(msg)
          return message unless (data || info) && single_call?(message)

          found = REASONING.select { |key| message.key?(key) }
          found << :extra_content if message[:tool_calls].first.key?(:extra_content)
          unless_host(message, found) { write(message, data, thinking, info) }
        end

        # A text message's own reasoning, unless it went to the call right
        # after it: DeepSeek V4 wants it back on the answer that ends a
        # turn of calls too, in every later request. (A call written as
        # text, without native tools, is a :tool_call message: left as it is.)
        def text(msg, message)
          info = ours(msg[:thinking_provider_info]) if msg[:type] == :model
          return message unless info && message.is_a?(Hash) && !@moved.include?(msg[:thinking_provider_info])

          unless_host(message, REASONING.select { |key| message.key?(key) }) do
            write_reasoning(message, msg[:thinking], info)
          end
        end

        # The assistant messages of one turn folded into the first; tool
        # results that answer its calls keep the turn open, anything else
        # closes it.
        def fold(messages)
          return messages if @turns.empty?

          open = nil
          messages.each_with_object([]) do |message, out|
            turn = @turns[message]
            next absorb(open, message) if turn && turn == open&.dig(:turn)

            open = following(open, message, turn)
            out << message
          end
        end

        private

        # The gem's data in `hash`, when it is this model's.
        def ours(hash)
          data = hash[KEY] if hash.is_a?(Hash)
          data if data.is_a?(Hash) && @identity && data[:model] == @identity
        end

        # [thinking text, info] of the message, else of the :model message
        # before it.
        def reasoning(msg)
          info = ours(msg[:thinking_provider_info])
          return [msg[:thinking], info] if info

          @carried[msg[:provider_data]] if msg[:provider_data]
        end

        def carry_over(before, after)
          return unless before[:type] == :model && after[:type] == :tool_call && after[:provider_data]
          return if ours(after[:thinking_provider_info])

          info = ours(before[:thinking_provider_info])
          return unless info

          @carried[after[:provider_data]] = [before[:thinking], info]
          @moved << before[:thinking_provider_info]
        end

        # The block's message, unless the host's stock message already
        # carries `found`: then the host replays, and it is left to it.
        def unless_host(message, found)
          return yield if found.empty?

          Replay.host_replays(@class, found)
          message
        end

        def single_call?(message)
          message.is_a?(Hash) && message[:tool_calls].is_a?(Array) && message[:tool_calls].size == 1 &&
            message[:tool_calls].first.is_a?(Hash)
        end

        def write(message, data, thinking, info)
          message[:tool_calls].first[:extra_content] = data[:extra_content] if data&.dig(:extra_content)
          write_reasoning(message, thinking, info) if info
          @turns[message] = data[:turn] if data&.dig(:turn)
          message
        end

        # Each field the server used holds the thinking ("" when there was
        # none), and reasoning_details go back as merged.
        def write_reasoning(message, thinking, info)
          (Array(info[:fields]).map(&:to_s) & FIELDS).each { |field| message[field.to_sym] = thinking || "" }
          message[:reasoning_details] = info[:reasoning_details] if info[:reasoning_details]
          message
        end

        # The turn open after `message`: its own, the open one while results
        # of its calls come, else none.
        def following(open, message, turn)
          return { turn: turn, message: message, ids: message[:tool_calls].map { |call| call[:id] } } if turn

          open if message[:role] == "tool" && open&.dig(:ids)&.include?(message[:tool_call_id])
        end

        # A later message of the turn into the first: its calls, the text
        # of reasoning that resumed after a call (the stream's text goes on
        # where the first's stopped), and its reasoning_details, which hold
        # every entry merged so far.
        def absorb(open, message)
          first = open[:message]
          first[:tool_calls].concat(message[:tool_calls])
          open[:ids].concat(message[:tool_calls].map { |call| call[:id] })
          REASONING.each do |key|
            next unless message.key?(key)

            text = key != :reasoning_details && first[key].is_a?(String) && message[key].is_a?(String)
            first[key] = text ? first[key] + message[key] : message[key]
          end
        end
      end
    end
  end
end
