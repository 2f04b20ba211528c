-- The scored traces of a few queries (the registered relation why_queries: segment, variant,
-- metric, query_id; segment overall_segment() is every segment) on $day and in the baseline window
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
            and (wanted.segment = overall_segment() or query_metrics.segment = wanted.segment)
    where
        (
            query_metrics.partition_date = $day
            or query_metrics.partition_date between $baseline_start and $baseline_end
        )
        and query_metrics.is_annotated
        and query_metrics.value is not null
        and not isnan(query_metrics.value)
),

-- the wanted queries' traces, filtered on query_id before their label lists are read
wanted_traces as (
    select
        partition_date,
        trace_id,
        served_at,
        n_retrieved,
        labels
    from traces
    where
        (partition_date = $day or partition_date between $baseline_start and $baseline_end)
        and query_id in (select wanted.query_id from wanted)
),

kept as (
    select
        scored.finding_segment as segment,
        scored.variant,
        scored.metric,
        scored.query_id,
        scored.partition_date,
        scored.trace_id,
        scored.value,
        wanted_traces.served_at,
        wanted_traces.n_retrieved,
        wanted_traces.labels,
        scored.partition_date = $day as on_day
    from scored
    inner join wanted_traces
        on
            scored.partition_date = wanted_traces.partition_date
            and scored.trace_id = wanted_traces.trace_id
    qualify
        row_number() over (
            partition by
                scored.finding_segment,
                scored.variant,
                scored.metric,
                scored.query_id,
                on_day
            order by wanted_traces.served_at desc, scored.trace_id asc
        ) <= $per_side
),

-- the stale labels of the kept traces only (a few percent of every label)
stale as (
    select
        labels.partition_date,
        labels.trace_id,
        list(labels.doc_id) as stale_ids
    from labels
    semi join kept
        on
            labels.partition_date = kept.partition_date
            and labels.trace_id = kept.trace_id
    where
        (
            labels.partition_date = $day
            or labels.partition_date between $baseline_start and $baseline_end
        )
        and labels.stale_reason is not null
    group by labels.partition_date, labels.trace_id
),

final as (
    select
        kept.segment,
        kept.variant,
        kept.metric,
        kept.query_id,
        kept.partition_date,
        kept.trace_id,
        kept.value,
        kept.served_at,
        kept.n_retrieved,
        kept.on_day,
        -- three lists of plain values, which reach Python several times faster than structs
        list_transform(kept.labels, lambda l: l.doc_id) as label_ids,  -- noqa: RF01
        list_transform(kept.labels, lambda l: l.grade) as label_grades,  -- noqa: RF01
        list_transform(kept.labels, lambda l: l.rank) as label_ranks,  -- noqa: RF01
        coalesce(stale.stale_ids, []) as stale_ids
    from kept
    left join stale
        on
            kept.partition_date = stale.partition_date
            and kept.trace_id = stale.trace_id
)

select * from final
