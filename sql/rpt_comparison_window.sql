-- What the comparison window of partitions $start_date..$end_date (inclusive) holds, one row per
-- day, variant, segment and metric present in query_metrics: which days have data, which
-- variants were served (every variant, so the caller can name them when a configured one is
-- missing) and which metrics were scored; and, per row, the annotated traces' count, mean,
-- sample standard deviation, smallest and largest value, which `comparison.ArmSummary.pooled`
-- adds up into each arm's level per segment and over every segment, so that no second pass over
-- the window is needed for them.

with

window_groups as (
    select
        partition_date,
        variant,
        segment,
        metric,
        count(value) as n,
        avg(value) as mean,
        stddev_samp(value) as sd,
        min(value) as low,
        max(value) as high
    from query_metrics
    where partition_date between $start_date and $end_date
    group by partition_date, variant, segment, metric
),

final as (
    select *
    from window_groups
    order by partition_date, variant, segment, metric
)

select * from final
