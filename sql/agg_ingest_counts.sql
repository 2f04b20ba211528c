-- Counts of one ingestion: records read, valid, and repeated retrieved ids dropped.

with

final as (
    select
        count(*) as records_read,
        count(*) filter (where reason is null) as records_valid,
        coalesce(sum(n_duplicate_ids) filter (where reason is null), 0) as duplicate_ids_dropped
    from stg_trace_records
)

select * from final
