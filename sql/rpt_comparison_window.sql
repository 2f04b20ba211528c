-- What the comparison window of partitions $start_date..$end_date (inclusive) holds, one row per
-- day, variant, segment and metric present in query_metrics: which days have data, which
-- variants were served (every variant, so the caller can name them when a configured one is
-- missing) and which metrics were scored; and, per row, the annotated traces' count, mean,
-- sample standard deviation, smallest and largest value, which `comparison.ArmSummary.pooled`
-- adds up into each arm's level per segment and over every segment, so that no second pass over
-- the window is needed for them. A NaN value (a score that could not be computed, in a warehouse
-- written before grades were bounded) counts in none of these but in not_a_number, which flags
-- the comparison for review.

with

window_groups as (
    select
        partition_date,
        variant,
        segment,
        metric,
        count(value) filter (where not isnan(value)) as n,
        avg(value) filter (where not isnan(value)) as mean,
        stddev_samp(value) filter (where not isnan(value)) as sd,
        min(value) filter (where not isnan(value)) as low,
        max(value) filter (where not isnan(value)) as high,
        count(*) filter (where isnan(value)) as not_a_number
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
