# frozen_string_literal: true

# name: discourse-ai-stream
# about: Discourse AI's OpenAI-compatible endpoints stream through discourse_ai_stream: no tool call dropped
# version: 0.1.0
# authors: discourse_ai_stream contributors
# url: https://github.com/discourse-ai-stream/discourse_ai_stream

# Precompiled for x86_64 and ARM64 Linux (Ruby 3.3, 3.4): nothing to compile on
# a Discourse container. Elsewhere the source gem needs cargo. No release is on
# rubygems.org yet: install the built gem first (README.md, "Install it today").
# Loaded through discourse_ai_stream/host: a native extension that does not
# load then leaves Discourse's own processors in place and says why on the
# admin dashboard, where a plain require would stop the site's boot.
gem "discourse_ai_stream", "0.1.0", require_name: "discourse_ai_stream/host"

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

  # The admin dashboard's problem checks: why the gem is not in use, and the
  # streams that lost or refused something (Discourse from spring 2024 on).
  DiscourseAiStream::Discourse::Health.register_problem_checks(self)
end
