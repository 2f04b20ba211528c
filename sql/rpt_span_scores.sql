-- The scored traces of partition $day with their value of each metric in $metrics, for Phoenix
-- span annotations (docs/phoenix.md): a span's trace_id is its span id. Unannotated traces
-- (value null) are left out: they were not scored.
with

final as (
    select
        trace_id,
        metric,
        value
    from query_metrics
    where
        partition_date = $day
        and value is not null
        and list_contains($metrics, metric)
)

select * from final
order by trace_id, metric
