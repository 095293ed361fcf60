# frozen_string_literal: true

# name: discourse-ai-stream
# about: Discourse AI's OpenAI-compatible endpoints stream through discourse_ai_stream: no tool call dropped
# version: 0.1.0
# authors: discourse_ai_stream contributors
# url: https://github.com/discourse-ai-stream/discourse_ai_stream

# Precompiled for x86_64 and ARM64 Linux (Ruby 3.3, 3.4): nothing to compile on
# a Discourse container. Elsewhere the source gem needs cargo. No release is on
# rubygems.org yet: install the built gem first (README.md, "Install it today").
gem "discourse_ai_stream", "0.1.0"

# Admin > Settings: off puts every endpoint back on Discourse's own
# processors at once, without a rebuild (config/settings.yml).
enabled_site_setting :discourse_ai_stream_enabled

after_initialize do
  # Runs again after every code reload in development, on the new classes.
  reloadable_patch do
    # replay: reasoning models' reasoning goes back with their tool calls
    # (DeepSeek, Kimi, Gemini's OpenAI-compatible URL, OpenRouter).
    DiscourseAiStream::Discourse.install!(enabled: -> { SiteSetting.discourse_ai_stream_enabled },
                                          replay: -> { SiteSetting.discourse_ai_stream_reasoning_replay })
  end
end
