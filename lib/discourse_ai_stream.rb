# frozen_string_literal: true

require_relative "discourse_ai_stream/version"

# The native extension (Rust, see ext/) defines DiscourseAiStream::Native and
# the classes the Ruby files below extend. A precompiled ("fat") gem ships one
# build per Ruby minor version in lib/discourse_ai_stream/<major.minor>/; a
# source install (`gem install`, `rake compile`) builds a single one.
begin
  require "discourse_ai_stream/#{RUBY_VERSION[/\A\d+\.\d+/]}/discourse_ai_stream"
rescue LoadError
  require "discourse_ai_stream/discourse_ai_stream"
end

# ---- Ruby parts of the gem: add their require_relative lines below. ----
require_relative "discourse_ai_stream/errors"
require_relative "discourse_ai_stream/config"
require_relative "discourse_ai_stream/tool_call"
require_relative "discourse_ai_stream/thinking"
require_relative "discourse_ai_stream/processor_support"
require_relative "discourse_ai_stream/open_ai_message_processor"
require_relative "discourse_ai_stream/open_ai_responses_message_processor"
require_relative "discourse_ai_stream/discourse"
require_relative "discourse_ai_stream/audit"
require_relative "discourse_ai_stream/railtie" if defined?(::Rails::Railtie)
