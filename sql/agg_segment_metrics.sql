-- Per partition, segment and variant, plus one overall row per variant (segment =
-- overall_segment(), every segment of that variant pooled): traces, annotated traces
-- (judged_traces of them labelled by the judgments, the others by labels of their own),
-- annotation coverage, and for every metric in query_metrics (one row per metric) its mean over
-- the annotated traces with a 95% confidence interval, its threshold and its status.
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
-- Parameters: $start_date, $end_date (partitions, inclusive), $z (the interval's normal quantile,
-- 1.96 for 95%).

with

-- the statistics of the partitions' traces and values (sql/agg_segment_statistics.sql, or the
-- shards' pooled by the merge); a NaN value makes the mean and the deviation NaN, as a mean over
-- the values themselves would be
statistics as (
    select
        partition_date,
        segment,
        variant,
        metric,
        traces,
        annotated_traces,
        judged_traces,
        n_values + not_a_number as n,
        if(not_a_number > 0, 'NaN'::double, mean) as mean,
        if(not_a_number > 0, 'NaN'::double, sd) as sd
    from segment_statistics
    where partition_date between $start_date and $end_date
),

with_thresholds as (
    select
        statistics.*,
        coalesce(segment_rule.threshold, default_rule.threshold) as threshold,
        coalesce(segment_rule.min_annotated, default_rule.min_annotated, 0) as min_annotated
    from statistics
    left join metric_thresholds as segment_rule
        on
            statistics.segment = segment_rule.segment
            and statistics.metric = segment_rule.metric
    left join metric_thresholds as default_rule
        on
            default_rule.segment is null
            and statistics.metric = default_rule.metric
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
