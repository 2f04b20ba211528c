-- Trace counts behind `query_metrics` for partitions $start_date..$end_date.

with

per_trace as (
    select distinct
        partition_date,
        trace_id,
        is_annotated,
        n_relevant
    from query_metrics
    where partition_date between $start_date and $end_date
),

final as (
    select
        count(*) as traces,
        count(*) filter (where is_annotated) as annotated,
        count(*) filter (where is_annotated and n_relevant = 0) as no_relevant
    from per_trace
)

select * from final
