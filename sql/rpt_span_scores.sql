-- The scored spans of partition $day with their value of each metric in $metrics, for Phoenix
-- span annotations (docs/phoenix.md). A RETRIEVER span's trace_id is its span id: its values
-- are its trace's (query_metrics). A RERANKER span (stage_query_metrics) gets its output's value
-- under the metric's name and what reranking added, output less input, under `<metric> gain`.
-- Unannotated traces and spans (value null) are left out: they were not scored.
with

retrievers as (
    select
        trace_id as span_id,
        metric,
        value
    from query_metrics
    where
        partition_date = $day
        and value is not null
        and list_contains($metrics, metric)
),

rerankers as (
    select
        span_id,
        metric,
        output_value,
        output_value - input_value as gain
    from stage_query_metrics
    where
        partition_date = $day
        and output_value is not null
        and list_contains($metrics, metric)
),

final as (
    select
        span_id,
        metric,
        value
    from retrievers
    union all
    select
        span_id,
        metric,
        output_value as value
    from rerankers
    union all
    select
        span_id,
        metric || ' gain' as metric,
        gain as value
    from rerankers
    where gain is not null
)

select * from final
order by span_id, metric
