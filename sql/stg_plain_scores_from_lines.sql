-- The plain lane's input for a JSON-lines piece: the fields pyarrow's strict JSON reader typed,
-- and relevance_scores as JSON text taken from each record's line (that reader has no map type).
-- json_extract writes the object out again in one form, as to_json does for a Parquet map column
-- (engine._typed_fields), so sql/stg_plain_trace_fields.sql checks either text the same way.
--
-- Input: `parsed_records`, engine.PLAIN_FIELDS with each record's source_file, file_order,
-- source_line and raw_record.

with

final as (
    select
        *,
        nullif(json_extract(raw_record, '$.relevance_scores')::varchar, 'null') as scores_json
    from parsed_records
)

select * from final
