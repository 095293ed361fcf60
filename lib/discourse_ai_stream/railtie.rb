# frozen_string_literal: true

module DiscourseAiStream
  # Gives a Rails app with Discourse AI the gem's rake tasks
  # (`bin/rake discourse_ai_stream:audit[SINCE]`, `discourse_ai_stream:check`),
  # and any other Rails app none: they would fail there on a missing
  # AiApiAuditLog, or have no stock processor to check.
  class Railtie < ::Rails::Railtie
    rake_tasks do
      load File.expand_path("../tasks/discourse_ai_stream.rake", __dir__) if Railtie.discourse_ai?(::Rails.root)
    end

    # Tasks are defined before the app is initialized, when no model is
    # loaded yet: Discourse AI's audit log model is looked for as a file (in
    # the app, or in a plugin of Discourse).
    def self.discourse_ai?(root)
      defined?(::AiApiAuditLog) || Dir.glob("{,plugins/*/}app/models/ai_api_audit_log.rb", base: root.to_s).any?
    end
  end
end
