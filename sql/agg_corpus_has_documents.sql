-- Whether a part of a corpus snapshot holds a row that can be read (`corpus_file_rows`:
-- sql/stg_corpus_rows.sql over the part), hence a document. A shard keeps only the documents its
-- labels name, so it asks this of the whole snapshot, a part at a time until one does: its labels
-- are checked against the corpus when the snapshot has a document, as the nightly's are when the
-- warehouse's `corpus` has one, even if none of its own labels' documents is in it
-- (warehouse.corpus.load_needed_corpus).

with

final as (
    select
        exists(
            select 1
            from corpus_file_rows
            where corpus_file_rows.reason is null
        ) as has_documents
)

select * from final
