-- The reranker output's level per segment (and over every segment, segment overall_segment()),
-- variant and metric on $day and in the baseline window $baseline_start..$baseline_end
-- (inclusive), from stage_query_metrics: the day's valued outputs' count, mean and sample
-- standard deviation, and the baseline's pooled mean, so that a significant drop (the day's
-- whole 95% interval below the baseline: retrieval_pipeline/reports/stage_why.py) is found as
-- the regression report's watch list finds one for the first stage.

with

valued as (
    select
        partition_date,
        segment,
        variant,
        metric,
        output_value
    from stage_query_metrics
    where
        (partition_date = $day or partition_date between $baseline_start and $baseline_end)
        and output_value is not null
        and not isnan(output_value)
),

both_levels as (
    select
        partition_date,
        segment,
        variant,
        metric,
        output_value
    from valued
    union all
    select
        partition_date,
        overall_segment() as segment,
        variant,
        metric,
        output_value
    from valued
),

final as (
    select
        segment,
        variant,
        metric,
        count(*) filter (where partition_date = $day) as day_n,
        avg(output_value) filter (where partition_date = $day) as day_mean,
        stddev_samp(output_value) filter (where partition_date = $day) as day_sd,
        avg(output_value) filter (
            where partition_date between $baseline_start and $baseline_end
        ) as base_mean
    from both_levels
    group by segment, variant, metric
)

select * from final
order by segment, variant, metric
