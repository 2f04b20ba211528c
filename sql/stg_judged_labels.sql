-- Labels from the judgments for the valid traces of a piece that carry none of their own.
--
-- Input: `unlabelled_traces` (row_number, query_id, retrieved_ids), the piece's valid traces with
-- neither relevant_ids nor relevance_scores, and `judged_queries` (sql/int_judged_queries.sql).
-- Output: one row per such trace whose query is judged: its labels, shaped as the trace's own
-- (doc_id, grade, rank: the document's first position in retrieved_ids, null when not retrieved;
-- warehouse.judgments then hands them to ingest.screen.keep_first_occurrences like any label),
-- and the judgments' label sources. A trace whose query is not judged gets no row: it stays
-- unannotated.

with

final as (
    select
        unlabelled_traces.row_number,
        list_transform(
            judged_queries.judged,
            lambda j: struct_pack(
                doc_id := j.doc_id,  -- noqa: RF01
                grade := j.grade,  -- noqa: RF01
                rank := list_position(unlabelled_traces.retrieved_ids, j.doc_id)::integer  -- noqa: RF01, LT05
            )
        ) as labels,
        judged_queries.label_sources
    from unlabelled_traces
    inner join judged_queries on unlabelled_traces.query_id = judged_queries.query_id
)

select * from final
