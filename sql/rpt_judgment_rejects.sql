-- The judgment lines an evaluation could not read, shaped as quarantined records (no trace_id),
-- in file and line order: at most $max_rows of them (warehouse.evaluation: they follow the
-- quarantined trace records in the summary and in the --quarantine file).

with

final as (
    select
        source_file,
        source_line,
        null::varchar as trace_id,
        field,
        reason,
        raw_record
    from judgment_rejects
)

select * from final
order by source_file, source_line
limit $max_rows
