# frozen_string_literal: true

# Process-wide settings of the gem.
module DiscourseAiStream
  # Process-wide settings. Each processor reads them when it is created.
  class << self
    # The ToolCall class for new processors: set explicitly, else
    # DiscourseAi::Completions::ToolCall when Discourse has defined it, else
    # DiscourseAiStream::ToolCall. Looked up when asked, because Discourse
    # autoloads its classes after this gem is required.
    def tool_call_class
      return @tool_call_class if @tool_call_class

      if defined?(::DiscourseAi::Completions::ToolCall)
        ::DiscourseAi::Completions::ToolCall
      else
        DiscourseAiStream::ToolCall
      end
    end

    # nil restores the automatic choice.
    attr_writer :tool_call_class

    # The Thinking class for new Responses processors, resolved as the
    # ToolCall class is: set explicitly, else DiscourseAi::Completions::Thinking
    # when Discourse has defined it, else DiscourseAiStream::Thinking.
    def thinking_class
      return @thinking_class if @thinking_class

      if defined?(::DiscourseAi::Completions::Thinking)
        ::DiscourseAi::Completions::Thinking
      else
        DiscourseAiStream::Thinking
      end
    end

    # nil restores the automatic choice.
    attr_writer :thinking_class

    # Receives every anomaly of every processor without its own hook.
    attr_accessor :on_anomaly

    # :current or :legacy; see OpenAiMessageProcessor#initialize.
    def default_usage
      @default_usage || :current
    end

    attr_writer :default_usage
  end
end
