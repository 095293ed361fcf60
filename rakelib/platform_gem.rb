# frozen_string_literal: true

require "open3"
require "rubygems/package"

# What makes the precompiled x86_64-linux gem out of the source gem's
# specification and the release builds in lib/discourse_ai_stream/X.Y/
# (rakelib/gems.rake packages it; spec/platform_gem_spec.rb checks it).
module PlatformGem
  PLATFORM = "x86_64-linux"
  # Newest glibc symbol version a library may need: Ubuntu 22.04 has 2.35,
  # Debian 12 (Discourse's image) 2.36.
  MAX_GLIBC = Gem::Version.new("2.34")
  BUILD = "lib/discourse_ai_stream/%s/discourse_ai_stream.so"
  # A minor between the lowest and the highest build that has none of its own
  # is excluded patch by patch (a Gem::Requirement is an AND of conditions, so
  # a range cannot skip a minor): a host with that Ruby (3.2) then installs
  # the source gem instead of a gem it could not load. Ruby's patch numbers
  # stay far below this.
  MAX_PATCH = 30
  PRECOMPILED = "This gem is precompiled for x86_64 Linux: nothing is compiled when it is installed."

  module_function

  def minors
    Dir[format(BUILD, "*")].map { |path| path.split("/")[-2] }.sort_by { |minor| Gem::Version.new(minor) }
  end

  # ">= lowest", "< highest+1.dev", and "!= X.Y.P" for every minor in between
  # without a build.
  def ruby_requirement(minors)
    versions = minors.map { |minor| Gem::Version.new(minor) }
    low, high = versions.minmax
    next_minor = Gem::Version.new("#{high.segments[0]}.#{high.segments[1] + 1}.dev")
    gaps = (low.segments[1]..high.segments[1]).map { |m| Gem::Version.new("#{low.segments[0]}.#{m}") } - versions
    [">= #{low}", "< #{next_minor}"] + gaps.flat_map { |gap| (0..MAX_PATCH).map { |patch| "!= #{gap}.#{patch}" } }
  end

  # Refuses a library that links libruby (it would load a second Ruby, or fail
  # where Ruby is static) or needs a glibc newer than MAX_GLIBC.
  def check_library(path)
    needed = run("readelf", "-d", path).scan(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/).flatten

    libruby = needed.grep(/libruby/)
    raise "#{path} links #{libruby.join(", ")}: a Ruby extension must not" if libruby.any?

    glibc = run("objdump", "-T", path).scan(/GLIBC_([\d.]+)/).flatten.map { |v| Gem::Version.new(v) }.max
    raise "#{path} needs GLIBC_#{glibc}, newer than #{MAX_GLIBC}" if glibc && glibc > MAX_GLIBC

    { needed: needed, glibc: glibc.to_s }
  end

  def run(*command)
    out, status = Open3.capture2e(*command)
    raise "#{command.join(" ")} failed:\n#{out}" unless status.success?

    out
  end

  def spec(source, minors)
    spec = source.dup
    spec.platform = PLATFORM
    spec.extensions = []
    spec.files = source.files.reject { |path| path.start_with?("ext/", "Cargo.") } +
                 minors.map { |minor| format(BUILD, minor) }
    spec.required_ruby_version = ruby_requirement(minors)
    spec.description = source.description.sub(/Installing it from source.*\z/m, PRECOMPILED)
    spec
  end
end
