-- The judgments per query, as the labels they give a trace (sql/stg_judged_labels.sql): one row
-- per judged query with its (doc_id, grade) pairs and its label sources, comma-separated.
-- Built once per ingestion (warehouse.judgments.judged_queries), not once per piece.

with

final as (
    select
        query_id,
        list(struct_pack(doc_id := doc_id, grade := grade) order by doc_id) as judged,
        string_agg(distinct label_source, ',' order by label_source) as label_sources
    from judgments
    group by query_id
)

select * from final
