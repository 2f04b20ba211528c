-- Each arm's level in a comparison window, as `comparison.ArmSummary` takes it: per segment,
-- metric and variant (control $control, candidate $candidate), and per metric and variant over
-- every segment (segment = $overall_segment), the annotated traces' count, mean, sample standard
-- deviation, smallest and largest value. Partitions $start_date..$end_date (inclusive), metrics
-- $metrics.

with

annotated_values as (
    select
        segment,
        variant,
        metric,
        value
    from query_metrics
    where
        partition_date between $start_date and $end_date
        and variant in ($control, $candidate)
        and list_contains($metrics, metric)
        and value is not null
),

final as (
    select
        metric,
        variant,
        if(grouping(segment) = 1, $overall_segment, segment) as segment,
        count(*) as n,
        avg(value) as mean,
        stddev_samp(value) as sd,
        min(value) as low,
        max(value) as high
    from annotated_values
    group by grouping sets ((segment, metric, variant), (metric, variant))
)

select * from final
order by segment, metric, variant
