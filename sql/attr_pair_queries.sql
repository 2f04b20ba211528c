-- Why the candidate is worse than control in the nightly's comparison: per worse cell (the
-- registered relation why_cells: segment, metric; segment overall_segment() is every segment)
-- the paired queries of the window $start_date..$end_date (inclusive) as
-- sql/rpt_comparison_pairs.sql pairs them: each arm's annotated values of a query averaged
-- (a NaN or null value counts in no mean), a query paired when both arms have one. A query's
-- contribution is (candidate_mean - control_mean) / pairs, so a cell's contributions add up to
-- its delta exactly; at most $top queries per cell come back, ranked by contribution in the
-- delta's direction (the most negative first for a drop), ties by query id; `place` is the
-- rank, 1 first. Control $control, candidate $candidate.

with

cells as (
    select distinct
        segment,
        metric
    from why_cells
),

window_metrics as (
    select
        segment,
        query_id,
        variant,
        metric,
        value
    from query_metrics
    where
        partition_date between $start_date and $end_date
        and variant in ($control, $candidate)
        and metric in (select cells.metric from cells)
        and value is not null
        and not isnan(value)
),

per_query as (
    select
        cells.segment,
        cells.metric,
        window_metrics.query_id,
        sum(window_metrics.value) filter (
            where window_metrics.variant = $control
        ) as control_sum,
        count(window_metrics.value) filter (
            where window_metrics.variant = $control
        ) as control_values,
        sum(window_metrics.value) filter (
            where window_metrics.variant = $candidate
        ) as candidate_sum,
        count(window_metrics.value) filter (
            where window_metrics.variant = $candidate
        ) as candidate_values
    from window_metrics
    inner join cells
        on
            window_metrics.metric = cells.metric
            and (cells.segment = overall_segment() or window_metrics.segment = cells.segment)
    group by cells.segment, cells.metric, window_metrics.query_id
),

paired as (
    select
        segment,
        metric,
        query_id,
        control_values,
        candidate_values,
        control_sum / control_values as control_mean,
        candidate_sum / candidate_values as candidate_mean
    from per_query
    where control_values > 0 and candidate_values > 0
),

totals as (
    select
        segment,
        metric,
        count(*) as pairs,
        avg(control_mean) as control_value,
        avg(candidate_mean) as candidate_value
    from paired
    group by segment, metric
),

ranked as (
    select
        paired.*,
        totals.pairs,
        totals.control_value,
        totals.candidate_value,
        (paired.candidate_mean - paired.control_mean) / totals.pairs as contribution,
        row_number() over (
            partition by paired.segment, paired.metric
            order by
                sign(totals.candidate_value - totals.control_value)
                * (paired.candidate_mean - paired.control_mean) desc,
                paired.query_id asc
        ) as place
    from paired
    inner join totals
        on
            paired.segment = totals.segment
            and paired.metric = totals.metric
),

final as (
    select *
    from ranked
    where place <= $top
)

select * from final
order by segment, metric, place
