# frozen_string_literal: true

# Discourse's admin-dashboard problem checks, as docs/discourse-contract.md
# describes them: the ProblemCheck base class in the contracts a plugin
# meets since register_problem_check exists (DiscourseStandIns::CONTRACTS),
# the registry of plugins' checks (filtered by the plugin's enabled site
# setting), the tracker that keeps an admin notice per failing check, the
# notice, whose message is translated again from what the tracker stored,
# a translation table read from locale files, and Discourse.base_path and
# Discourse.redis. Loaded by DiscourseStandIns.load_problem_checks into
# fresh (or stubbed) top-level constants; not required anywhere else.

return unless defined?(DiscourseStandIns) && DiscourseStandIns.loading?

require "json"
require "yaml"

# Discourse's module: the site's path prefix, and its Redis.
module Discourse
  class << self
    attr_accessor :base_path

    def redis = @redis ||= DiscourseStandIns::FakeRedis.new
  end
  self.base_path = ""
end

# Lookups in the translations of the locale files loaded, with %{name}
# interpolated; a name the data lacks raises, a key that is missing gives
# I18n's "Translation missing" text.
module I18n
  class << self
    def load(path) = translations.merge!(YAML.safe_load_file(path).fetch("en")) { |_, a, b| deep_merge(a, b) }

    def t(key, **data)
      text = key.to_s.split(".").reduce(translations) { |scope, part| scope.is_a?(Hash) ? scope[part] : nil }
      return "Translation missing: en.#{key}" unless text.is_a?(String)

      text.gsub(/%\{(\w+)\}/) { data.fetch(Regexp.last_match(1).to_sym) { raise ArgumentError, "missing %{#{_1}}" } }
    end

    private

    def translations = @translations ||= {}

    def deep_merge(one, other) = one.merge(other) { |_, a, b| a.is_a?(Hash) ? deep_merge(a, b) : b }
  end
end

# The checks plugins registered, each with its plugin; a plugin's checks
# count only while the plugin is enabled.
module DiscoursePluginRegistry
  class << self
    def register_problem_check(klass, plugin) = registered << [klass, plugin]

    def problem_checks = registered.select { |_, plugin| plugin.enabled? }.map(&:first)

    def registered = @registered ||= []
  end
end

# One notice on the dashboard per failing check. Its message is not the
# Problem's: it is translated again, from `dashboard.problem.<identifier>`
# and the details the tracker stored (as JSON: String keys and values).
class AdminNotice
  attr_reader :identifier, :priority, :details

  def initialize(identifier, priority, details)
    @identifier = identifier
    @priority = priority
    @details = JSON.parse(JSON.generate(details))
  end

  def message = I18n.t("dashboard.problem.#{identifier}", **details.transform_keys(&:to_sym))

  def destroy = self.class.store.delete(identifier)

  class << self
    def all = store.values

    def store = @store ||= {}

    # The `problem` scope, and `where(identifier:)` in it (identifiers are
    # Strings in Discourse's table).
    def problem = self

    def where(identifier:) = all.select { |notice| notice.identifier.to_s == identifier }
  end
end

# Per check: problem! makes its notice when there is none (no blips
# tolerated) and leaves one that is there as it was made, details and all;
# no_problem! removes it.
class ProblemCheckTracker
  def self.[](identifier) = new(identifier)

  def initialize(identifier)
    @identifier = identifier
  end

  def problem!(priority:, details: {})
    AdminNotice.store[@identifier] ||= AdminNotice.new(@identifier, priority, details)
  end

  def no_problem! = AdminNotice.store.delete(@identifier)
end

# The base class of checks, in the contract `ProblemCheck.contract` names:
# :listed, 2024's (call returns an Array of problems: `problem` gives one in
# an Array, `no_problem` an empty one), :first, the same in its first form
# (no default translation_key: it raises NotImplementedError), or :single,
# the newest (call returns one Problem or nil).
class ProblemCheck
  # What a check found: its message, translated when it was made.
  class Problem
    attr_reader :message, :priority, :identifier, :target, :details

    def initialize(message, priority: "low", identifier: nil, target: nil, details: {})
      @message = message
      @priority = priority
      @identifier = identifier
      @target = target
      @details = details
    end
  end

  class << self
    attr_accessor :contract
    attr_writer :priority, :perform_every

    def priority = @priority || (superclass.respond_to?(:priority) ? superclass.priority : "low")

    def perform_every = @perform_every || (superclass.respond_to?(:perform_every) ? superclass.perform_every : nil)

    # ProblemCheck::DiscourseAiStreamNotInUse -> :discourse_ai_stream_not_in_use
    def identifier = name.split("::").last.gsub(/([a-z\d])([A-Z])/, '\1_\2').downcase.to_sym

    # Run on every load of the dashboard: no perform_every.
    def realtime? = perform_every.nil?

    def checks = DiscoursePluginRegistry.problem_checks
  end

  def call = raise NotImplementedError

  def identifier = self.class.identifier

  # The problems found, kept as notices through the tracker with the check's
  # translation data, the problem's details and base_path.
  def run
    found = call
    problems = listed? ? found : [found].compact
    tracker = ProblemCheckTracker[identifier]
    return tracker.no_problem! if problems.empty?

    problems.each do |problem|
      details = translation_data.merge(problem.details).merge(base_path: Discourse.base_path)
      tracker.problem!(priority: problem.priority, details: details)
    end
  end

  private

  def problem(*_target, override_key: nil, override_data: {}, details: {})
    message = I18n.t(override_key || translation_key, base_path: Discourse.base_path,
                                                      **override_data.merge(translation_data))
    found = Problem.new(message, priority: self.class.priority, identifier: identifier, details: details)
    listed? ? [found] : found
  end

  def no_problem = listed? ? [] : nil

  def listed? = ProblemCheck.contract != :single

  def translation_key
    raise NotImplementedError if ProblemCheck.contract == :first

    "dashboard.problem.#{identifier}"
  end

  def translation_data(_target = nil) = {}
end
