# frozen_string_literal: true

require "etc"
require_relative "discourse_ai_stream/version"

# The native extension (Rust, see ext/) defines DiscourseAiStream::Native and
# the classes the Ruby files below extend. A precompiled ("fat") gem ships one
# build per Ruby minor version in lib/discourse_ai_stream/<major.minor>/; a
# source install (`gem install`, `rake compile`) builds a single one. When
# neither loads, the error names each build tried and why it failed (a build
# that is there but cannot load, e.g. for want of a newer glibc, is the cause
# to report, not the "cannot load such file" of the fallback). A build whose
# Init raises does not load either: the LoadError says what it raised.
module DiscourseAiStream
  BUILDS = ["discourse_ai_stream/#{RUBY_VERSION[/\A\d+\.\d+/]}/discourse_ai_stream",
            "discourse_ai_stream/discourse_ai_stream"].freeze

  def self.load_native(builds = BUILDS)
    failures = builds.map do |build|
      cut = cut_short(build) and raise LoadError, cut
      return require build
    rescue LoadError => e
      "#{build}: #{e.message}"
    rescue Exception => e # rubocop:disable Lint/RescueException -- Init's own failures (a panic is `fatal`) too
      raise if e.is_a?(SignalException) || e.is_a?(SystemExit) || e.is_a?(NoMemoryError)

      "#{build}: its Init raised #{e.class}: #{e.message}"
    end
    glibc = libc_version
    need = " the precompiled builds need glibc 2.34 or newer." if failures.any? { |failure| failure.include?("GLIBC_") }
    raise LoadError, "discourse_ai_stream #{VERSION} has no native extension that loads on Ruby #{RUBY_VERSION} " \
                     "(#{RUBY_PLATFORM}, #{glibc || "no glibc"});#{need} " \
                     "Tried:\n#{failures.join("\n")}\nSee #{DOCS}/troubleshooting.md"
  end

  # Why the library `build` resolves to is shorter than its ELF headers say
  # (a copy or an install cut off); nil when it is whole, or not a 64-bit
  # little-endian ELF library. Loaded, a cut library crashes the process
  # (SIGBUS) where a LoadError would leave the host running.
  def self.cut_short(build)
    type, path = $LOAD_PATH.resolve_feature_path(build)
    need, size = File.open(path, "rb") { |file| [elf_bytes(file), file.size] } if type == :so
    "#{path} is cut short: #{size} bytes where its ELF headers need #{need}; reinstall the gem" if need && need > size
  rescue SystemCallError
    nil # unreadable: require says why
  end

  # The bytes an ELF file has at least, by its header: up to the end of its
  # section header table, which linkers write last (and of its program
  # header table, for a file without sections).
  def self.elf_bytes(file)
    head = file.read(64)
    return unless head&.bytesize == 64 && head.start_with?("\x7FELF\x02\x01".b)

    phoff, shoff, phsize, phnum, shsize, shnum = head.unpack("@32Q<Q<@54S<S<S<S<")
    [phoff + (phsize * phnum), shoff + (shsize * shnum)].max
  end

  # The glibc version, nil without one (musl's confstr refuses the name).
  def self.libc_version
    Etc.confstr(Etc::CS_GNU_LIBC_VERSION) if defined?(Etc::CS_GNU_LIBC_VERSION)
  rescue SystemCallError
    nil
  end
  private_class_method :cut_short, :elf_bytes, :libc_version

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
