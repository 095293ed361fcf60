# frozen_string_literal: true

require_relative "postgres_server"

# ai_api_audit_logs as Discourse AI has it (the columns, types and indexes
# of its schema, which the audit's queries meet on a site), in a throwaway
# PostgreSQL cluster (PostgresServer), and an AiApiAuditLog model over it.
# ActiveRecord and pg are Debian's packages (ruby-activerecord, ruby-pg); on
# a Ruby they cannot be loaded on, `unavailable` says what is missing.
module AuditDatabase
  TABLE_SQL = <<~SQL
    CREATE TABLE ai_api_audit_logs (
      id bigserial PRIMARY KEY,
      provider_id integer NOT NULL,
      user_id integer,
      request_tokens integer,
      response_tokens integer,
      raw_request_payload character varying,
      raw_response_payload character varying,
      created_at timestamp(6) without time zone NOT NULL,
      updated_at timestamp(6) without time zone NOT NULL,
      topic_id integer,
      post_id integer,
      feature_name character varying(255),
      language_model character varying(255),
      feature_context jsonb,
      cache_read_tokens integer,
      cache_write_tokens integer,
      duration_msecs integer
    );
    CREATE INDEX index_ai_api_audit_logs_on_created_at_and_feature_name ON ai_api_audit_logs (created_at, feature_name);
    CREATE INDEX index_ai_api_audit_logs_on_created_at_and_language_model ON ai_api_audit_logs (created_at, language_model);
    CREATE INDEX index_ai_api_audit_logs_on_created_at_and_user_id ON ai_api_audit_logs (created_at, user_id);
    CREATE INDEX index_ai_api_audit_logs_on_topic_id ON ai_api_audit_logs (topic_id);
  SQL

  # AiApiAuditLog::Provider as Discourse AI numbers them.
  PROVIDERS = { OpenAI: 1, Anthropic: 2, HuggingFaceTextGeneration: 3, Gemini: 4, Vllm: 5, Cohere: 6, Ollama: 7,
                SambaNova: 8, Mistral: 9, OpenRouter: 10 }.freeze

  module_function

  # nil when ActiveRecord and pg load; else why not.
  def unavailable
    return @unavailable if defined?(@unavailable)

    @unavailable = quietly do
      require "active_record"
      require "pg"
      nil
    rescue LoadError => e
      "#{e.message} (Ruby #{RUBY_VERSION}: #{load_hint})"
    end
  end

  # What script/provision/db-gems could not provide for this Ruby, else how to get it.
  def load_hint
    return "install Debian's ruby-activerecord and ruby-pg (bin/setup)" if RUBY_VERSION.start_with?("3.1.")

    minor = RUBY_VERSION[/\A\d+\.\d+/]
    cache = ENV.fetch("DISCOURSE_AI_STREAM_CACHE") { File.join(Dir.home, ".cache", "discourse_ai_stream") }
    missing = File.join(cache, "gems-#{minor}", "MISSING")
    if File.exist?(missing)
      return "script/provision/db-gems #{minor} says: #{File.read(missing).lines.map(&:strip).join("; ")}"
    end

    "run script/provision/db-gems #{minor}, or this through bin/with-ruby #{minor}, which runs it"
  end

  # Starts the cluster once per process and connects; the table is empty.
  def connect
    @connect ||= quietly do
      server = PostgresServer.new.start
      ActiveRecord::Base.establish_connection(server.connection_config)
      ActiveRecord::Base.connection.execute(TABLE_SQL)
      define_model
      server
    end
  end

  # ActiveSupport 6.1 redefines methods of its own as it loads, which
  # RSpec's `config.warnings` would print.
  def quietly
    verbose = $VERBOSE
    $VERBOSE = nil
    yield
  ensure
    $VERBOSE = verbose
  end

  def server
    connect
  end

  def model
    connect
    AuditDatabase.const_get(:AiApiAuditLog, false)
  end

  def clear
    connect
    ActiveRecord::Base.connection.execute("TRUNCATE ai_api_audit_logs RESTART IDENTITY")
  end

  # Inserts rows (Hashes of column values; created_at and updated_at
  # default to now) in one statement, and returns their ids.
  def insert(rows)
    now = Time.now.utc
    rows = rows.map { |row| { created_at: now, updated_at: now }.merge(row) }
    model.insert_all!(rows, returning: [:id]).rows.flatten
  end

  def define_model
    model = Class.new(ActiveRecord::Base) do
      self.table_name = "ai_api_audit_logs"
      const_set(:Provider, Module.new)
      PROVIDERS.each { |name, id| self::Provider.const_set(name, id) }
    end
    AuditDatabase.const_set(:AiApiAuditLog, model)
  end
end
