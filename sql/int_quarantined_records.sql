-- The records of `stg_trace_records` that failed validation, with the field and reason.

with

final as (
    select
        partition_date,
        source_file,
        source_line,
        trace_id,
        field,
        reason,
        raw_record
    from stg_trace_records
    where reason is not null
)

select * from final
