# frozen_string_literal: true

require "etc"
require_relative "discourse_ai_stream/version"

# The native extension (Rust, see ext/) defines DiscourseAiStream::Native and
# the classes the Ruby files below extend. A precompiled ("fat") gem ships one
# build per Ruby minor version in lib/discourse_ai_stream/<major.minor>/; a
# source install (`gem install`, `rake compile`) builds a single one. When
# neither loads, the error names each build tried and why it failed (a build
# that is there but cannot load, e.g. for want of a newer glibc, is the cause
# to report, not the "cannot load such file" of the fallback).
module DiscourseAiStream
  BUILDS = ["discourse_ai_stream/#{RUBY_VERSION[/\A\d+\.\d+/]}/discourse_ai_stream",
            "discourse_ai_stream/discourse_ai_stream"].freeze

  def self.load_native(builds = BUILDS)
    failures = builds.map do |build|
      return require build
    rescue LoadError => e
      "#{build}: #{e.message}"
    end
    glibc = Etc.confstr(Etc::CS_GNU_LIBC_VERSION) if defined?(Etc::CS_GNU_LIBC_VERSION)
    raise LoadError, "discourse_ai_stream #{VERSION} has no native extension that loads on Ruby #{RUBY_VERSION} " \
                     "(#{RUBY_PLATFORM}, #{glibc || "no glibc"}); the precompiled builds need glibc 2.34 or newer. " \
                     "Tried:\n#{failures.join("\n")}\nSee #{DOCS}/troubleshooting.md"
  end

  class << self
    # The LoadError that kept the native extension from loading when the gem
    # was loaded through discourse_ai_stream/host, which carries on without
    # it; nil when it loaded.
    attr_accessor :load_error
  end

  # Loaded when first used: a Discourse process never needs them, only the
  # rake tasks, bin/repro and the command do.
  autoload :Audit, File.expand_path("discourse_ai_stream/audit", __dir__)
  autoload :BugReport, File.expand_path("discourse_ai_stream/bug_report", __dir__)
  autoload :Check, File.expand_path("discourse_ai_stream/check", __dir__)
  autoload :CLI, File.expand_path("discourse_ai_stream/cli", __dir__)
end
DiscourseAiStream.load_native

# ---- Ruby parts of the gem: add their require_relative lines below. ----
require_relative "discourse_ai_stream/errors"
require_relative "discourse_ai_stream/config"
require_relative "discourse_ai_stream/tool_call"
require_relative "discourse_ai_stream/thinking"
require_relative "discourse_ai_stream/processor_support"
require_relative "discourse_ai_stream/open_ai_message_processor"
require_relative "discourse_ai_stream/open_ai_responses_message_processor"
require_relative "discourse_ai_stream/discourse"
require_relative "discourse_ai_stream/railtie" if defined?(::Rails::Railtie)
