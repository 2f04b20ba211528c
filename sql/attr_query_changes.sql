-- Why a segment's mean moved: per finding (segment, variant, metric: the registered relation
-- why_findings; segment $overall_segment is every segment of the variant) and per query, the
-- day's and the baseline window's annotated traces and mean, each query's share of its side's
-- traces, and an exact split of the change (docs/why.md):
--   change = day mean - baseline mean = sum over queries of within + mix + new_part, where, with
--   s = a query's share of its side's scored traces, m its mean there, B the baseline mean,
--   within   = s_day * (m_day - m_base)                   (a recurring query: on both sides)
--   mix      = (s_day - s_base) * (m_base - B)            (recurring) or -s_base * (m_base - B)
--              (gone: in the baseline only): more of a query that is hard (m_base < B) lowers it
--   new_part = s_day * (m_day - B)                        (new: on the day only)
-- The terms add up because the shares sum to 1 on each side: sum (s_day - s_base) * B = 0.
-- Scored traces are those query_metrics scores (annotated, value not null and not NaN), the ones
-- whose mean the report shows; the baseline pools the window's traces, as rpt_regression does.
-- Parameters: $day, $baseline_start, $baseline_end (inclusive), $overall_segment.

with

findings as (
    select distinct
        segment,
        variant,
        metric
    from why_findings
),

scored as (
    select
        findings.segment,
        findings.variant,
        findings.metric,
        query_metrics.query_id,
        query_metrics.value,
        query_metrics.partition_date = $day as on_day,
        query_metrics.partition_date between $baseline_start and $baseline_end as in_baseline
    from query_metrics
    inner join findings
        on
            query_metrics.variant = findings.variant
            and query_metrics.metric = findings.metric
            and (
                findings.segment = $overall_segment
                or query_metrics.segment = findings.segment
            )
    where
        (
            query_metrics.partition_date = $day
            or query_metrics.partition_date between $baseline_start and $baseline_end
        )
        and query_metrics.is_annotated
        and query_metrics.value is not null
        and not isnan(query_metrics.value)
),

per_query as (
    select
        segment,
        variant,
        metric,
        query_id,
        count(*) filter (where on_day) as day_traces,
        avg(value) filter (where on_day) as day_mean,
        count(*) filter (where in_baseline) as base_traces,
        avg(value) filter (where in_baseline) as base_mean
    from scored
    group by segment, variant, metric, query_id
),

totals as (
    select
        segment,
        variant,
        metric,
        sum(day_traces) as day_total,
        sum(base_traces) as base_total,
        sum(day_mean * day_traces) filter (where day_traces > 0)
        / nullif(sum(day_traces), 0) as day_value,
        sum(base_mean * base_traces) filter (where base_traces > 0)
        / nullif(sum(base_traces), 0) as base_value
    from per_query
    group by segment, variant, metric
),

shares as (
    select
        per_query.*,
        totals.day_value,
        totals.base_value,
        per_query.day_traces / nullif(totals.day_total, 0) as day_share,
        per_query.base_traces / nullif(totals.base_total, 0) as base_share,
        case
            when per_query.day_traces > 0 and per_query.base_traces > 0 then 'recurring'
            when per_query.day_traces > 0 then 'new'
            else 'gone'
        end as kind
    from per_query
    inner join totals
        on
            per_query.segment = totals.segment
            and per_query.variant = totals.variant
            and per_query.metric = totals.metric
),

final as (
    select
        segment,
        variant,
        metric,
        query_id,
        kind,
        day_traces,
        day_mean,
        base_traces,
        base_mean,
        day_share,
        base_share,
        day_value,
        base_value,
        case when kind = 'recurring' then day_share * (day_mean - base_mean) else 0 end as within,
        case
            when kind = 'recurring' then (day_share - base_share) * (base_mean - base_value)
            when kind = 'gone' then -base_share * (base_mean - base_value)
            else 0
        end as mix,
        case when kind = 'new' then day_share * (day_mean - base_value) else 0 end as new_part
    from shares
)

select * from final
