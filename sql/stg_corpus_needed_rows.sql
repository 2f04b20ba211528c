-- The checked rows of a part of a corpus snapshot (`corpus_file_rows`: sql/stg_corpus_rows.sql
-- over the part) whose doc_id is one of `corpus_needed_ids` (sql/int_label_doc_ids.sql), readable
-- or not: a shard keeps only these, so that its corpus and its rejected rows are the warehouse's
-- for the documents its labels name (warehouse.corpus.load_needed_corpus).

with

final as (
    select corpus_file_rows.*
    from corpus_file_rows
    where corpus_file_rows.doc_id in (select corpus_needed_ids.doc_id from corpus_needed_ids)
)

select * from final
