# frozen_string_literal: true

# The chat-completions dialects, as docs/discourse-contract.md describes
# them ("The dialects"): what turns a Prompt's messages into the request's
# `messages`. The same in every generation as far as the gem is concerned;
# loaded after endpoints.rb.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

module DiscourseAi
  module Completions
    module Dialects
      # Blank as ActiveSupport means it: nil, a String of whitespace, an
      # empty collection, or a collection of blank parts.
      BLANK = lambda do |value|
        case value
        when nil then true
        when String then value.strip.empty?
        when Array then value.all? { |part| BLANK.call(part) }
        when Hash then value.empty?
        else false
        end
      end

      # Native tools of the chat API: the tool list, a call as an assistant
      # message of its own with `content: nil` and that one call, a result as
      # a `tool` message. Reads the call's id, name and arguments, nothing else.
      class OpenAiTools
        def initialize(tools)
          @tools = tools
        end

        def translated_tools
          @tools.map do |tool|
            { type: "function",
              function: { name: tool[:name], description: tool[:description], parameters: tool[:parameters] } }
          end
        end

        def from_raw_tool_call(msg)
          arguments = JSON.parse(msg[:content], symbolize_names: true)[:arguments]
          call = { type: "function", function: { arguments: arguments.to_json, name: msg[:name] }, id: msg[:id] }
          { role: "assistant", content: nil, tool_calls: [call] }
        end

        def from_raw_tool(msg)
          { role: "tool", tool_call_id: msg[:id], content: msg[:content], name: msg[:name] }
        end
      end

      # Tools written into the text (a model without native tools): a call
      # is a text message of the assistant.
      class XmlTools
        def initialize(tools)
          @tools = tools
        end

        def translated_tools = []

        def from_raw_tool_call(msg)
          "<function_calls><invoke><tool_name>#{msg[:name]}</tool_name>" \
            "<parameters>#{msg[:content]}</parameters></invoke></function_calls>"
        end

        def from_raw_tool(msg)
          "<function_results><result><tool_name>#{msg[:name]}</tool_name>" \
            "<json>#{msg[:content]}</json></result></function_results>"
        end
      end

      # The base dialect: the prompt's messages, trimmed unless the prompt
      # says skip_trim, each mapped by its type, nils dropped.
      class Dialect
        def self.all_dialects = [ChatGpt, Mistral, Vllm, OpenAiCompatible]

        # The first dialect that can translate for the model (OpenAiCompatible
        # takes anything).
        def self.dialect_for(llm_model) = all_dialects.find { |klass| klass.can_translate?(llm_model) }

        attr_reader :prompt

        def initialize(prompt, llm_model, opts: {})
          @prompt = prompt
          @llm_model = llm_model
          @opts = opts
        end

        def tools = @tools ||= tools_dialect.translated_tools

        def translate
          trimmed(prompt.messages).map do |msg|
            case msg[:type]
            when :system then system_msg(msg)
            when :user then user_msg(msg)
            when :model then model_msg(msg)
            when :tool_call then tool_call_msg(msg)
            when :tool then tool_msg(msg)
            else raise ArgumentError, "unknown message type #{msg[:type].inspect}"
            end
          end.compact
        end

        private

        attr_reader :llm_model, :opts

        def tools_dialect = @tools_dialect ||= XmlTools.new(prompt.tools)

        def tool_call_msg(msg) = model_msg(msg.merge(content: tools_dialect.from_raw_tool_call(msg)))

        def tool_msg(msg) = user_msg(msg.merge(content: tools_dialect.from_raw_tool(msg)))

        # Without skip_trim, from the newest message back (no token budget
        # here): the system message stays first, a tool call is kept whole,
        # any other message is skipped when its content is blank (a :model
        # message of "" too, whatever thinking it carries), and a tool result
        # left first without its call is dropped. Each kept message is a
        # shallow copy, as the host's trimming makes.
        def trimmed(messages)
          return messages if prompt.skip_trim

          system, rest = messages.first&.dig(:type) == :system ? [[messages.first], messages.drop(1)] : [[], messages]
          kept = rest.reverse.filter_map do |msg|
            msg.dup if msg[:type] == :tool_call || !BLANK.call(msg[:content])
          end
          kept.pop if kept.last&.dig(:type) == :tool
          system + kept.reverse
        end
      end

      # OpenAI, Azure and OpenRouter: native tools unless the model's
      # disable_native_tools param is set; a :model message is an assistant
      # message of its text (its thinking is not read); each tool call is an
      # assistant message of its own.
      class ChatGpt < Dialect
        def self.can_translate?(llm_model)
          %w[open_ai azure open_router].include?(llm_model.provider) && !llm_model.url.to_s.include?("/v1/responses")
        end

        def native_tool_support? = %w[open_ai azure].include?(llm_model.provider)

        def disable_native_tools? = llm_model.lookup_custom_param("disable_native_tools") ? true : false

        private

        def tools_dialect
          return super if disable_native_tools?

          @tools_dialect ||= OpenAiTools.new(prompt.tools)
        end

        def system_msg(msg) = { role: "system", content: msg[:content] }

        def user_msg(msg) = message_for_role("user", msg)

        def model_msg(msg) = message_for_role("assistant", msg)

        def tool_call_msg(msg) = disable_native_tools? ? super : tools_dialect.from_raw_tool_call(msg)

        def tool_msg(msg) = disable_native_tools? ? super : tools_dialect.from_raw_tool(msg)

        # The role, the sender's id as `name`, the text.
        def message_for_role(role, msg)
          message = { role: role }
          message[:name] = msg[:id] if msg[:id]
          message[:content] = msg[:content].is_a?(Array) ? msg[:content].grep(String).join : msg[:content]
          message
        end
      end

      # Mistral: no user names (the name goes in front of the text), and
      # `content: ""` on every assistant message that carries tool calls.
      class Mistral < ChatGpt
        def self.can_translate?(llm_model) = llm_model.provider == "mistral"

        def translate
          super.each { |message| message[:content] = "" if message[:role] == "assistant" && message[:tool_calls] }
        end

        private

        def user_msg(msg)
          message = super
          name = message.delete(:name)
          message[:content] = "#{name}: #{message[:content]}" if name
          message
        end
      end

      # Every other provider (the fallback): ChatGpt's messages, with the
      # system prompt folded into the first user message when the model's
      # disable_system_prompt param is set.
      class OpenAiCompatible < ChatGpt
        def self.can_translate?(_llm_model) = true

        def translate
          messages = super
          return messages unless llm_model.lookup_custom_param("disable_system_prompt")

          system, user = messages.shift(2)
          messages.unshift(user.merge(content: [system[:content], user[:content]].join("\n")))
        end
      end

      # vLLM builds its tool-call turns itself: with native tools, each call's
      # message gets `reasoning_content` from the message's thinking (when
      # there is some) and the batch id the endpoint stamped; `translate`
      # folds the calls of one batch into the batch's first assistant
      # message (results of that batch keep it open, anything else closes
      # it), taking a later message's reasoning_content only when the first
      # has none. (The host gates this on native tool support; the stand-in
      # gates it on native tools being in use, as a newer ChatGpt that lets
      # vLLM use native tools would.)
      class Vllm < OpenAiCompatible
        def self.can_translate?(llm_model) = llm_model.provider == "vllm"

        def translate = fold_batches(super)

        private

        def tool_call_msg(msg)
          message = super
          return message if disable_native_tools?

          message[:reasoning_content] = msg[:thinking] unless BLANK.call(msg[:thinking])
          with_batch(message, msg)
        end

        def tool_msg(msg) = disable_native_tools? ? super : with_batch(super, msg)

        def with_batch(message, msg)
          batch = msg.dig(:provider_data, :vllm, :tool_batch_id)
          message[:tool_batch_id] = batch if batch
          message
        end

        def fold_batches(messages)
          open = nil
          messages.each_with_object([]) do |message, out|
            batch = message.delete(:tool_batch_id)
            calls = batch && message[:role] == "assistant" && message[:tool_calls]
            next fold_into(open[:message], message) if calls && open&.dig(:batch) == batch

            open = calls ? { batch: batch, message: message } : still_open(open, message, batch)
            out << message
          end
        end

        # A result of the open batch keeps it open; anything else closes it.
        def still_open(open, message, batch)
          open if message[:role] == "tool" && batch == open&.dig(:batch)
        end

        def fold_into(first, message)
          first[:tool_calls].concat(message[:tool_calls])
          return unless BLANK.call(first[:reasoning_content]) && !BLANK.call(message[:reasoning_content])

          first[:reasoning_content] = message[:reasoning_content]
        end
      end
    end
  end
end
