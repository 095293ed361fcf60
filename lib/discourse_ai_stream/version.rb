# frozen_string_literal: true

module DiscourseAiStream
  # Kept equal to [workspace.package] version in Cargo.toml (spec/packaging_spec.rb checks).
  VERSION = "0.1.0"
end
