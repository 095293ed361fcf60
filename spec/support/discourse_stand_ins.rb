# frozen_string_literal: true

# Stand-ins for the Discourse AI classes that drive the processor, written
# from docs/discourse-contract.md (not copied from Discourse). Each call of
# `load_discourse_stand_ins` stubs fresh `DiscourseAi` and `AiApiAuditLog`
# constants for the current example (rspec-mocks removes them afterwards,
# so specs that expect no Discourse never see them) and loads the class
# definitions into them with `load`: the classes are new objects every time,
# as after a code reload, and constants inside them resolve lexically from
# `DiscourseAi::Completions` as in Discourse.
#
# The groups that use them opt out of DISCOURSE_AI_STREAM_GC_STRESS
# (`gc_stress: false`): they test Ruby-level patching, and loading the
# stand-ins afresh under GC.stress takes minutes per example.
#
# Generations:
# - :legacy  - the processor reads only tool_calls[0] (the bug); the
#   endpoint methods live in Endpoints::OpenAi; final_log_update writes
#   cached_tokens.
# - :current - the processor keeps per-call state; the endpoint methods
#   live in the Endpoints::OpenAiShared module; final_log_update writes
#   cache_read_tokens / cache_write_tokens.
# - :newest  - the current one, plus stop_reason on both processors and the
#   output-limit rule; Groq on Endpoints::OpenAi; the Prompt, the request
#   over HTTP and the AI bot's tool loop (tool_loop.rb).
# Every generation has the chat dialects (dialects.rb).
module DiscourseStandIns
  DIR = File.expand_path("discourse_stand_ins", __dir__)
  GENERATIONS = %i[legacy current newest].freeze
  # The files of each generation, loaded in order.
  FILES = { legacy: %w[common legacy endpoints dialects], current: %w[common current endpoints dialects],
            newest: %w[common current endpoints newest dialects tool_loop] }.freeze

  # The raw chunk of the bug report: Mistral sends both parallel calls, the
  # finish_reason and the usage in one chunk, with an unknown top-level "p".
  MISTRAL_CHUNK = '{"id":"cmpl-e5cc70bb28c444948073e77776eb30ef","object":"chat.completion.chunk",' \
                  '"created":1702256327,"model":"mistral-large-latest","choices":[{"index":0,"delta":' \
                  '{"content":"","tool_calls":[{"id":"bM0Xl0KSh","function":{"name":"get_weather",' \
                  '"arguments":"{\\"city\\": \\"Paris\\"}"},"index":0},{"id":"kgOYVL46d","function":' \
                  '{"name":"get_local_time","arguments":"{\\"timezone\\": \\"Europe/Paris\\"}"},"index":1}]},' \
                  '"finish_reason":"tool_calls","logprobs":null}],"usage":{"prompt_tokens":172,' \
                  '"total_tokens":195,"completion_tokens":23},"p":"abcdefghijklmnopq"}'
  # As it arrives on the wire: one SSE data line, then the end marker.
  MISTRAL_SSE = "data: #{MISTRAL_CHUNK}\n\ndata: [DONE]\n\n".b.freeze
  MISTRAL_IDS = %w[bM0Xl0KSh kgOYVL46d].freeze

  # A row of ai_api_audit_logs, with the columns of both generations.
  AuditLogRow = Struct.new(:id, :provider_id, :raw_response_payload, :request_tokens, :response_tokens,
                           :cached_tokens, :cache_read_tokens, :cache_write_tokens, :created_at,
                           keyword_init: true)

  # LlmModel: the endpoint reads provider, name and custom params; the
  # request its url; the gem its id and name (whom the reasoning goes back
  # to).
  LlmModel = Struct.new(:id, :provider, :name, :url, :custom_params, keyword_init: true) do
    def lookup_custom_param(key)
      (custom_params || {})[key]
    end
  end

  # Discourse.redis stand-in: Hashes, with the three commands the gem
  # sends; `expiries` keeps the seconds each key was last given.
  class FakeRedis
    attr_reader :hashes, :expiries

    def initialize
      @hashes = Hash.new { |all, key| all[key] = Hash.new(0) }
      @expiries = {}
    end

    def hincrby(key, field, increment) = @hashes[key][field] += increment

    def expire(key, seconds) = @expiries[key] = seconds

    def hgetall(key) = @hashes.fetch(key, {}).transform_values(&:to_s)
  end

  # Rails.logger stand-in: keeps what was logged, by level.
  class FakeLogger
    attr_reader :lines

    def initialize
      @lines = []
    end

    %i[debug info warn error].each do |level|
      define_method(level) { |message = nil, &block| @lines << [level, message || block&.call] }
    end

    def warnings
      lines.select { |level, _| level == :warn }.map(&:last)
    end
  end

  # The contracts of ProblemCheck since plugins register checks
  # (problem_checks.rb): 2024's, whose call returns an Array, first without
  # a default translation_key, then with one, and the newest, whose call
  # returns one Problem or nil.
  CONTRACTS = %i[first listed single].freeze
  # The top-level constants problem_checks.rb defines.
  PROBLEM_CHECK_CONSTANTS = { "Discourse" => Module, "I18n" => Module, "DiscoursePluginRegistry" => Module,
                              "AdminNotice" => Class, "ProblemCheckTracker" => Class, "ProblemCheck" => Class }.freeze

  # The part of Plugin::Instance that a plugin.rb touches, evaluated the way
  # Discourse does it: instance_eval of the file (its gem lines required as
  # PluginGem.load requires them), after_initialize blocks
  # run at `boot`, reloadable_patch blocks again at every `reload` (a code
  # reload in development). Checks count while the site setting named by
  # enabled_site_setting is on (SiteSetting, the example's to stub).
  class PluginInstance
    attr_reader :gems, :initializers, :patches, :enabled_setting

    def initialize(path)
      @gems = []
      @initializers = []
      @patches = []
      instance_eval(File.read(path), path)
    end

    # PluginGem.load, the gem installed: requires it by its require_name,
    # else its name, unless require: false.
    def gem(name, version, **options)
      @gems << [name, version, options]
      require(options[:require_name] || name) unless options[:require] == false
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

    def register_problem_check(klass)
      DiscoursePluginRegistry.register_problem_check(klass, self)
    end

    def enabled? = SiteSetting.public_send(enabled_setting) ? true : false

    def boot
      initializers.each { |block| block.call(self) }
    end

    def reload
      patches.each { |block| block.call(self) }
    end
  end

  # A Discourse from before plugins could register problem checks.
  class OlderPluginInstance < PluginInstance
    undef_method :register_problem_check
  end

  # The class files return at once unless loaded from here, so a spec
  # helper that requires everything under spec/support cannot define
  # DiscourseAi for the whole run.
  def self.loading?
    @loading ? true : false
  end

  def self.load_files(generation)
    @loading = true
    FILES.fetch(generation).each { |file| load File.join(DIR, "#{file}.rb") }
  ensure
    @loading = false
  end

  # Defines the constants of problem_checks.rb, ProblemCheck in `contract`
  # (in a child process; an example stubs them: load_problem_check_stand_ins).
  def self.load_problem_checks(contract)
    raise ArgumentError, "contract: #{contract.inspect}" unless CONTRACTS.include?(contract)

    @loading = true
    load File.join(DIR, "problem_checks.rb")
    ProblemCheck.contract = contract
  ensure
    @loading = false
  end

  # What the admin dashboard shows: the notice of a check no longer
  # registered goes, every realtime check runs, then every notice is listed.
  def self.admin_dashboard
    checks = ProblemCheck.checks
    AdminNotice.store.select! { |identifier, _| checks.any? { |check| check.identifier == identifier } }
    checks.select(&:realtime?).each { |check| check.new.run }
    AdminNotice.all
  end

  # Stubs fresh constants for problem_checks.rb and loads it, the plugin's
  # locale file among its translations.
  def load_problem_check_stand_ins(contract: :single, locale: nil)
    PROBLEM_CHECK_CONSTANTS.each { |name, kind| stub_const(name, kind.new) }
    DiscourseStandIns.load_problem_checks(contract)
    I18n.load(locale) if locale
  end

  def load_discourse_stand_ins(generation: :legacy)
    raise ArgumentError, "generation: #{generation.inspect}" unless GENERATIONS.include?(generation)

    stub_const("DiscourseAi", Module.new)
    stub_const("AiApiAuditLog", Class.new(AuditLogRow))
    DiscourseStandIns.load_files(generation)
    DiscourseAi::Completions
  end

  # [id, name, parameters] of the final (non-partial) tool calls among items.
  def final_calls(items)
    items.reject { |item| item.is_a?(String) || item.partial? }.uniq(&:id).map { |c| [c.id, c.name, c.parameters] }
  end

  def stub_rails_logger
    logger = FakeLogger.new
    rails = Module.new
    rails.define_singleton_method(:logger) { logger }
    stub_const("Rails", rails)
    logger
  end

  # Loads the stand-ins of `generation` and installs the gem into them.
  def install_into(generation, **options)
    load_discourse_stand_ins(generation: generation)
    DiscourseAiStream::Discourse.install!(**options)
  end

  def llm_model(provider, **custom_params)
    LlmModel.new(provider: provider, name: "#{provider}-model", custom_params: custom_params.transform_keys(&:to_s))
  end
end

# A child Ruby that boots on the stand-ins (check_spec.rb) has no RSpec.
return unless defined?(RSpec)

# The setting of the specs of the gem installed into the stand-ins: their
# helpers, Rails.logger stubbed (as `logger`) before each example, a count
# of lost or refused streams of the example's own (as `tally`, in a Redis
# of its own), and the gem uninstalled after it.
RSpec.shared_context "with the Discourse stand-ins" do
  include DiscourseStandIns

  let(:logger) { stub_rails_logger }
  let(:integration) { DiscourseAiStream::Discourse }
  let(:tally) { DiscourseAiStream::Discourse::Tally.new(redis: DiscourseStandIns::FakeRedis.new) }

  before do
    logger
    allow(integration).to receive(:tally).and_return(tally)
  end

  after { integration.uninstall! }
end
