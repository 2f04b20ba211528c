-- How a private evaluation's traces join its judgments, for evaluate's diagnosis when they do not
-- (docs/conformance.md): the queries they share, the retrieved ids that are judged for any query,
-- and a few keys of each side, so that a user sees what each side's keys look like.

with

judged_queries as (
    select distinct query_id from judgments
),

judged_docs as (
    select distinct doc_id from judgments
),

traced_queries as (
    select distinct query_id from traces
),

retrieved as (
    select distinct unnest(retrieved_ids) as doc_id from traces
),

final as (
    select
        (
            select count(*)
            from traced_queries
            where query_id in (select judged_queries.query_id from judged_queries)
        ) as shared_queries,
        (
            select count(*)
            from retrieved
            where doc_id in (select judged_docs.doc_id from judged_docs)
        ) as judged_retrieved_ids,
        (select count(*) from retrieved) as retrieved_ids,
        (select list(query_id order by query_id)[1:3] from traced_queries) as trace_query_examples,
        (select list(query_id order by query_id)[1:3] from judged_queries) as judged_query_examples,
        (select list(doc_id order by doc_id)[1:3] from retrieved) as retrieved_id_examples,
        (select list(doc_id order by doc_id)[1:3] from judged_docs) as judged_doc_examples
)

select * from final
