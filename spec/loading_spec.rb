# frozen_string_literal: true

require "fileutils"
require "open3"
require "rbconfig"
require "tmpdir"

# lib/discourse_ai_stream.rb loads the build for this Ruby's minor version
# (lib/discourse_ai_stream/<major.minor>/, what a precompiled gem ships) before
# the single build of a source install. Checked in fresh ruby processes.
RSpec.describe "loading the native extension" do
  let(:lib) { File.expand_path("../lib", __dir__) }
  let(:minor) { RUBY_VERSION[/\A\d+\.\d+/] }
  let(:probe) do
    'require "discourse_ai_stream"; ' \
      'puts [$versioned_build_loaded.inspect, defined?(DiscourseAiStream::Native).inspect].join(" ")'
  end

  def run_ruby(*load_dirs, code)
    args = load_dirs.flat_map { |dir| ["-I", dir] }
    output, status = Open3.capture2e({ "RUBYOPT" => nil }, RbConfig.ruby, *args, "-e", code)
    raise "ruby failed (#{status}):\n#{output}" unless status.success?

    output.lines.last.strip
  end

  it "prefers lib/discourse_ai_stream/<major.minor>/ when it is there" do
    Dir.mktmpdir("versioned-") do |dir|
      # A stand-in for the versioned build: marks that it was loaded, then
      # loads the real extension so the rest of the gem works.
      FileUtils.mkdir_p(File.join(dir, "discourse_ai_stream", minor))
      File.write(File.join(dir, "discourse_ai_stream", minor, "discourse_ai_stream.rb"), <<~RUBY)
        $versioned_build_loaded = true
        require "discourse_ai_stream/discourse_ai_stream"
      RUBY
      expect(run_ruby(dir, lib, probe)).to eq('true "constant"')
    end
  end

  it "falls back to lib/discourse_ai_stream/discourse_ai_stream when there is no versioned build" do
    expect(run_ruby(lib, probe)).to eq('nil "constant"')
  end
end
