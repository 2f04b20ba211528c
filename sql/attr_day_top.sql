-- The first $depth documents served to the day's scored traces of a few queries (the registered
-- relation why_shown: segment, variant, metric, query_id; segment overall_segment() is every
-- segment): where the unjudged documents now in a query's top k are named. One day's id lists
-- only (retrieved_ids is the widest column of traces), and only where the warehouse stores them.

with

shown as (
    select distinct
        segment,
        variant,
        metric,
        query_id
    from why_shown
),

scored as (
    select distinct
        query_metrics.partition_date,
        query_metrics.trace_id
    from query_metrics
    inner join shown
        on
            query_metrics.query_id = shown.query_id
            and query_metrics.variant = shown.variant
            and query_metrics.metric = shown.metric
            and (shown.segment = overall_segment() or query_metrics.segment = shown.segment)
    where
        query_metrics.partition_date = $day
        and query_metrics.is_annotated
        and query_metrics.value is not null
),

final as (
    select
        traces.trace_id,
        list_slice(traces.retrieved_ids, 1, $depth) as top_ids
    from traces
    inner join scored
        on
            traces.partition_date = scored.partition_date
            and traces.trace_id = scored.trace_id
    where traces.partition_date = $day
)

select * from final
