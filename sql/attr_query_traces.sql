-- The scored traces of a few queries (the registered relation why_queries: segment, variant,
-- metric, query_id; segment $overall_segment is every segment) on $day and in the baseline window
-- $baseline_start..$baseline_end: ranking as served, the labels and which of them the corpus made
-- stale, and the metric's value, so that the change of each query can be re-scored with the
-- baseline's labels (retrieval_pipeline/reports/why_causes.py). Only the traces query_metrics
-- scored (annotated, value a number) are read: the ones its means pool; of a query with more
-- than $per_side of them on a side (the day, the baseline window), the latest $per_side.

with

wanted as (
    select distinct
        segment,
        variant,
        metric,
        query_id
    from why_queries
),

stale as (
    select
        partition_date,
        trace_id,
        list(doc_id) as stale_ids
    from labels
    where
        (partition_date = $day or partition_date between $baseline_start and $baseline_end)
        and stale_reason is not null
    group by partition_date, trace_id
),

scored as (
    select
        wanted.segment as finding_segment,
        wanted.variant,
        wanted.metric,
        query_metrics.query_id,
        query_metrics.partition_date,
        query_metrics.trace_id,
        query_metrics.value
    from query_metrics
    inner join wanted
        on
            query_metrics.query_id = wanted.query_id
            and query_metrics.variant = wanted.variant
            and query_metrics.metric = wanted.metric
            and (wanted.segment = $overall_segment or query_metrics.segment = wanted.segment)
    where
        (
            query_metrics.partition_date = $day
            or query_metrics.partition_date between $baseline_start and $baseline_end
        )
        and query_metrics.is_annotated
        and query_metrics.value is not null
        and not isnan(query_metrics.value)
),

joined as (
    select
        scored.finding_segment as segment,
        scored.variant,
        scored.metric,
        scored.query_id,
        scored.partition_date,
        scored.trace_id,
        scored.value,
        traces.served_at,
        traces.retrieved_ids,
        traces.n_retrieved,
        traces.labels,
        scored.partition_date = $day as on_day,
        coalesce(stale.stale_ids, []) as stale_ids
    from scored
    inner join traces
        on
            scored.partition_date = traces.partition_date
            and scored.trace_id = traces.trace_id
    left join stale
        on
            scored.partition_date = stale.partition_date
            and scored.trace_id = stale.trace_id
),

final as (
    select *
    from joined
    qualify
        row_number() over (
            partition by segment, variant, metric, query_id, on_day
            order by served_at desc, trace_id asc
        ) <= $per_side
)

select * from final
