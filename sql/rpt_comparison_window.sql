-- The long per-trace metric rows of a comparison window, partitions $start_date..$end_date
-- (inclusive), as `comparison.compare_query_metrics` takes them: one row per trace and metric,
-- value null for an unannotated trace (it counts as served, never as paired). Every variant is
-- kept, so the caller can say which variants the window holds when the configured ones are not
-- there. Ordered, so the same window gives the same rows in the same order.

with

window_metrics as (
    select
        partition_date,
        trace_id,
        query_id,
        segment,
        variant,
        metric,
        value
    from query_metrics
    where partition_date between $start_date and $end_date
),

final as (
    select *
    from window_metrics
    order by partition_date, trace_id, metric
)

select * from final
