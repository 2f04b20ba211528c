-- The judgment lines that could not be read (`loaded_rejects`, registered by
-- warehouse.judgments.load_judgments), shaped as the `judgment_rejects` table.

with

final as (
    select
        source_file,
        source_line,
        field,
        reason,
        raw_record
    from loaded_rejects
)

select * from final
