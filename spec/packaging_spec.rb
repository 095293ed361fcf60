# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "rubygems/package"
require "zlib"
require_relative "support/child_process"

# Builds the source gem and installs it the way a user would, once per rspec
# run (the first example that asks pays for it; the compile takes a while).
module PackagingBuild
  ROOT = File.expand_path("..", __dir__)

  # Runs in a fresh ruby that sees only the installed gem.
  PROBE = <<~RUBY
    require "json"
    require "discourse_ai_stream"
    dlext = RbConfig::CONFIG["DLEXT"]
    puts JSON.generate(
      version: DiscourseAiStream::VERSION,
      native: defined?(DiscourseAiStream::Native),
      extensions: $LOADED_FEATURES.grep(%r{/discourse_ai_stream\\.\#{dlext}\\z}),
      # Files of the Ruby installation itself are not the gem's, even where
      # its path says discourse_ai_stream (script/provision/rubies' cache).
      gem_files: $LOADED_FEATURES.grep(%r{/discourse_ai_stream[/.]})
                                 .reject { |path| path.start_with?("\#{RbConfig::CONFIG["prefix"]}/") },
      load_path: $LOAD_PATH
    )
  RUBY

  class << self
    def tmp
      @tmp ||= File.realpath(Dir.mktmpdir("discourse_ai_stream-packaging-")).tap do |dir|
        at_exit { FileUtils.rm_rf(dir) }
      end
    end

    def gem_file
      @gem_file ||= File.join(tmp, "discourse_ai_stream.gem").tap do |path|
        run!({}, "gem", "build", "--norc", "discourse_ai_stream.gemspec", "--output", path)
      end
    end

    def package
      @package ||= Gem::Package.new(gem_file)
    end

    def install_dir
      @install_dir ||= File.join(tmp, "gems").tap do |dir|
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        # The repo's target/ keeps the registry crates compiled; only the two
        # crates of the installed copy are compiled again.
        run!({ "CARGO_TARGET_DIR" => File.join(ROOT, "target") },
             "gem", "install", "--norc", "--local", "--install-dir", dir, "--no-document", gem_file)
        seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        RSpec.configuration.reporter.message(format("packaging: gem install (cargo build) took %.1f s", seconds))
      end
    end

    # What a fresh ruby process with only the installed gem loads.
    def probe
      @probe ||= begin
        env = { "GEM_HOME" => install_dir, "GEM_PATH" => install_dir }
        JSON.parse(run!(env, RbConfig.ruby, "-e", PROBE, chdir: tmp).lines.last)
      end
    end

    # Runs the executable RubyGems installed for the gem, in a fresh ruby that
    # sees only the installed gem, on a fixture of this checkout.
    def run_installed_exe(*args)
      env = { "GEM_HOME" => install_dir, "GEM_PATH" => install_dir }
      run!(env, RbConfig.ruby, File.join(install_dir, "bin", "discourse-ai-stream"), *args, chdir: tmp)
    end

    def cargo_workspace_version
      File.read(File.join(ROOT, "Cargo.toml"))[/^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"/m, 1]
    end

    def cargo_workspace_members
      members = File.read(File.join(ROOT, "Cargo.toml"))[/^members\s*=\s*\[([^\]]*)\]/m, 1]
      members.to_s.scan(/"([^"]+)"/).flatten
    end

    private

    # `gem` is run by this ruby.
    def run!(env, *command, chdir: ROOT)
      command = [RbConfig.ruby, "-S", *command] if command.first == "gem"
      ChildProcess.run!(env, *command, chdir: chdir)
    end
  end
end

RSpec.describe "the source gem", :packaging do
  let(:files) { PackagingBuild.package.contents }

  it "carries the whole cargo workspace and the Ruby code" do
    expected = %w[Cargo.toml Cargo.lock ext/discourse_ai_stream/extconf.rb lib/discourse_ai_stream.rb
                  lib/discourse_ai_stream/version.rb LICENSE README.md]
    PackagingBuild.cargo_workspace_members.each do |member|
      expected << "#{member}/Cargo.toml" << "#{member}/src/lib.rs"
    end
    expect(files).to include(*expected)
  end

  it "ships README.md and LICENSE, not docs/ (its pages are read in the repository)" do
    expect(files).to include("README.md", "LICENSE")
    expect(files.grep(%r{\Adocs/})).to eq([])
  end

  it "ships CHANGELOG.md and the RBS signatures, and links its page to the docs, the changelog and the tracker" do
    expect(files).to include("CHANGELOG.md", "sig/discourse_ai_stream.rbs")
    metadata = PackagingBuild.package.spec.metadata
    expect(metadata.keys).to include("documentation_uri", "changelog_uri", "bug_tracker_uri", "source_code_uri")
    expect(metadata["changelog_uri"]).to end_with("/CHANGELOG.md")
  end

  it "carries no build products" do
    expect(files.grep(%r{(\A|/)(target|tmp)/|\.(so|bundle|dylib|dll|o)\z|(\A|/)Makefile\z|mkmf\.log})).to eq([])
  end

  it "builds the extension at install time" do
    expect(PackagingBuild.package.spec.extensions).to eq(["ext/discourse_ai_stream/extconf.rb"])
  end

  it "has the version of the cargo workspace" do
    expect(PackagingBuild.package.spec.version.to_s).to eq(PackagingBuild.cargo_workspace_version)
  end

  it "installs with gem install and loads its native extension from the installed copy" do
    probe = PackagingBuild.probe
    install_dir = PackagingBuild.install_dir
    expect(probe).to include("version" => DiscourseAiStream::VERSION, "native" => "constant")
    expect(probe["extensions"]).to contain_exactly(start_with("#{install_dir}/"))
    expect(probe["gem_files"]).to include(end_with("/lib/discourse_ai_stream.rb"))
    expect(probe["gem_files"]).to all(start_with("#{install_dir}/"))
    expect(probe["load_path"]).not_to include(start_with(PackagingBuild::ROOT))
  end

  it "is as large as docs/installing.md says, and so is the release build it compiles" do
    page = File.read(File.join(PackagingBuild::ROOT, "docs/installing.md"))
    kb = page[/^\| `discourse_ai_stream-VERSION\.gem` .* \| (\d+) KB \|$/, 1]
    unpacked, compressed = page.match(/each build is about ([\d.]+) MB unpacked, ([\d.]+) MB compressed/).captures
    build = File.binread(PackagingBuild.probe["extensions"].first)
    { "source gem (KB)" => [kb, File.size(PackagingBuild.gem_file) / 1024.0],
      "a build unpacked (MB)" => [unpacked, build.bytesize / 1e6],
      "a build compressed (MB)" => [compressed, Zlib::Deflate.deflate(build, 6).bytesize / 1e6] }
      .each do |what, (stated, real)|
        expect(real).to be_within(real * 0.15).of(Float(stated)), "#{what}: the page says #{stated}, it is #{real}"
      end
  end

  it "carries the check task and the bug report's streams, which run from the installed copy: no clone needed" do
    expect(files).to include("lib/tasks/discourse_ai_stream.rake", "lib/discourse_ai_stream/check.rb",
                             "lib/discourse_ai_stream/bug_report.rb")
    env = { "GEM_HOME" => PackagingBuild.install_dir, "GEM_PATH" => PackagingBuild.install_dir, "RUBYOPT" => nil }
    code = 'require "discourse_ai_stream"; exit DiscourseAiStream::Check.run'
    output, status = ChildProcess.unbundled do
      Open3.capture2e(env, RbConfig.ruby, "-e", code, chdir: PackagingBuild.tmp)
    end
    # Outside Discourse: nothing to compare with, nothing installed.
    expect(status.exitstatus).to eq(DiscourseAiStream::Check::NOT_IN_USE), output
    expect(output).to include("chat, 3 calls, partial_tool_calls: true:", "stock not loaded, gem 3 of 3",
                              "install!: not run here")
  end

  it "installs the discourse-ai-stream executable, which runs from the installed copy" do
    fixture = File.join(PackagingBuild::ROOT, "spec/fixtures/mistral_parallel.sse")
    output = PackagingBuild.run_installed_exe("replay", "--json", fixture)
    report = JSON.parse(output)
    expect(report.fetch("tool_calls").map { |call| call["id"] }).to eq(%w[D681PevKs Xk29LmQpT])
    expect(report.fetch("error")).to be_nil
  end
end
