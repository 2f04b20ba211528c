-- The plain lane's typed fields of a JSON-lines piece, in one parse of each record: the fields of
-- ingest.lanes.PLAIN_FIELDS (ids and lists of ids as strings), and relevance_scores as JSON text
-- (scores_json, null when absent or null), written out in one form as to_json writes a Parquet
-- map column (warehouse.validation._typed_fields), so sql/stg_plain_trace_fields.sql checks
-- either text the same way. A field given twice: the first counts, as in sql/stg_trace_fields.sql.
--
-- Only for a piece whose every record sql/agg_record_fields.sql found to be one JSON object of
-- the plain types: this parse turns a number or a boolean where a string is due into text.
--
-- Input: `raw_records` (source_file, file_order, source_line, raw_record), one row per record.
-- Output: one row per record, in the input's order, with its file_order and source_line (the
-- caller attaches the records' other columns).

with

parsed as (
    select
        file_order,
        source_line,
        from_json(
            raw_record,
            '{"trace_id": "VARCHAR", "query_id": "VARCHAR", "timestamp": "VARCHAR",
              "retrieved_ids": ["VARCHAR"], "relevant_ids": ["VARCHAR"], "segment": "VARCHAR",
              "variant": "VARCHAR", "label_source": "VARCHAR", "relevance_scores": "JSON"}'
        ) as f
    from raw_records
),

final as (
    select
        f.trace_id,
        f.query_id,
        f.timestamp,
        f.retrieved_ids,
        f.relevant_ids,
        f.segment,
        f.variant,
        f.label_source,
        f.relevance_scores::varchar as scores_json,
        file_order,
        source_line
    from parsed
)

select * from final
