-- The per-trace table of `evaluate`: one row per trace, in input order, with the trace's counts and
-- its metric values as a list aligned with $metric_names (null where a metric is absent), which
-- warehouse.steps.trace_metrics splits into columns and counts (is_annotated, is_judged). It reads
-- the long rows of sql/fct_query_metrics.sql as they are computed (`scored_rows`, registered by
-- trace_metrics), not a table: a private evaluation writes no `query_metrics` rows. A trace's
-- values are gathered with their metrics' places in $metric_names (small integers, cheaper to
-- gather than the names), then looked up by place: a MAP built per trace cost twice the
-- statement. Parameters: $start_date, $end_date, $metric_names.

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
        is_judged,
        source_file,
        source_line
    from traces
    where partition_date between $start_date and $end_date
),

per_trace as (
    select
        scored_rows.partition_date,
        scored_rows.trace_id,
        -- integer, as `query_metrics` stores it (sql/schema.sql): the per-query file's type
        any_value(scored_rows.n_relevant)::integer as n_relevant,
        any_value(scored_rows.is_annotated) as is_annotated,
        list(list_position($metric_names::varchar[], scored_rows.metric)::smallint) as places,
        list(scored_rows.value) as metric_values
    from scored_rows
    where scored_rows.partition_date between $start_date and $end_date
    group by scored_rows.partition_date, scored_rows.trace_id
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
        per_trace.is_annotated,
        traces.is_judged,
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
