-- The rows of a corpus snapshot, typed, each with the reason it cannot be read (null: it can).
--
-- Input: `raw_corpus` (doc_id, source_line, and added_at and deleted_at, null when the snapshot
-- has no such column), as readers.corpus_table gives it: times typed or as text.
-- A row is rejected when its doc_id is missing (a blank CSV line too) or empty, or when added_at
-- or deleted_at holds
-- something that is not a timestamp (an empty one is no time): reading such a time as "none"
-- would keep a deleted document's labels fresh, or a later one's. engine.load_corpus keeps the
-- readable rows in `corpus` (sql/int_corpus.sql) and the others in `corpus_rejects`, with their
-- times as given (`added_given`, `deleted_given`).

with

typed as (
    select
        source_line,
        doc_id::varchar as doc_id,
        added_at as added_given,
        deleted_at as deleted_given,
        try_cast(added_at as timestamptz) as added_at,
        try_cast(deleted_at as timestamptz) as deleted_at
    from raw_corpus
),

-- a time given that is not one; the text is looked at only where the cast failed (a time column
-- already typed never does), since turning 20M times into text doubled the load
checked as (
    select
        *,
        case
            when added_at is null and added_given is not null
                then trim(added_given::varchar) <> ''
            else false
        end as bad_added,
        case
            when deleted_at is null and deleted_given is not null
                then trim(deleted_given::varchar) <> ''
            else false
        end as bad_deleted
    from typed
),

final as (
    select
        source_line,
        doc_id,
        added_at,
        deleted_at,
        added_given,
        deleted_given,
        case
            when doc_id is null or doc_id = '' then 'doc_id'
            when bad_added then 'added_at'
            when bad_deleted then 'deleted_at'
        end as field,
        case
            when doc_id is null and added_given is null and deleted_given is null
                then 'doc_id is missing (the row is empty)'
            when doc_id is null then 'doc_id is missing'
            when doc_id = '' then 'doc_id is empty'
            when bad_added
                then 'added_at is not a timestamp: "' || left(added_given::varchar, 80) || '"'
            when bad_deleted
                then 'deleted_at is not a timestamp: "' || left(deleted_given::varchar, 80) || '"'
        end as reason
    from checked
)

select * from final
