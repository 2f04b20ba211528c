-- Per-trace metric values with the trace's counts, in input order, for partitions
-- $start_date..$end_date (long form; the caller pivots metrics into columns).

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

final as (
    select
        dense_rank() over (
            order by traces.source_file, traces.source_line, traces.partition_date
        ) as trace_order,
        traces.trace_id,
        traces.query_id,
        traces.segment,
        traces.variant,
        len(traces.retrieved_ids) as n_retrieved,
        query_metrics.n_relevant,
        coalesce(stale_counts.n_stale_labels, 0) as n_stale_labels,
        query_metrics.metric,
        query_metrics.value
    from query_metrics
    inner join traces
        on
            query_metrics.partition_date = traces.partition_date
            and query_metrics.trace_id = traces.trace_id
    left join stale_counts
        on
            query_metrics.partition_date = stale_counts.partition_date
            and query_metrics.trace_id = stale_counts.trace_id
    where query_metrics.partition_date between $start_date and $end_date
)

select * from final
