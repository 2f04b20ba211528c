-- One partition's segment metrics against a baseline window: per segment, variant and metric the
-- mean (the day's value), the baseline (the pooled mean over the window's annotated traces, i.e.
-- the day means weighted by their trace counts), delta = mean - baseline, and the day's
-- threshold, minimum of annotated traces, status and margin from segment_metrics, with its
-- annotated traces (judged_traces of them labelled by the judgments).
--
-- Days of the window without segment_metrics rows, or whose mean is missing or NaN (a score that
-- could not be computed), are simply absent: baseline_days says how many contributed; no
-- contributing day gives a null baseline and delta. Parameters: $day, $baseline_start,
-- $baseline_end (inclusive).

with

current_day as (
    select *
    from segment_metrics
    where partition_date = $day
),

baseline_window as (
    select
        segment,
        variant,
        metric,
        cast(sum(n) as bigint) as baseline_n,
        count(distinct partition_date) as baseline_days,
        sum(mean * n) / nullif(sum(n), 0) as baseline
    from segment_metrics
    where
        partition_date between $baseline_start and $baseline_end
        and not isnan(mean)
    group by segment, variant, metric
),

final as (
    select
        current_day.partition_date,
        current_day.segment,
        current_day.variant,
        current_day.metric,
        current_day.traces,
        current_day.annotated_traces,
        current_day.judged_traces,
        current_day.coverage,
        current_day.n,
        current_day.mean,
        -- a day scored before the bounded interval (docs/intervals.md) may hold a normal
        -- interval past [0, 1]: shown clipped (clamp_unit, sql/macros_intervals.sql)
        clamp_unit(current_day.ci_low) as ci_low,
        clamp_unit(current_day.ci_high) as ci_high,
        baseline_window.baseline,
        current_day.threshold,
        current_day.min_annotated,
        current_day.status,
        current_day.margin,
        current_day.mean - baseline_window.baseline as delta,
        coalesce(baseline_window.baseline_n, 0) as baseline_n,
        coalesce(baseline_window.baseline_days, 0) as baseline_days
    from current_day
    left join baseline_window
        on
            current_day.segment = baseline_window.segment
            and current_day.variant = baseline_window.variant
            and current_day.metric = baseline_window.metric
)

select * from final
