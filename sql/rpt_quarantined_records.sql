-- The records an evaluation quarantined, in file and line order, with their reasons: at most
-- $max_rows of them (warehouse.evaluation: the first few for the summary, every one, read a
-- batch at a time, for the --quarantine file).

with

final as (
    select
        source_file,
        source_line,
        trace_id,
        field,
        reason,
        raw_record
    from quarantine
)

select * from final
order by source_file, source_line
limit $max_rows
