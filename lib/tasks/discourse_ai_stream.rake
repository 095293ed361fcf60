# frozen_string_literal: true

namespace :discourse_ai_stream do
  desc "Count the streamed tool calls the legacy OpenAiMessageProcessor would have dropped, per provider " \
       "(SINCE: a date, 30d or all, default 30 days; PROVIDER: one of them, like Mistral, default all)"
  task :audit, %i[since provider] => :environment do |_task, args|
    require "discourse_ai_stream"
    DiscourseAiStream::Audit.run_task(model: AiApiAuditLog, since: args[:since], provider: args[:provider])
  end
end
