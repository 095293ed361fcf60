# frozen_string_literal: true

require "fileutils"
require "json"
require_relative "support/broken_build"
require_relative "support/child_process"

# lib/discourse_ai_stream.rb loads the build for this Ruby's minor version
# (lib/discourse_ai_stream/<major.minor>/, what a precompiled gem ships) before
# the single build of a source install. Checked in fresh ruby processes.
RSpec.describe "loading the native extension" do
  let(:lib) { File.expand_path("../lib", __dir__) }
  let(:minor) { RUBY_VERSION[/\A\d+\.\d+/] }
  # The extension this process loaded: what each stand-in below loads in the end.
  let(:native) { $LOADED_FEATURES.grep(%r{/discourse_ai_stream\.#{RbConfig::CONFIG["DLEXT"]}\z}).first }
  let(:probe) do
    'require "discourse_ai_stream"; ' \
      'puts [$versioned_build_loaded.inspect, defined?(DiscourseAiStream::Native).inspect].join(" ")'
  end

  # A copy of lib/ whose build for this Ruby cannot load (BrokenBuild).
  def with_broken_lib
    Dir.mktmpdir("broken-") do |dir|
      BrokenBuild.lib_with_broken_build(dir, native)
      yield dir
    end
  end

  def run_ruby(*load_dirs, code)
    ChildProcess.ruby!({}, *load_dirs.flat_map { |dir| ["-I", dir] }, "-e", code)
  end

  it "prefers lib/discourse_ai_stream/<major.minor>/ when it is there" do
    Dir.mktmpdir("versioned-") do |dir|
      # A stand-in for the versioned build: marks that it was loaded, then
      # loads the real extension so the rest of the gem works.
      FileUtils.mkdir_p(File.join(dir, "discourse_ai_stream", minor))
      File.write(File.join(dir, "discourse_ai_stream", minor, "discourse_ai_stream.rb"), <<~RUBY)
        $versioned_build_loaded = true
        require #{native.inspect}
      RUBY
      expect(run_ruby(dir, lib, probe)).to eq('true "constant"')
    end
  end

  it "names each build it tried and why it failed, the Ruby and the glibc the builds need, when none loads" do
    Dir.mktmpdir("broken-") do |dir|
      # This Ruby's build is there but cannot be loaded, as on a host whose
      # glibc is too old.
      broken = BrokenBuild.lib_with_broken_build(dir, native)
      message = run_ruby(dir, 'begin; require "discourse_ai_stream"; rescue LoadError => e; p e.message; end')
                .undump
      expect(message).to start_with("discourse_ai_stream #{DiscourseAiStream::VERSION} has no native extension " \
                                    "that loads on Ruby #{RUBY_VERSION} (#{RUBY_PLATFORM}, glibc ")
      expect(message).to include("the precompiled builds need glibc 2.34 or newer",
                                 "discourse_ai_stream/#{minor}/discourse_ai_stream: ",
                                 "version `GLIBC_9.9.9' not found (required by #{broken})",
                                 "discourse_ai_stream/discourse_ai_stream: cannot load such file",
                                 "docs/troubleshooting.md")
      expect(message).not_to start_with("cannot load such file")
    end
  end

  it "through discourse_ai_stream/host, keeps the LoadError, says so once, and loads what needs no native code" do
    with_broken_lib do |dir|
      code = 'require "discourse_ai_stream/host"; require "json"; ' \
             "puts JSON.generate([DiscourseAiStream.load_error.class.name, defined?(DiscourseAiStream::Native), " \
             "DiscourseAiStream::Discourse::Health.not_in_use.cause, defined?(DiscourseAiStream::Check.run)])"
      output = ChildProcess.run!({}, RbConfig.ruby, "-I", dir, "-e", code)
      error, native_defined, cause, check = JSON.parse(output.lines.last)
      expect([error, native_defined, check]).to eq(["LoadError", nil, "method"])
      expect(cause).to include("has no native extension that loads", "version `GLIBC_9.9.9' not found")
      expect(output.scan("discourse_ai_stream #{DiscourseAiStream::VERSION}: not in use, Discourse's own " \
                         "processors stay in place: discourse_ai_stream #{DiscourseAiStream::VERSION} has no " \
                         "native extension").size).to eq(1), output
    end
  end

  # Loaded, a library cut short (a copy or an install stopped halfway) is a
  # SIGBUS in the dynamic loader, which no rescue catches.
  it "refuses a build cut short before loading it, so a host that must keep running does" do
    Dir.mktmpdir("cut-") do |dir|
      cut = BrokenBuild.lib_with_build(dir, native, File.binread(native, File.size(native) / 2))
      code = 'require "discourse_ai_stream/host"; puts "load_error=" + DiscourseAiStream.load_error.message.dump'
      output = ChildProcess.run!({}, RbConfig.ruby, "-I", dir, "-e", code)
      message = output[/^load_error=(.*)$/, 1].undump
      expect(message).to include("discourse_ai_stream/#{minor}/discourse_ai_stream: #{cut} is cut short: " \
                                 "#{File.size(native) / 2} bytes where its ELF headers need #{File.size(native)}; " \
                                 "reinstall the gem")
      expect(message).not_to include("need glibc"), "no failure is glibc's"
    end
  end

  # Init raising (a class defined twice, the `fatal` magnus raises for a
  # panic in Rust) is no LoadError, and would stop a host's boot as it is.
  { "TypeError" => "raise TypeError, 'superclass mismatch for class OpenAiMessageProcessor'",
    "fatal" => "raise ObjectSpace.each_object(Class).find { _1.name == 'fatal' }, 'panicked in init'" }
    .each do |kind, raising|
    it "takes a build whose Init raises #{kind} for one that does not load, so a host keeps running" do
      Dir.mktmpdir("raising-") do |dir|
        BrokenBuild.copy_lib(dir)
        FileUtils.mkdir_p(File.join(dir, "discourse_ai_stream", minor))
        File.write(File.join(dir, "discourse_ai_stream", minor, "discourse_ai_stream.rb"), raising)
        code = 'require "discourse_ai_stream/host"; puts "load_error=" + DiscourseAiStream.load_error.message.dump'
        output = ChildProcess.run!({}, RbConfig.ruby, "-I", dir, "-e", code)
        message = output[/^load_error=(.*)$/, 1].undump
        expect(message).to include("has no native extension that loads",
                                   "discourse_ai_stream/#{minor}/discourse_ai_stream: its Init raised #{kind}: ",
                                   "discourse_ai_stream/discourse_ai_stream: cannot load such file")
      end
    end
  end

  # A build another Ruby minor loads crashes the process at its first use;
  # its Init refuses such a Ruby. The test hooks stand in for a build of
  # another minor; every other spec, and bin/test's check of the platform
  # gems on Debian's Rubies, loads builds that the check lets through.
  it "refuses a build made for another Ruby minor, so a host keeps running" do
    env = { "DISCOURSE_AI_STREAM_TEST_HOOKS" => "1", "DISCOURSE_AI_STREAM_TEST_BUILT_FOR" => "2.7" }
    code = 'require "discourse_ai_stream/host"; puts "load_error=" + DiscourseAiStream.load_error.message.dump'
    output = ChildProcess.run!(env, RbConfig.ruby, "-I", lib, "-e", code)
    expect(output[/^load_error=(.*)$/, 1].undump).to include(
      "discourse_ai_stream/#{minor}/discourse_ai_stream: this build is for Ruby 2.7, not Ruby #{minor}: " \
      "it would crash the process"
    )
  end

  it "says there is no glibc where confstr refuses its name (musl), instead of raising that" do
    with_broken_lib do |dir|
      code = 'require "etc"; def Etc.confstr(*) = raise(Errno::EINVAL, "confstr"); ' \
             'begin; require "discourse_ai_stream"; rescue LoadError => e; p e.message; end'
      expect(run_ruby(dir, code).undump).to include("(#{RUBY_PLATFORM}, no glibc)")
    end
  end

  it "loads the audit and the command only when they are first used" do
    code = 'require "discourse_ai_stream"; before = $LOADED_FEATURES.grep(%r{discourse_ai_stream/(audit|cli)}); ' \
           "DiscourseAiStream::Audit::PROVIDERS; DiscourseAiStream::CLI::USAGE; " \
           'p [before.size, $LOADED_FEATURES.grep(%r{discourse_ai_stream/(audit|cli)\.rb}).size]'
    expect(run_ruby(lib, code)).to eq("[0, 2]")
  end

  it "falls back to discourse_ai_stream/discourse_ai_stream when there is no versioned build" do
    # A copy of lib/ without any versioned build (as a source install has it):
    # the single build is a stand-in that marks it was loaded, then loads the
    # real extension this process runs.
    Dir.mktmpdir("single-") do |dir|
      BrokenBuild.copy_lib(dir)
      File.write(File.join(dir, "discourse_ai_stream", "discourse_ai_stream.rb"), <<~RUBY)
        $single_build_loaded = true
        require #{native.inspect}
      RUBY
      single_probe = probe.sub("$versioned_build_loaded", "$single_build_loaded")
      expect(run_ruby(dir, single_probe)).to eq('true "constant"')
    end
  end
end
