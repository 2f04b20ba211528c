-- The trend behind the regression report: the `segment_metrics` rows (per partition, segment and
-- variant, the overall rows included) of the metrics $metrics over the last $last_n partitions
-- that hold rows, up to and including $end_date. Days after $end_date are left out, so a report
-- backfilled for an old day shows that day's history only.

with

days_with_rows as (
    select distinct partition_date
    from segment_metrics
    where partition_date <= $end_date
),

recent_days as (
    select partition_date
    from days_with_rows
    order by partition_date desc
    limit $last_n
),

final as (
    select
        segment_metrics.partition_date,
        segment_metrics.segment,
        segment_metrics.variant,
        segment_metrics.metric,
        segment_metrics.traces,
        segment_metrics.annotated_traces,
        segment_metrics.coverage,
        segment_metrics.mean,
        -- rows written before the bounded interval (docs/intervals.md) may hold a normal
        -- interval past [0, 1]: shown clipped (spelled out, not clamp_unit: this read runs on any
        -- connection to the warehouse, also one without the macros of sql/macros_intervals.sql)
        case
            when segment_metrics.ci_low < 0 then 0.0
            when segment_metrics.ci_low > 1 then 1.0
            else segment_metrics.ci_low
        end as ci_low,
        case
            when segment_metrics.ci_high < 0 then 0.0
            when segment_metrics.ci_high > 1 then 1.0
            else segment_metrics.ci_high
        end as ci_high,
        segment_metrics.threshold,
        segment_metrics.status
    from segment_metrics
    inner join recent_days on segment_metrics.partition_date = recent_days.partition_date
    where list_contains($metrics, segment_metrics.metric)
    order by
        segment_metrics.partition_date,
        segment_metrics.segment,
        segment_metrics.variant,
        segment_metrics.metric
)

select * from final
