# frozen_string_literal: true

require "fileutils"
require "open3"
require "rbconfig"
require_relative "support/child_process"

# The Makefile extconf.rb writes: which cargo, which profile and which files
# `make` would use, read from `make -n` (nothing is built).
RSpec.describe "ext/discourse_ai_stream/extconf.rb" do
  let(:root) { File.expand_path("..", __dir__) }
  let(:extconf) { File.join(root, "ext/discourse_ai_stream/extconf.rb") }

  let(:dir) { Dir.mktmpdir("extconf-") }

  after { FileUtils.rm_rf(dir) }

  # The caller's CARGO_TARGET_DIR (bin/with-ruby sets one per Ruby) is not
  # what these examples are about: only those that pass one get one.
  def run!(env, *command)
    ChildProcess.run!({ "CARGO_TARGET_DIR" => nil }.merge(env), *command, chdir: dir)
  end

  # A stand-in cargo: extconf.rb only checks that it exists and is executable.
  def fake_cargo
    File.join(dir, "fake-cargo").tap do |path|
      File.write(path, "#!/bin/sh\nexit 0\n")
      File.chmod(0o755, path)
    end
  end

  def configure(env = {})
    run!(env, RbConfig.ruby, extconf)
  end

  def dry_run(env, target = "install")
    run!(env, "make", "-n", target, "sitearchdir=#{dir}/site")
  end

  it "writes its own Makefile that builds the release profile with cargo from PATH" do
    expect(configure).to include("creating Makefile (cargo build of discourse_ai_stream in #{root})")
    commands = dry_run({ "CARGO" => nil, "RB_SYS_CARGO_PROFILE" => nil })
    expect(commands).to match(%r{'cargo' build --manifest-path '#{Regexp.escape(root)}/Cargo.toml'})
    expect(commands).to include("--profile 'release'", "#{root}/target/release/libdiscourse_ai_stream.so")
    expect(commands).to include("#{dir}/site/discourse_ai_stream/discourse_ai_stream.#{RbConfig::CONFIG["DLEXT"]}")
  end

  it "writes the same Makefile where the rb_sys gem is installed" do
    rb_sys = File.join(dir, "rb_sys_gem")
    FileUtils.mkdir_p(File.join(rb_sys, "rb_sys"))
    File.write(File.join(rb_sys, "rb_sys/mkmf.rb"),
               "module RbSys; module Mkmf; end; end\ndef create_rust_makefile(*) = File.write('Makefile', 'rb_sys')\n")
    run!({}, RbConfig.ruby, "-I", rb_sys, extconf)
    expect(File.read(File.join(dir, "Makefile"))).to include("Written by #{root}/ext/discourse_ai_stream/extconf.rb")
  end

  it "honours CARGO and RB_SYS_CARGO_PROFILE=dev when make runs" do
    configure
    cargo = fake_cargo
    commands = dry_run({ "CARGO" => cargo, "RB_SYS_CARGO_PROFILE" => "dev" })
    expect(commands).to include("'#{cargo}' build", "--profile 'dev'", "#{root}/target/debug/libdiscourse_ai_stream.so")
    expect(commands).not_to include("--profile 'release'")
  end

  it "honours CARGO_TARGET_DIR" do
    configure
    commands = dry_run({ "CARGO_TARGET_DIR" => "#{dir}/cargo-target" })
    expect(commands).to include("--target-dir '#{dir}/cargo-target'",
                                "#{dir}/cargo-target/release/libdiscourse_ai_stream.so")
  end

  it "stops with a clear message when CARGO names no executable" do
    output, status = Open3.capture2e({ "CARGO" => "#{dir}/no-such-cargo" }, RbConfig.ruby, extconf, chdir: dir)
    expect(status).not_to be_success
    expect(output).to include("no-such-cargo` not found", "Rust toolchain")
  end
end
