-- Why a segment's mean moved: per finding (segment, variant, metric: the registered relation
-- why_findings; segment overall_segment() is every segment of the variant) and per query, the
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
-- Parameters: $day, $baseline_start, $baseline_end (inclusive).

with

findings as (
    select distinct
        segment,
        variant,
        metric
    from why_findings
),

-- one pass over query_metrics: counts and sums per segment, variant, metric and query of the
-- findings' variants and metrics; an overall finding then adds up its variant's segments (so
-- no trace is aggregated twice)
per_segment as (
    select
        segment,
        variant,
        metric,
        query_id,
        count(*) filter (where partition_date = $day) as day_traces,
        sum(value) filter (where partition_date = $day) as day_sum,
        count(*) filter (
            where partition_date between $baseline_start and $baseline_end
        ) as base_traces,
        sum(value) filter (
            where partition_date between $baseline_start and $baseline_end
        ) as base_sum
    from query_metrics
    where
        (
            partition_date = $day
            or partition_date between $baseline_start and $baseline_end
        )
        -- two filters on single columns (the join below keeps the findings' pairs), which
        -- DuckDB applies while it scans
        and variant in (select findings.variant from findings)
        and metric in (select findings.metric from findings)
        and is_annotated
        and value is not null
        and not isnan(value)
    group by segment, variant, metric, query_id
),

per_query as (
    select
        findings.segment,
        findings.variant,
        findings.metric,
        per_segment.query_id,
        sum(per_segment.day_traces) as day_traces,
        sum(per_segment.day_sum) / nullif(sum(per_segment.day_traces), 0) as day_mean,
        sum(per_segment.base_traces) as base_traces,
        sum(per_segment.base_sum) / nullif(sum(per_segment.base_traces), 0) as base_mean
    from per_segment
    inner join findings
        on
            per_segment.variant = findings.variant
            and per_segment.metric = findings.metric
            and (
                findings.segment = overall_segment()
                or per_segment.segment = findings.segment
            )
    group by findings.segment, findings.variant, findings.metric, per_segment.query_id
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
