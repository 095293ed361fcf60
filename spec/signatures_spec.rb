# frozen_string_literal: true

require_relative "spec_helper"

# sig/ declares the public API in RBS; `rbs -I sig validate` (bin/test)
# checks that its types exist, this that it leaves no public method out.
RSpec.describe "sig/discourse_ai_stream.rbs" do
  sig = File.read(File.expand_path("../sig/discourse_ai_stream.rbs", __dir__))

  # The declarations of one class or module of the gem (nested two spaces).
  def section(sig, name)
    sig[/^  (?:class|module) #{name}\b.*?^  end$/m] or raise "sig/ has no #{name}"
  end

  # The names not declared in `text` by a def, or by an attr_ (a writer by
  # attr_accessor or attr_writer).
  def undeclared(text, names, prefix = "")
    names.map(&:to_s).reject do |name|
      attr = name.end_with?("=") ? "attr_(?:accessor|writer) #{Regexp.escape(name.chomp("="))}" : "attr_\\w+ #{name}"
      text.match?(/(?:def #{prefix}#{Regexp.escape(name)}|#{attr}):/)
    end.sort
  end

  {
    "OpenAiMessageProcessor" => DiscourseAiStream::OpenAiMessageProcessor,
    "OpenAiResponsesMessageProcessor" => DiscourseAiStream::OpenAiResponsesMessageProcessor,
    "ToolCall" => DiscourseAiStream::ToolCall,
    "Thinking" => DiscourseAiStream::Thinking,
    "ProcessorSupport" => DiscourseAiStream::ProcessorSupport
  }.each do |name, klass|
    it "declares every public method of #{name}" do
      expect(undeclared(section(sig, name), klass.public_instance_methods(false))).to eq([])
    end
  end

  { "Discourse" => DiscourseAiStream::Discourse, "Audit" => DiscourseAiStream::Audit,
    "CLI" => DiscourseAiStream::CLI, "Check" => DiscourseAiStream::Check,
    "BugReport" => DiscourseAiStream::BugReport }.each do |name, mod|
    it "declares every public module method of #{name}" do
      expect(undeclared(section(sig, name), mod.singleton_methods(false), "self\\.")).to eq([])
    end
  end

  it "declares every public module method of BugReport::Responses (within BugReport's section)" do
    methods = DiscourseAiStream::BugReport::Responses.singleton_methods(false)
    expect(undeclared(section(sig, "BugReport")[/^    module Responses$.*?^    end$/m], methods, "self\\.")).to eq([])
  end

  it "declares the settings of DiscourseAiStream" do
    expect(undeclared(sig, DiscourseAiStream.singleton_methods(false), "self\\.")).to eq([])
  end
end
