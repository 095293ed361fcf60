# frozen_string_literal: true

require "fileutils"
require "open3"
require "rubygems/package"

# What makes a precompiled gem (x86_64-linux, aarch64-linux) out of the source
# gem's specification and the release builds in tmp/gems/PLATFORM/
# (rakelib/gems.rake packages it; spec/platform_gem_spec.rb checks it).
module PlatformGem
  # The Rubies each precompiled gem has a build for: the one list that
  # bin/build-gems, bin/check-platform-gem and .github/workflows/release.yml
  # read. x86_64: the matrix's 3.3 and 3.4 (script/provision/rubies);
  # aarch64: Debian's arm64 3.3 and 3.4 (script/provision/cross-root). Each
  # list is a run of minors with none missing, since a gem's
  # `required_ruby_version` is one range: 3.2 has no build here (no Debian
  # suite packages it), so the run starts at 3.3, the oldest Ruby Discourse
  # supports. A Ruby outside the run (3.1 and 3.2 included) gets the source
  # gem.
  RUBIES = { "x86_64-linux" => %w[3.3 3.4], "aarch64-linux" => %w[3.3 3.4] }.freeze
  # The machine readelf names in each platform's libraries.
  MACHINES = { "x86_64-linux" => "Advanced Micro Devices X86-64", "aarch64-linux" => "AArch64" }.freeze
  # Newest glibc symbol version a library may need: Ubuntu 22.04 has 2.35,
  # Debian 12 (Discourse's image) 2.36.
  MAX_GLIBC = Gem::Version.new("2.34")
  # Where bin/build-gems puts a platform's builds, the gem's tree.
  STAGE = "tmp/gems/%s"
  BUILD = "lib/discourse_ai_stream/%s/discourse_ai_stream.so"

  module_function

  # ">= lowest", "< highest+1.dev": one range, so the minors must follow one
  # another (a host whose Ruby sat in a gap would install a gem with no build
  # it can load).
  def ruby_requirement(minors)
    low, high = minors.map { |minor| Gem::Version.new(minor).segments }.minmax
    run = (low[1]..high[1]).map { |minor| "#{low[0]}.#{minor}" }
    raise ArgumentError, "Rubies #{minors.join(", ")} leave out #{(run - minors).join(", ")}" unless run == minors

    [">= #{low.join(".")}", "< #{high[0]}.#{high[1] + 1}.dev"]
  end

  # Refuses a library built for another machine than PLATFORM's, one that
  # links libruby (it would load a second Ruby, or fail where Ruby is static)
  # or needs a glibc newer than MAX_GLIBC.
  def check_library(path, platform)
    machine = run("readelf", "-h", path)[/Machine:\s*(.+)$/, 1]
    raise "#{path} is for #{machine}, not #{platform}" unless machine == MACHINES.fetch(platform)

    needed = run("readelf", "-d", path).scan(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/).flatten
    libruby = needed.grep(/libruby/)
    raise "#{path} links #{libruby.join(", ")}: a Ruby extension must not" if libruby.any?

    glibc = run("readelf", "-W", "--dyn-syms", path).scan(/@GLIBC_([\d.]+)/).flatten.map { |v| Gem::Version.new(v) }.max
    raise "#{path} needs GLIBC_#{glibc}, newer than #{MAX_GLIBC}" if glibc && glibc > MAX_GLIBC

    { needed: needed, glibc: glibc.to_s }
  end

  def run(*command)
    out, status = Open3.capture2e(*command)
    raise "#{command.join(" ")} failed:\n#{out}" unless status.success?

    out
  end

  def spec(source, platform)
    minors = RUBIES.fetch(platform)
    spec = source.dup
    spec.platform = platform
    spec.extensions = []
    spec.files = source.files.reject { |path| path.start_with?("ext/", "Cargo.") } +
                 minors.map { |minor| format(BUILD, minor) }
    spec.required_ruby_version = ruby_requirement(minors)
    precompiled = "This gem is precompiled for #{platform}: nothing is compiled when it is installed."
    spec.description = source.description.sub(/Installing it from source.*\z/m, precompiled)
    spec
  end

  # Builds SPEC's gem in STAGE, which holds its builds, once the source
  # gem's files it carries are copied beside them; returns the gem's path.
  def build(spec, source, stage)
    (source.files & spec.files).each do |path|
      FileUtils.mkdir_p(File.dirname(File.join(stage, path)))
      FileUtils.cp(path, File.join(stage, path))
    end
    File.join(stage, Dir.chdir(stage) { Gem::Package.build(spec) })
  end
end
