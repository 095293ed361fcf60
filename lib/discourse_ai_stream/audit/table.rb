# frozen_string_literal: true

module DiscourseAiStream
  module Audit
    # The rows of ai_api_audit_logs the audit reads, from an ActiveRecord
    # model (AiApiAuditLog): the given providers' rows created since `since`
    # (nil: all), in keyset batches by id, each batch one query that loads
    # three columns and builds no model objects. The table is append-only
    # and holds the whole request and response of every LLM call, so:
    #
    # - the period becomes an id range first (the smallest id created since
    #   `since`, which PostgreSQL can find through Discourse's indexes that
    #   lead with created_at), and every batch starts at its last id: no
    #   batch reads a row before the period, however old the table;
    # - raw_request_payload, as large as the response, is never loaded;
    # - every row of the period is returned, streamed or not: the database
    #   would have to read a payload whole to tell (a LIKE on it does), and
    #   the audit reads it anyway. So the rows done can be counted against
    #   a total, which costs no payload (#estimate).
    #
    # A row deleted while the audit runs is simply not in a later batch; a
    # row added is in one when it falls into the period.
    class Table
      Row = Struct.new(:id, :provider_id, :raw_response_payload)
      COLUMNS = Row.members

      attr_reader :batch_size

      def initialize(model, since:, provider_ids:, batch_size: BATCH_SIZE)
        raise ArgumentError, "batch_size must be positive" unless batch_size.positive?

        @model = model
        @since = since
        @provider_ids = provider_ids
        @batch_size = batch_size
      end

      # The id the walk starts at: the smallest of the period, nil for an
      # empty period.
      def first_id
        return @first_id if defined?(@first_id)

        @first_id = @since ? first_id_since : @model.minimum(:id)
      end

      # How many rows the walk will read, as the table is now.
      def estimate = first_id ? estimate_relation.count : 0

      def estimate_sql = estimate_relation.select(Arel.star.count).to_sql

      # Yields each Row, ascending ids, a batch (one query) at a time.
      def each(&)
        return enum_for(:each) unless block_given?
        return unless first_id

        after = first_id - 1
        loop do
          rows = batch_relation(after).pluck(*COLUMNS).map { |values| Row.new(*values) }
          rows.each(&)
          break if rows.size < batch_size

          after = rows.last.id
        end
      end

      # The SQL of one batch, for EXPLAIN (the benchmark prints its plan).
      def batch_sql(after = first_id.to_i - 1) = batch_relation(after).select(*COLUMNS).to_sql

      private

      # MIN(id) alone lets PostgreSQL walk the primary key from the table's
      # first row until one is in the period: on a site, every row before
      # it. Ordered by created_at, the rows of the period come from an index
      # on created_at (Discourse has three that lead with it), and only
      # theirs are read.
      def first_id_since
        period = in_period(@model.all).select(:id).order(:created_at)
        @model.unscoped.from(period, :period).minimum(:id)
      end

      def estimate_relation = candidates.where(@model.arel_table[:id].gteq(first_id.to_i))

      def batch_relation(after) = candidates.where(@model.arel_table[:id].gt(after)).order(:id).limit(batch_size)

      def candidates = in_period(@model.where(provider_id: @provider_ids))

      def in_period(relation) = @since ? relation.where(@model.arel_table[:created_at].gteq(@since)) : relation
    end
  end
end
