-- What the comparison window of partitions $start_date..$end_date (inclusive) holds, one row per
-- day, variant, segment and metric present in query_metrics: enough to say how many days have
-- data, which variants were served (every variant, so the caller can name them when a configured
-- one is missing) and which metrics were scored, without reading a trace.

with

window_contents as (
    select distinct
        partition_date,
        variant,
        segment,
        metric
    from query_metrics
    where partition_date between $start_date and $end_date
),

final as (
    select *
    from window_contents
    order by partition_date, variant, segment, metric
)

select * from final
