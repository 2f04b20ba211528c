-- Per partition, segment and variant, plus one overall row per variant (segment = $overall_segment,
-- every segment of that variant pooled): traces, annotated traces (judged_traces of them labelled
-- by the judgments, the others by labels of their own), annotation coverage, and for
-- every metric in query_metrics (one row per metric) its mean over the annotated traces with a 95%
-- confidence interval, its threshold and its status.
--
-- Interval: Wilson's score interval on an effective sample size (sql/macros_intervals.sql,
-- docs/intervals.md), which never leaves [0, 1]: Wilson's own for 0/1 values, n / phi traces for
-- values between 0 and 1; null when no trace was scored. Coverage: annotated / traces (null for
-- no traces).
-- Thresholds come from the relation metric_thresholds (segment, metric, threshold, min_annotated),
-- registered by the caller from the configuration: a row for the segment itself wins over the
-- default row (segment null). Status, first match:
--   no_threshold  no threshold is configured for the metric;
--   fail          the mean is NaN (a score that could not be computed: NaN compares greater
--                 than every number in DuckDB, so `mean >= threshold` would pass it);
--   insufficient  fewer annotated traces than min_annotated (no verdict either way);
--   fail          no mean where a verdict is due (min_annotated = 0 and no annotated trace);
--   pass / fail   mean >= threshold / mean < threshold.
-- A missing or NaN mean never passes. margin = mean - threshold (negative when failing).
-- Parameters: $start_date, $end_date (partitions, inclusive), $overall_segment, $z (the
-- interval's normal quantile, 1.96 for 95%).

with

annotated_traces as (
    select distinct
        partition_date,
        trace_id
    from query_metrics
    where
        partition_date between $start_date and $end_date
        and is_annotated
),

scoped_traces as (
    select
        traces.partition_date,
        traces.segment,
        traces.variant,
        annotated_traces.trace_id is not null as is_annotated,
        -- annotated without labels of its own: by the judgments (warehouse.judgments)
        annotated_traces.trace_id is not null and not traces.is_judged as by_judgments
    from traces
    left join annotated_traces
        on
            traces.partition_date = annotated_traces.partition_date
            and traces.trace_id = annotated_traces.trace_id
    where traces.partition_date between $start_date and $end_date
),

trace_counts as (
    select
        partition_date,
        variant,
        if(grouping(segment) = 1, $overall_segment, segment) as segment,
        count(*) as traces,
        count(*) filter (where is_annotated) as annotated_traces,
        count(*) filter (where by_judgments) as judged_traces
    from scoped_traces
    group by grouping sets ((partition_date, segment, variant), (partition_date, variant))
),

day_metrics as (
    select distinct
        partition_date,
        metric
    from query_metrics
    where partition_date between $start_date and $end_date
),

metric_stats as (
    select
        partition_date,
        variant,
        metric,
        if(grouping(segment) = 1, $overall_segment, segment) as segment,
        count(value) as n,
        avg(value) as mean,
        stddev_samp(value) as sd
    from query_metrics
    where
        partition_date between $start_date and $end_date
        and is_annotated
        and value is not null
    group by grouping sets (
        (partition_date, segment, variant, metric), (partition_date, variant, metric)
    )
),

grid as (
    select
        trace_counts.partition_date,
        trace_counts.segment,
        trace_counts.variant,
        trace_counts.traces,
        trace_counts.annotated_traces,
        trace_counts.judged_traces,
        day_metrics.metric
    from trace_counts
    inner join day_metrics on trace_counts.partition_date = day_metrics.partition_date
),

with_thresholds as (
    select
        grid.*,
        metric_stats.mean,
        metric_stats.sd,
        coalesce(metric_stats.n, 0) as n,
        coalesce(segment_rule.threshold, default_rule.threshold) as threshold,
        coalesce(segment_rule.min_annotated, default_rule.min_annotated, 0) as min_annotated
    from grid
    left join metric_stats
        on
            grid.partition_date = metric_stats.partition_date
            and grid.segment = metric_stats.segment
            and grid.variant = metric_stats.variant
            and grid.metric = metric_stats.metric
    left join metric_thresholds as segment_rule
        on
            grid.segment = segment_rule.segment
            and grid.metric = segment_rule.metric
    left join metric_thresholds as default_rule
        on
            default_rule.segment is null
            and grid.metric = default_rule.metric
),

interval_means as (
    select
        *,
        clamp_unit(mean) as unit_mean
    from with_thresholds
),

interval_traces as (
    select
        *,
        interval_effective_traces(n, unit_mean, sd) as effective_traces
    from interval_means
),

final as (
    select
        partition_date,
        segment,
        variant,
        metric,
        traces,
        annotated_traces,
        judged_traces,
        n,
        mean,
        threshold,
        min_annotated,
        annotated_traces / nullif(traces, 0) as coverage,
        wilson_low(unit_mean, effective_traces, $z) as ci_low,
        wilson_high(unit_mean, effective_traces, $z) as ci_high,
        case
            when threshold is null then 'no_threshold'
            when isnan(mean) then 'fail'
            when annotated_traces < min_annotated then 'insufficient'
            when mean >= threshold then 'pass'
            else 'fail'
        end as status,
        mean - threshold as margin
    from interval_traces
)

select * from final
