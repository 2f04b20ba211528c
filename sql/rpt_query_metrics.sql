-- The per-trace table of `evaluate`: one row per trace, in input order, with the trace's counts and
-- its metric values as a list aligned with $metric_names (null where a metric is absent), which
-- warehouse.steps.query_metrics_wide splits into columns. A trace's values are gathered with
-- their metrics' places in $metric_names (small integers, cheaper to gather than the names), then
-- looked up by place: a MAP built per trace cost twice the statement. Parameters: $start_date,
-- $end_date, $metric_names.

with

stale_counts as (
    select
        partition_date,
        trace_id,
        count(*) filter (where stale_reason is not null) as n_stale_labels
    from labels
    where partition_date between $start_date and $end_date
    group by partition_date, trace_id
),

trace_rows as (
    select
        partition_date,
        trace_id,
        query_id,
        segment,
        variant,
        n_retrieved,
        source_file,
        source_line
    from traces
    where partition_date between $start_date and $end_date
),

per_trace as (
    select
        query_metrics.partition_date,
        query_metrics.trace_id,
        any_value(query_metrics.n_relevant) as n_relevant,
        list(list_position($metric_names::varchar[], query_metrics.metric)::smallint) as places,
        list(query_metrics.value) as metric_values
    from query_metrics
    where query_metrics.partition_date between $start_date and $end_date
    group by query_metrics.partition_date, query_metrics.trace_id
),

final as (
    select
        traces.trace_id,
        traces.query_id,
        traces.segment,
        traces.variant,
        traces.n_retrieved,
        per_trace.n_relevant,
        coalesce(stale_counts.n_stale_labels, 0) as n_stale_labels,
        list_transform(
            $metric_names::varchar[],
            lambda name, place: per_trace.metric_values[
                list_position(per_trace.places, place::smallint)
            ]
        ) as metric_values
    from per_trace
    inner join trace_rows as traces
        on
            per_trace.partition_date = traces.partition_date
            and per_trace.trace_id = traces.trace_id
    left join stale_counts
        on
            per_trace.partition_date = stale_counts.partition_date
            and per_trace.trace_id = stale_counts.trace_id
    order by traces.source_file, traces.source_line, traces.partition_date
)

select * from final
