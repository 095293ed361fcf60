# frozen_string_literal: true

require "json"
require "yaml"
require_relative "../support/broken_build"
require_relative "../support/child_process"
require_relative "../support/discourse_stand_ins"

# examples/discourse-plugin/plugin.rb evaluated the way Discourse does it
# (instance_eval in a plugin instance; after_initialize blocks run later,
# reloadable_patch blocks again after every code reload), against the
# stand-ins.
RSpec.describe "examples/discourse-plugin", gc_stress: false do
  include_context "with the Discourse stand-ins"

  dir = File.expand_path("../../examples/discourse-plugin", __dir__)

  let(:plugin) { DiscourseStandIns::PluginInstance.new(File.join(dir, "plugin.rb")) }
  # Counted in the site's Redis, Discourse.redis of the stand-ins.
  let(:tally) { DiscourseAiStream::Discourse::Tally.new }

  # SiteSetting, with the plugin's settings at their defaults.
  let(:site_setting) do
    settings = YAML.safe_load(File.read(File.join(dir, "config/settings.yml"))).fetch("plugins")
    Struct.new(*settings.keys.map(&:to_sym)).new(*settings.values.map { |setting| setting["default"] })
  end

  before do
    stub_const("SiteSetting", site_setting)
    load_problem_check_stand_ins(locale: File.join(dir, "config/locales/server.en.yml"))
  end

  def mistral_calls
    endpoint = DiscourseAi::Completions::Endpoints::Mistral.new(llm_model("mistral"))
    final_calls(endpoint.perform_stream([DiscourseStandIns::MISTRAL_SSE])).map(&:first)
  end

  it "asks for this version of the gem, loaded through discourse_ai_stream/host" do
    expect(plugin.gems).to eq([["discourse_ai_stream", DiscourseAiStream::VERSION,
                                { require_name: "discourse_ai_stream/host" }]])
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

  describe "its problem checks on the admin dashboard" do
    let(:health) { DiscourseAiStream::Discourse::Health }
    let(:checks) { %i[discourse_ai_stream_not_in_use discourse_ai_stream_lost_or_refused] }
    # A chat response cut by the output limit, with a call in it.
    let(:length_sse) do
      chunks = [{ choices: [{ delta: { content: "Partial", tool_calls: [
        { index: 0, id: "call_a", function: { name: "search", arguments: '{"q":"a' } }
      ] } }] }, { choices: [{ delta: {}, finish_reason: "length" }] }]
      ["#{chunks.map { |chunk| "data: #{JSON.generate(chunk)}\n\n" }.join}data: [DONE]\n\n"]
    end

    # A site booted in a Ruby of its own: legacy Discourse, the newest
    # problem-check contract, the plugin as it is. It prints what its
    # Mistral endpoint returns, status, the check task and the dashboard.
    let(:site) do
      <<~RUBY
        require "json"
        require "stringio"
        require #{File.expand_path("../support/discourse_stand_ins", __dir__).dump}
        AiApiAuditLog = Class.new(DiscourseStandIns::AuditLogRow)
        DiscourseStandIns.load_files(:legacy)
        DiscourseStandIns.load_problem_checks(:single)
        I18n.load(#{File.join(dir, "config/locales/server.en.yml").dump})
        SiteSetting = Struct.new(:discourse_ai_stream_enabled, :discourse_ai_stream_reasoning_replay).new(true, true)
        DiscourseStandIns::PluginInstance.new(#{File.join(dir, "plugin.rb").dump}).boot
        mistral = DiscourseAi::Completions::Endpoints::Mistral.new(DiscourseStandIns::LlmModel.new(provider: "mistral"))
        items = mistral.perform_stream([DiscourseStandIns::MISTRAL_SSE])
        check = StringIO.new
        puts JSON.generate(calls: items.grep(DiscourseAi::Completions::ToolCall).map(&:id),
                           status: DiscourseAiStream::Discourse.status.transform_values { _1[:reason] },
                           check: [DiscourseAiStream::Check.run(check), check.string],
                           dashboard: DiscourseStandIns.admin_dashboard.map { [_1.identifier, _1.priority, _1.message] })
      RUBY
    end

    # [identifier, priority, message] of each notice the dashboard shows.
    def dashboard
      DiscourseStandIns.admin_dashboard.map { |notice| [notice.identifier, notice.priority, notice.message] }
    end

    def endpoint(name, provider) = DiscourseAi::Completions::Endpoints.const_get(name).new(llm_model(provider))

    DiscourseStandIns::CONTRACTS.each do |contract|
      context "with ProblemCheck's #{contract} contract" do
        before { ProblemCheck.contract = contract }

        it "registers two checks run at every load of the dashboard, which find nothing while the gem is in use" do
          load_discourse_stand_ins(generation: :legacy)
          plugin.boot
          expect(ProblemCheck.checks.map(&:identifier)).to eq(checks)
          expect(ProblemCheck.checks).to all(be_realtime)
          expect(dashboard).to eq([])
        end

        it "says, high, that the gem is not in use for a stock class that grew, until install! replaces it again" do
          load_discourse_stand_ins(generation: :newest)
          DiscourseAi::Completions::OpenAiResponsesMessageProcessor.class_eval { def cited_sources = [] }
          plugin.boot
          expect(dashboard).to eq([[checks.first, "high", health.not_in_use.html]])
          expect(dashboard.first.last).to start_with(
            "discourse_ai_stream #{DiscourseAiStream::VERSION} is installed but not in use for " \
            "DiscourseAi::Completions::OpenAiResponsesMessageProcessor (the gem&#39;s " \
            "DiscourseAiStream::OpenAiResponsesMessageProcessor lacks #cited_sources): Discourse&#39;s own class " \
            "stays in place there. <a href=\"#{DiscourseAiStream::DOCS}/troubleshooting.md" \
            "#not-in-use-for-a-stock-class\""
          )

          load_discourse_stand_ins(generation: :newest)
          plugin.reload
          expect(dashboard).to eq([])
        end

        it "counts the streams that lost or refused something in the site's Redis, and says so, low" do
          load_discourse_stand_ins(generation: :newest)
          plugin.boot
          endpoint("Mistral", "mistral").perform_stream(length_sse)
          vllm = endpoint("Vllm", "vllm")
          expect { vllm.perform_stream(["data: #{JSON.generate(error: { message: "overloaded" })}\n\n"]) }
            .to raise_error(DiscourseAiStream::ProviderError)

          expect(dashboard).to eq([[checks.last, "low", health.lost_or_refused.html]])
          words = health::KINDS.values_at(:dropped_call, :provider_error)
          mistral, vllm = %w[Mistral Vllm].map { |name| "(DiscourseAi::Completions::Endpoints::#{name})" }
          expect(dashboard.first.last).to start_with("In the last 24 hours, 2 streams decoded by discourse_ai_stream")
            .and include("dropped_call, #{words[0]}: 1 on mistral #{mistral}; provider_error, #{words[1]}: " \
                         "1 on vllm #{vllm}. The Rails log")
          expect(Discourse.redis.hashes.keys).to eq(["discourse_ai_stream:lost_or_refused:#{Time.now.to_i / 3600}"])
        end

        # Discourse's tracker keeps a notice with the words it was made with.
        it "words its notice anew when what it found changed since the notice was made" do
          load_discourse_stand_ins(generation: :newest)
          plugin.boot
          endpoint("Mistral", "mistral").perform_stream(length_sse)
          expect(dashboard.first.last).to start_with("In the last 24 hours, 1 stream decoded")
          first = AdminNotice.all.first
          expect(dashboard.first.last).to eq(health.lost_or_refused.html)
          expect(AdminNotice.all.first).to be(first), "the same words: the notice stays"

          vllm = endpoint("Vllm", "vllm")
          expect { vllm.perform_stream(["data: #{JSON.generate(error: { message: "overloaded" })}\n\n"]) }
            .to raise_error(DiscourseAiStream::ProviderError)
          expect(dashboard).to eq([[checks.last, "low", health.lost_or_refused.html]])
          expect(dashboard.first.last).to start_with("In the last 24 hours, 2 streams decoded").and include("1 on vllm")
        end

        it "still shows what it found when the notice cannot be looked up, with a warn line saying why" do
          load_discourse_stand_ins(generation: :newest)
          plugin.boot
          endpoint("Mistral", "mistral").perform_stream(length_sse)
          allow(AdminNotice).to receive(:where).and_raise(ArgumentError, "unknown column")
          expect(dashboard).to eq([[checks.last, "low", health.lost_or_refused.html]])
          expect(logger.warnings).to include("discourse_ai_stream: the dashboard notice #{checks.last} was not " \
                                             "renewed: ArgumentError: unknown column")
        end

        it "shows nothing while its site setting is off: Discourse runs the checks of enabled plugins only" do
          load_discourse_stand_ins(generation: :newest)
          DiscourseAi::Completions::OpenAiResponsesMessageProcessor.class_eval { def cited_sources = [] }
          plugin.boot
          expect(dashboard.size).to eq(1)
          SiteSetting.discourse_ai_stream_enabled = false
          expect(dashboard).to eq([])
        end
      end
    end

    # The gem's native build cannot load, as where glibc is too old for the
    # precompiled build (spec/support/broken_build.rb).
    it "boots with a native build that does not load: stock stays, the dashboard and the check task say why" do
      native = $LOADED_FEATURES.grep(%r{/discourse_ai_stream\.#{RbConfig::CONFIG["DLEXT"]}\z}).first
      Dir.mktmpdir("broken-") do |lib|
        BrokenBuild.lib_with_broken_build(lib, native)
        booted = JSON.parse(ChildProcess.run!({}, RbConfig.ruby, "-I", lib, "-e", site).lines.last)
        reason = "the gem's native extension did not load (DiscourseAiStream.load_error says why)"
        expect(booted["calls"]).to eq(%w[bM0Xl0KSh]), "the stock legacy processor, still in place"
        expect(booted["status"].values).to eq([reason, reason])

        status, out = booted["check"]
        expect(status).to eq(DiscourseAiStream::Check::NOT_IN_USE)
        expect(out).to include("Tool calls streamed in one chunk: not run, the gem's native extension did not load",
                               "  DiscourseAi::Completions::OpenAiMessageProcessor: left stock: #{reason}",
                               "  discourse_ai_stream #{DiscourseAiStream::VERSION} is installed but not in use: its " \
                               "native extension did not load, so Discourse's own processors decode every stream. " \
                               "The cause:\n    discourse_ai_stream #{DiscourseAiStream::VERSION} has no native " \
                               "extension that loads on Ruby", "version `GLIBC_9.9.9' not found")

        expect(booted["dashboard"].map(&:first)).to eq(%w[discourse_ai_stream_not_in_use])
        identifier, priority, message = booted["dashboard"].first
        expect(priority).to eq("high")
        expect(message).to start_with("discourse_ai_stream #{DiscourseAiStream::VERSION} is installed but not in " \
                                      "use: its native extension did not load, so Discourse&#39;s own processors " \
                                      "decode every stream. The cause:<pre>discourse_ai_stream")
        expect(message).to include("GLIBC_9.9.9", "</pre> <a href=\"#{DiscourseAiStream::DOCS}/troubleshooting.md" \
                                                  "#its-native-extension-did-not-load\"")
        expect(identifier).to eq(checks.first.to_s)
      end
    end

    it "registers nothing on a Discourse from before problem checks, where it boots and installs as before" do
      load_discourse_stand_ins(generation: :legacy)
      older = DiscourseStandIns::OlderPluginInstance.new(File.join(dir, "plugin.rb"))
      older.boot
      expect(DiscourseAiStream::Discourse).to be_installed
      expect(DiscoursePluginRegistry.registered).to eq([])
    end

    it "shows the gem's words whole: a locale entry per check that is nothing but the message" do
      locale = YAML.safe_load(File.read(File.join(dir, "config/locales/server.en.yml")))
      whole = "%{message}" # rubocop:disable Style/FormatStringToken -- I18n's interpolation
      expect(locale.dig("en", "dashboard", "problem")).to eq(checks.to_h { |check| [check.to_s, whole] })
    end
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
