# frozen_string_literal: true

# The admin dashboard's problem checks, subclasses of Discourse's own
# ProblemCheck, so loaded by Health.register_problem_checks once it exists.
# Each runs at every load of the dashboard (no perform_every) and says what
# Health says of its TOPIC; their identifiers are their class names in
# snake case (discourse_ai_stream_not_in_use, ...).
class ProblemCheck
  # discourse_ai_stream is installed but not in use, and why.
  class DiscourseAiStreamNotInUse < ProblemCheck
    TOPIC = :not_in_use
    include DiscourseAiStream::Discourse::Health::Dashboard

    self.priority = "high"
  end

  # The streams of the last 24 hours that lost or refused something.
  class DiscourseAiStreamLostOrRefused < ProblemCheck
    TOPIC = :lost_or_refused
    include DiscourseAiStream::Discourse::Health::Dashboard
  end
end
