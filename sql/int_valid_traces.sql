-- The records of `stg_trace_records` that passed validation, shaped as the `traces` table.

with

final as (
    select
        partition_date,
        trace_id,
        query_id,
        served_at,
        segment,
        variant,
        label_source,
        retrieved_ids,
        n_duplicate_ids,
        is_judged,
        labels,
        source_file,
        source_line,
        n_retrieved
    from stg_trace_records
    where reason is null
)

select * from final
