# frozen_string_literal: true

# Process-wide settings of the gem.
module DiscourseAiStream
  # Process-wide settings. Each processor reads them when it is created.
  class << self
    # The ToolCall class for new processors: set explicitly, else
    # DiscourseAi::Completions::ToolCall when Discourse has defined it, else
    # DiscourseAiStream::ToolCall. Looked up when asked, because Discourse
    # autoloads its classes after this gem is required.
    def tool_call_class = @tool_call_class || discourse_or_own(:ToolCall)

    # The Thinking class for new Responses processors, resolved as the
    # ToolCall class is: set explicitly, else DiscourseAi::Completions::Thinking
    # when Discourse has defined it, else DiscourseAiStream::Thinking.
    def thinking_class = @thinking_class || discourse_or_own(:Thinking)

    # Receives every anomaly of every processor without its own hook.
    attr_accessor :on_anomaly

    # :as_sent or :net_of_cache; see OpenAiMessageProcessor#initialize.
    # Unset, it follows the host: where DiscourseAi::Completions is loaded,
    # the accounting of that Discourse generation (its specs expect it,
    # installed or not); elsewhere the server's own count.
    def default_usage = @default_usage || (defined?(::DiscourseAi::Completions) ? Discourse.usage_mode : :as_sent)

    # Setting one of these to nil restores its automatic choice.
    attr_writer :tool_call_class, :thinking_class, :default_usage

    private

    # Discourse's DiscourseAi::Completions::<name> when Discourse has defined
    # it, else the gem's own class of that name.
    def discourse_or_own(name)
      discourse = defined?(::DiscourseAi::Completions) && ::DiscourseAi::Completions
      discourse&.const_defined?(name, false) ? discourse.const_get(name, false) : const_get(name, false)
    end
  end
end
