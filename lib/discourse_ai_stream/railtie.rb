# frozen_string_literal: true

module DiscourseAiStream
  # Gives a Rails app (Discourse) the gem's rake tasks:
  # `bin/rake discourse_ai_stream:audit[SINCE]`.
  class Railtie < ::Rails::Railtie
    rake_tasks do
      load File.expand_path("../tasks/discourse_ai_stream.rake", __dir__)
    end
  end
end
