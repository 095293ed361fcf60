# frozen_string_literal: true

require_relative "lib/discourse_ai_stream/version"

Gem::Specification.new do |spec|
  spec.name = "discourse_ai_stream"
  spec.version = DiscourseAiStream::VERSION
  spec.authors = ["discourse_ai_stream contributors"]
  spec.license = "MIT"
  spec.summary = "Drop-in Rust replacement for Discourse AI's OpenAI stream processor: no streamed tool call is lost"
  spec.description = <<~DESC.tr("\n", " ").strip
    A replacement for DiscourseAi::Completions::OpenAiMessageProcessor whose
    stream decoding is written in Rust. Installing it from source compiles the
    Rust code, so the host needs cargo.
  DESC
  spec.homepage = DiscourseAiStream::HOMEPAGE
  # Linked from the gem's page: the gems ship README.md, not docs/.
  spec.metadata = {
    "source_code_uri" => spec.homepage,
    "documentation_uri" => "#{spec.homepage}/tree/main/docs",
    "changelog_uri" => "#{spec.homepage}/blob/main/CHANGELOG.md",
    "bug_tracker_uri" => "#{spec.homepage}/issues",
    "rubygems_mfa_required" => "true"
  }
  spec.required_ruby_version = ">= 3.1"

  # Globbed, not `git ls-files`: an export of the source need not be a git
  # checkout. The gem carries the whole cargo workspace (both crates, the
  # workspace Cargo.toml and Cargo.lock, which `cargo build --locked` needs)
  # and none of the build products that may lie around in a working copy.
  build_products = %r{(\A|/)target/|(\A|/)tmp/|/Makefile\z|/mkmf\.log\z|\.(so|bundle|dylib|dll|o)\z|/\.gem\.}
  spec.files = Dir.chdir(__dir__) do
    patterns = %w[Cargo.toml Cargo.lock LICENSE README.md CHANGELOG.md discourse_ai_stream.gemspec ext/**/*
                  lib/**/*.rb lib/tasks/*.rake exe/* sig/**/*.rbs]
    Dir.glob(patterns).select { |path| File.file?(path) }.grep_v(build_products).sort
  end
  spec.bindir = "exe"
  spec.executables = spec.files.grep(%r{\Aexe/}) { |path| File.basename(path) }
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/discourse_ai_stream/extconf.rb"]
end
