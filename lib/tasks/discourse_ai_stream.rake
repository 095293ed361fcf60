# frozen_string_literal: true

namespace :discourse_ai_stream do
  desc "Count the streamed tool calls the legacy OpenAiMessageProcessor would have dropped, per provider " \
       "(SINCE: a date, 30d or all, default 30 days; PROVIDER: one of them, like Mistral, default all)"
  task :audit, %i[since provider] => :environment do |_task, args|
    require "discourse_ai_stream"
    DiscourseAiStream::Audit.run_task(model: AiApiAuditLog, since: args[:since], provider: args[:provider])
  end

  desc "Check this site: its Discourse AI generation, the bug report's streams through its stock processors " \
       "beside the gem's, and whether the gem replaced them (exit 0: in use, every call out; 1: the gem lost " \
       "a call; 2: not in use)"
  task check: :environment do
    # Loaded as the plugin loads it: without its native extension the
    # check still runs, and says so.
    require "discourse_ai_stream/host"
    exit DiscourseAiStream::Check.run
  end
end
