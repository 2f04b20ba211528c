-- The judgments read from their files (`loaded_judgments`, registered by
-- warehouse.judgments.load_judgments: one row per query and document, the latest judgment of a
-- pair), shaped as the `judgments` table.

with

final as (
    select
        query_id,
        doc_id,
        grade,
        judged_at,
        label_source,
        source_file,
        source_line
    from loaded_judgments
)

select * from final
