-- The corpus: one row per document, from the readable rows of sql/stg_corpus_rows.sql (the view
-- `corpus_rows`). A document listed twice keeps its earliest addition and is deleted only when
-- every row says so (the latest deletion).

with

final as (
    select
        doc_id,
        min(added_at) as added_at,
        case when count(*) = count(deleted_at) then max(deleted_at) end as deleted_at
    from corpus_rows
    where reason is null
    group by doc_id
)

select * from final
