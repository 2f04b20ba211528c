-- The scored traces of a few paired queries (the registered relation why_pairs: segment,
-- metric, query_id; segment overall_segment() is every segment) in both arms of the nightly's
-- comparison window $start_date..$end_date (inclusive): ranking as served (the labels with their
-- ranks), the labels the corpus made stale, and the metric's value, so that each query's
-- difference candidate - control can be re-scored with control's labels
-- (retrieval_pipeline/reports/why_causes.py, control as the baseline). Only the traces the
-- comparison pools are read (value a number); of a query with more than $per_side of them in an
-- arm, the latest $per_side. `on_day` marks the candidate's traces (the side compared), and
-- every row carries the candidate as its variant. Control $control, candidate $candidate.

with

wanted as (
    select distinct
        segment,
        metric,
        query_id
    from why_pairs
),

scored as (
    select
        wanted.segment as cell_segment,
        wanted.metric,
        query_metrics.query_id,
        query_metrics.variant,
        query_metrics.partition_date,
        query_metrics.trace_id,
        query_metrics.value
    from query_metrics
    inner join wanted
        on
            query_metrics.query_id = wanted.query_id
            and query_metrics.metric = wanted.metric
            and (wanted.segment = overall_segment() or query_metrics.segment = wanted.segment)
    where
        query_metrics.partition_date between $start_date and $end_date
        and query_metrics.variant in ($control, $candidate)
        and query_metrics.value is not null
        and not isnan(query_metrics.value)
),

wanted_traces as (
    select
        partition_date,
        trace_id,
        served_at,
        n_retrieved,
        labels
    from traces
    where
        partition_date between $start_date and $end_date
        and query_id in (select wanted.query_id from wanted)
),

kept as (
    select
        scored.cell_segment as segment,
        scored.metric,
        scored.query_id,
        scored.partition_date,
        scored.trace_id,
        scored.value,
        wanted_traces.served_at,
        wanted_traces.n_retrieved,
        wanted_traces.labels,
        scored.variant = $candidate as on_day
    from scored
    inner join wanted_traces
        on
            scored.partition_date = wanted_traces.partition_date
            and scored.trace_id = wanted_traces.trace_id
    qualify
        row_number() over (
            partition by scored.cell_segment, scored.metric, scored.query_id, scored.variant
            order by wanted_traces.served_at desc, scored.trace_id asc
        ) <= $per_side
),

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
        labels.partition_date between $start_date and $end_date
        and labels.stale_reason is not null
    group by labels.partition_date, labels.trace_id
),

final as (
    select
        kept.segment,
        $candidate as variant,
        kept.metric,
        kept.query_id,
        kept.partition_date,
        kept.trace_id,
        kept.value,
        kept.served_at,
        kept.n_retrieved,
        kept.on_day,
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
