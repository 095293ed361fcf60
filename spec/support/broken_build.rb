# frozen_string_literal: true

require "fileutils"

# lib/ as a host whose native build cannot load has it (a glibc too old for
# the precompiled build), for child processes to load the gem from.
module BrokenBuild
  LIB = File.expand_path("../../lib", __dir__)

  module_function

  # A copy of lib/'s Ruby files in `dir`, with no build at all.
  def copy_lib(dir)
    Dir.chdir(LIB) { Dir.glob("**/*.rb") }.each do |path|
      FileUtils.mkdir_p(File.join(dir, File.dirname(path)))
      FileUtils.cp(File.join(LIB, path), File.join(dir, path))
    end
  end

  # The copy, with this Ruby's build there but unable to load: a copy of
  # `native` (the library this process loaded) that asks for a glibc symbol
  # version no glibc has (same length, so the file stays whole). Returns
  # the broken build's path.
  def lib_with_broken_build(dir, native)
    lib_with_build(dir, native, File.binread(native).sub("GLIBC_2.2.5\0".b, "GLIBC_9.9.9\0".b))
  end

  # The copy, with `bytes` as this Ruby's build (named as `native` is).
  # Returns the build's path.
  def lib_with_build(dir, native, bytes)
    copy_lib(dir)
    build = File.join(dir, "discourse_ai_stream", RUBY_VERSION[/\A\d+\.\d+/], File.basename(native))
    FileUtils.mkdir_p(File.dirname(build))
    File.binwrite(build, bytes)
    build
  end
end
