-- The corpus snapshot, one row per document, from `raw_corpus` (doc_id, optional added_at and
-- deleted_at, as registered by the loader). A document listed twice keeps its earliest addition
-- and is deleted only when every row says so (the latest deletion).

with

typed as (
    select
        doc_id::varchar as doc_id,
        try_cast(added_at as timestamptz) as added_at,
        try_cast(deleted_at as timestamptz) as deleted_at
    from raw_corpus
    where doc_id is not null
),

final as (
    select
        doc_id,
        min(added_at) as added_at,
        case when count(*) = count(deleted_at) then max(deleted_at) end as deleted_at
    from typed
    group by doc_id
)

select * from final
