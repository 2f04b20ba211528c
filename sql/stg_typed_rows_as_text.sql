-- Two fields of typed Parquet or Arrow rows as the plain lane reads them (engine._typed_fields):
-- the timestamp as text and relevance_scores as JSON text, each written by to_json as it writes
-- them into the record's raw text (sql/stg_rows_as_json.sql), so that both lanes of validation
-- read the same values.
--
-- Input: `typed_rows` (timestamp: a string or a timestamp; relevance_scores: a map of numbers, or
-- nulls), in the rows' order.

with

final as (
    select
        to_json(timestamp) ->> '$' as timestamp,
        nullif(to_json(relevance_scores)::varchar, 'null') as scores_json
    from typed_rows
)

select * from final
