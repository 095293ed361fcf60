# frozen_string_literal: true

module DiscourseAiStream
  # What both processors (chat completions and Responses API) share on the
  # Ruby side: the anomaly hook, the Thinking class, inspect, and refusing
  # copies of native state.
  module ProcessorSupport
    attr_accessor :on_anomaly
    attr_reader :output_limit, :thinking_class

    def inspect
      "#<#{self.class.name} partial_tool_calls=#{partial_tool_calls?} #{inspect_options} anomalies=#{anomalies.size}>"
    rescue ConcurrencyError, InternalError
      # Busy (inspected from a callback or another thread) or stopped: the
      # state cannot be read now, and inspect must not raise.
      "#<#{self.class.name} (busy or stopped)>"
    end

    private

    # The class of the Thinking objects returned, and the keywords it takes.
    def thinking_class=(klass)
      @thinking_class = klass || DiscourseAiStream.thinking_class
      @thinking_keywords = Discourse.keywords(@thinking_class)
    end

    # A new Thinking, with the keywords its class takes (older Discourse
    # has no provider_info).
    def thinking(**keywords)
      @thinking_class.new(**(@thinking_keywords ? keywords.slice(*@thinking_keywords) : keywords))
    end

    # The stream state lives in native memory that dup and clone do not
    # copy; a copy would be an object with no state at all.
    def initialize_copy(_other)
      raise TypeError, "#{self.class.name} cannot be copied (dup/clone): it holds one stream's state; " \
                       "create a new processor instead"
    end

    # Called by the native code with the anomalies a call recorded. The hook
    # runs with asynchronous interrupts deferred, so a StandardError rescued
    # here is the hook's own; one raised by another thread (Timeout,
    # Thread#raise) lands after the loop and is not taken for it.
    def __deliver_anomalies(list)
      hook = @on_anomaly || DiscourseAiStream.on_anomaly
      return unless hook

      Thread.handle_interrupt(Object => :never) do
        list.each do |anomaly|
          hook.call(anomaly)
        rescue StandardError => e
          # Not Kernel#warn, which says nothing under -W0.
          Warning.warn("discourse_ai_stream: on_anomaly hook raised #{e.class}: #{e.message}\n")
        end
      end
      nil
    end
  end
end
