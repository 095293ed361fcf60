# frozen_string_literal: true

module DiscourseAiStream
  # Kept equal to [workspace.package] version in Cargo.toml (spec/packaging_spec.rb checks).
  VERSION = "0.1.0"
  HOMEPAGE = "https://github.com/discourse-ai-stream/discourse_ai_stream"
  # The pages of docs/, which the gems do not ship.
  DOCS = "#{HOMEPAGE}/blob/main/docs".freeze
end
