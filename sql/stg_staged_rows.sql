-- The rows one ingestion staged for a table, a Parquet file per piece (engine.ingest_traces).
-- Parameter: $files, the staging files in piece order.

with

final as (
    select * from read_parquet($files)
)

select * from final
