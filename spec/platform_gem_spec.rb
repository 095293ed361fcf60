# frozen_string_literal: true

require "open3"
require_relative "../rakelib/platform_gem"

# The precompiled gem's specification (rakelib/platform_gem.rb). That it
# installs and runs with no compiler in reach is checked by
# bin/check-platform-gem, the `gems` step of bin/test.
RSpec.describe PlatformGem do
  let(:source) { Gem::Specification.load(File.expand_path("../discourse_ai_stream.gemspec", __dir__)) }

  # Every Ruby version a host may have: 3.0.0 to 3.6.30 (Ruby's patch
  # numbers have stayed below 10).
  def rubies
    (0..6).flat_map { |minor| (0..30).map { |patch| Gem::Version.new("3.#{minor}.#{patch}") } }
  end

  def accepted_minors(requirement)
    requirement = Gem::Requirement.new(requirement)
    rubies.select { |ruby| requirement.satisfied_by?(ruby) }.map { |ruby| ruby.segments.first(2).join(".") }.uniq
  end

  describe ".ruby_requirement" do
    it "is the range of the minors it has builds for" do
      expect(described_class.ruby_requirement(%w[3.3 3.4])).to eq([">= 3.3", "< 3.5.dev"])
      expect(accepted_minors(described_class.ruby_requirement(%w[3.3 3.4]))).to eq(%w[3.3 3.4])
      expect(accepted_minors(described_class.ruby_requirement(%w[3.1 3.2 3.3]))).to eq(%w[3.1 3.2 3.3])
    end

    it "refuses minors with one missing between them, which no range can leave out" do
      expect { described_class.ruby_requirement(%w[3.1 3.3 3.4]) }
        .to raise_error(ArgumentError, "Rubies 3.1, 3.3, 3.4 leave out 3.2")
    end

    it "accepts release candidates of the next minor not at all, and of the highest one" do
      requirement = Gem::Requirement.new(described_class.ruby_requirement(%w[3.3 3.4]))
      expect(requirement.satisfied_by?(Gem::Version.new("3.5.0.preview1"))).to be(false)
      expect(requirement.satisfied_by?(Gem::Version.new("3.4.0.rc1"))).to be(true)
    end
  end

  describe "RUBIES" do
    it "covers Ruby 3.3 and 3.4 on both platforms, and each gem accepts exactly the Rubies it has builds for" do
      described_class::RUBIES.each do |platform, minors|
        expect(minors).to include("3.3", "3.4"), platform
        requirement = described_class.spec(source, platform).required_ruby_version.as_list
        expect(accepted_minors(requirement)).to eq(minors), platform
      end
    end
  end

  describe ".spec" do
    subject(:spec) { described_class.spec(source, "x86_64-linux") }

    it "is for its platform and compiles nothing when installed" do
      expect(spec.platform.to_s).to eq("x86_64-linux")
      expect(spec.extensions).to be_empty
      expect(spec.description).to include("precompiled for x86_64-linux")
    end

    it "carries one build per Ruby of its platform and no Rust sources" do
      expect(spec.files).to include("lib/discourse_ai_stream/3.3/discourse_ai_stream.so",
                                    "lib/discourse_ai_stream/3.4/discourse_ai_stream.so",
                                    "lib/discourse_ai_stream.rb", "exe/discourse-ai-stream")
      expect(spec.files.grep(%r{\Aext/|\ACargo\.})).to be_empty
    end

    it "is the same gem for aarch64-linux, with that platform's builds" do
      arm = described_class.spec(source, "aarch64-linux")
      expect(arm.platform.to_s).to eq("aarch64-linux")
      expect(arm.files.grep(/\.so\z/)).to eq(%w[3.3 3.4].map { |minor| format(described_class::BUILD, minor) })
      expect(arm.files - arm.files.grep(/\.so\z/)).to eq(spec.files - spec.files.grep(/\.so\z/))
    end

    it "leaves the source gem's specification as it was" do
      spec
      expect(source.platform).to eq(Gem::Platform::RUBY)
      expect(source.extensions).to eq(["ext/discourse_ai_stream/extconf.rb"])
      expect(source.files).to include("Cargo.lock")
    end
  end

  describe ".check_library" do
    let(:build) { $LOADED_FEATURES.grep(%r{/discourse_ai_stream\.#{RbConfig::CONFIG["DLEXT"]}\z}).first }

    it "passes a build of this machine and says what it needs" do
      info = described_class.check_library(build, "x86_64-linux")
      expect(info[:needed]).to include("libc.so.6")
      expect(info[:needed].grep(/libruby/)).to be_empty
      expect(Gem::Version.new(info[:glibc])).to be <= described_class::MAX_GLIBC
    end

    it "refuses a library that links libruby" do
      # The ruby executable of a Ruby built with --enable-shared (all of the matrix) links it.
      ruby = File.realpath(RbConfig.ruby)
      expect(described_class.run("readelf", "-d", ruby)).to match(/NEEDED.*libruby/)
      expect { described_class.check_library(ruby, "x86_64-linux") }.to raise_error(/links libruby/)
    end

    it "refuses a library that needs a glibc newer than the limit" do
      stub_const("PlatformGem::MAX_GLIBC", Gem::Version.new("2.2.5"))
      expect { described_class.check_library(build, "x86_64-linux") }
        .to raise_error(/needs GLIBC_[\d.]+, newer than 2\.2\.5/)
    end

    it "refuses a library built for another platform's machine" do
      expect { described_class.check_library(build, "aarch64-linux") }
        .to raise_error(/is for .*X86-64, not aarch64-linux/)
    end
  end

  describe "bin/build-gems" do
    # As a user who is not root (a user namespace, where root is nobody): the
    # aarch64 gem's chroot build root cannot be made, and that is said
    # before the minutes the other builds take.
    it "stops before building anything when a platform needs root, and names the command that builds the others" do
      command = Process.uid.zero? ? %w[unshare --user bin/build-gems] : %w[bin/build-gems]
      output, status = Open3.capture2e({ "RUBYOPT" => nil }, *command, chdir: File.expand_path("..", __dir__))
      expect(status.exitstatus).to eq(2), output
      expect(output).to include("aarch64-linux gem needs root").and include("`bin/build-gems x86_64-linux`")
      expect(output).not_to include("==>")
    end
  end
end
