-- Counts of one piece of an ingestion: records read, valid, repeated retrieved ids dropped, and
-- valid records kept under the store's day although served on another.

with

final as (
    select
        count(*) as records_read,
        count(*) filter (where reason is null) as records_valid,
        coalesce(sum(n_duplicate_ids) filter (where reason is null), 0) as duplicate_ids_dropped,
        count(*) filter (where outside_partition_day) as records_outside_day
    from stg_trace_records
)

select * from final
