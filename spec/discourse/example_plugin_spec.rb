# frozen_string_literal: true

require "yaml"
require_relative "../support/discourse_stand_ins"

# examples/discourse-plugin/plugin.rb evaluated the way Discourse does it
# (instance_eval in a plugin instance; after_initialize blocks run later,
# reloadable_patch blocks again after every code reload), against the
# stand-ins.
RSpec.describe "examples/discourse-plugin", gc_stress: false do
  include_context "with the Discourse stand-ins"

  dir = File.expand_path("../../examples/discourse-plugin", __dir__)

  # The part of Plugin::Instance that plugin.rb touches.
  let(:plugin_class) do
    Class.new do
      attr_reader :gems, :initializers, :patches, :enabled_setting

      def initialize
        @gems = []
        @initializers = []
        @patches = []
      end

      def gem(name, version, **options)
        @gems << [name, version, options]
      end

      def enabled_site_setting(name)
        @enabled_setting = name
      end

      def after_initialize(&block)
        @initializers << block
      end

      def reloadable_patch(&block)
        @patches << block
        yield(self)
      end

      def boot
        initializers.each { |block| block.call(self) }
      end

      def reload
        patches.each { |block| block.call(self) }
      end
    end
  end

  let(:plugin) do
    path = File.join(dir, "plugin.rb")
    plugin_class.new.tap { |instance| instance.instance_eval(File.read(path), path) }
  end

  # SiteSetting, with the plugin's settings at their defaults.
  let(:site_setting) do
    settings = YAML.safe_load(File.read(File.join(dir, "config/settings.yml"))).fetch("plugins")
    Struct.new(*settings.keys.map(&:to_sym)).new(*settings.values.map { |setting| setting["default"] })
  end

  before { stub_const("SiteSetting", site_setting) }

  def mistral_calls
    endpoint = DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral"))
    final_calls(endpoint.perform_stream([DiscourseStandIns::MISTRAL_SSE])).map(&:first)
  end

  it "asks for this version of the gem" do
    expect(plugin.gems).to eq([["discourse_ai_stream", DiscourseAiStream::VERSION, {}]])
    expect(File.read(File.join(dir, "plugin.rb"))).to match(/^# version: #{Regexp.escape(DiscourseAiStream::VERSION)}$/)
  end

  it "installs the gem in after_initialize, and again on the new classes after a reload" do
    load_discourse_stand_ins(generation: :legacy)
    expect(mistral_calls).to eq(%w[bM0Xl0KSh])

    plugin.boot
    expect(DiscourseAiStream::Discourse).to be_installed
    expect(mistral_calls).to eq(DiscourseStandIns::MISTRAL_IDS)

    load_discourse_stand_ins(generation: :legacy)
    expect(mistral_calls).to eq(%w[bM0Xl0KSh])
    plugin.reload
    expect(mistral_calls).to eq(DiscourseStandIns::MISTRAL_IDS)
  end

  it "puts Discourse back on its stock processors at once when its site setting is off, and back on the gem's" do
    load_discourse_stand_ins(generation: :legacy)
    plugin.boot
    expect(plugin.enabled_setting).to eq(:discourse_ai_stream_enabled)
    expect(mistral_calls).to eq(DiscourseStandIns::MISTRAL_IDS)

    SiteSetting.discourse_ai_stream_enabled = false
    expect(mistral_calls).to eq(%w[bM0Xl0KSh]), "the stock processor, with no reload and no new install"
    expect(DiscourseAiStream::Discourse).not_to be_installed

    SiteSetting.discourse_ai_stream_enabled = true
    expect(mistral_calls).to eq(DiscourseStandIns::MISTRAL_IDS)
  end

  it "describes its settings for the admin, with the names plugin.rb reads" do
    locale = YAML.safe_load(File.read(File.join(dir, "config/locales/server.en.yml")))
    expect(locale.dig("en", "site_settings", "discourse_ai_stream_enabled")).to include("without a rebuild")
    expect(locale.dig("en", "site_settings", "discourse_ai_stream_reasoning_replay")).to include("tool calls")
    expect(File.read(File.join(dir, "plugin.rb")))
      .to include("SiteSetting.discourse_ai_stream_enabled", "SiteSetting.discourse_ai_stream_reasoning_replay")
  end

  it "sends reasoning back while its replay setting is on, asked on every use" do
    load_discourse_stand_ins(generation: :newest)
    plugin.boot
    expect(DiscourseAiStream::Discourse.replay?).to be(true)
    SiteSetting.discourse_ai_stream_reasoning_replay = false
    expect(DiscourseAiStream::Discourse.replay?).to be(false)
    expect(DiscourseAiStream::Discourse).to be_installed
    SiteSetting.discourse_ai_stream_reasoning_replay = true
    expect(DiscourseAiStream::Discourse.replay?).to be(true)
  end

  it "has a spec for bin/rspec inside Discourse, and CI that needs no Rust (the precompiled gem)" do
    spec = File.read(File.join(dir, "spec/discourse_ai_stream_spec.rb"))
    expect(spec).to include("bM0Xl0KSh", "kgOYVL46d", "DiscourseAi::Completions::ToolCall")

    workflow = YAML.safe_load(File.read(File.join(dir, ".github/workflows/discourse-plugin.yml")))
    steps = workflow.dig("jobs", "backend", "steps").map { |step| step["run"].to_s }
    expect(steps.grep(/rustup|cargo|libclang/)).to be_empty
    expect(steps.grep(/db:migrate/)).not_to be_empty
    expect(steps.last).to include("bin/rspec plugins/${{ env.PLUGIN_NAME }}/spec")
  end

  it "says there is no release before any install step, and leads with the route that works: built gems" do
    readme = File.read(File.join(dir, "README.md"))
    headings = readme.scan(/^## (.+)$/).flatten
    expect(headings.index("Install it today, from built gems")).to be < headings.index("Once a release is published")
    expect(readme.index("No release of `discourse_ai_stream` is on rubygems.org yet")).to be < readme.index("hooks:")
    install_step = "gem install --local /shared/discourse_ai_stream-#{DiscourseAiStream::VERSION}-x86_64-linux.gem " \
                   "--install-dir gems/$(ruby -e \"print RUBY_VERSION\")"
    expect(readme.index(install_step)).to be < readme.index("rustup")
    expect(readme).to include("PR #21643", "libclang-dev", "./launcher rebuild app", "discourse_ai_stream:audit",
                              "git init")
    expect(readme).not_to include("YOUR-ORG")
  end

  it "says how to switch it off and how to remove it, and what stays behind" do
    readme = File.read(File.join(dir, "README.md"))
    expect(readme.scan(/^## (.+)$/).flatten).to include("Switch it off", "Remove it")
    remove = readme[/^## Remove it\n(.*?)^## /m, 1]
    expect(remove).to include("./launcher rebuild app", "What stays behind", "discourse_ai_stream_enabled")
  end
end
