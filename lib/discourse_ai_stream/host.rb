# frozen_string_literal: true

# The gem as a host that must keep running loads it (the Discourse plugin's
# plugin.rb, after `gem "discourse_ai_stream", VERSION, require: false`):
# `require "discourse_ai_stream"`, except that a native extension that does
# not load is kept in DiscourseAiStream.load_error and logged, not raised.
# A plain require raises there, and a LoadError out of a plugin stops
# Discourse's boot. What needs no native code is loaded all the same: the
# Discourse integration (whose install! then leaves every stock processor in
# place and says why in status), the health report and the rake tasks.
begin
  require_relative "../discourse_ai_stream"
rescue LoadError => e
  DiscourseAiStream.load_error = e
  require_relative "discourse"
  require_relative "railtie" if defined?(::Rails::Railtie)
  DiscourseAiStream::Discourse.warn_log("discourse_ai_stream #{DiscourseAiStream::VERSION}: not in use, " \
                                        "Discourse's own processors stay in place: #{e.message}", :error)
end
