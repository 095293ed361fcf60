# frozen_string_literal: true

# Specs run against the working copy: lib/ plus the extension that
# `bundle exec rake compile` put into lib/discourse_ai_stream/.
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
# The standard library most specs use.
require "json"
require "stringio"
require "tmpdir"
begin
  require "discourse_ai_stream"
rescue LoadError => e
  abort "discourse_ai_stream could not be loaded (#{e.message}).\n" \
        "Build the extension first: bundle exec rake compile (or bin/setup)."
end

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.expect_with(:rspec) { |c| c.syntax = :expect }
  config.mock_with(:rspec) { |c| c.verify_partial_doubles = true }
  config.order = :random
  Kernel.srand config.seed
  config.example_status_persistence_file_path = ".rspec_status"
  config.filter_run_when_matching :focus
  config.warnings = true

  # ---- GC.stress switch ----
  # DISCOURSE_AI_STREAM_GC_STRESS=1 runs every example with GC.stress on, so a
  # Ruby object the native code holds without marking it is collected at the
  # first allocation that follows, and the example crashes or fails. Slow: run
  # a subset, e.g. `DISCOURSE_AI_STREAM_GC_STRESS=1 bundle exec rspec --tag ~packaging`.
  # An example or group tagged `gc_stress: false` opts out.
  gc_stress = ENV.fetch("DISCOURSE_AI_STREAM_GC_STRESS", "")
  if !gc_stress.empty? && gc_stress != "0"
    config.around do |example|
      next example.run if example.metadata[:gc_stress] == false

      begin
        GC.stress = true
        example.run
      ensure
        GC.stress = false
      end
    end
  end
end
