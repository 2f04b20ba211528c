-- Why a reranker stage finding moved: per finding (the registered relation why_stage_findings:
-- segment, variant, metric; segment overall_segment() is every segment, variant $every_variant
-- every variant) and per query, the reranker spans of $day and of the baseline window
-- $baseline_start..$baseline_end (inclusive) in stage_query_metrics: their count, the mean of
-- the reranker's input and of its output, each query's share of its side's spans, and the
-- output's change split exactly (docs/why.md, "The reranker's stages"), with s a query's share,
-- i and o its input and output means, g = o - i the reranking's gain, O_B the baseline's output:
--   first_stage = s_day * (i_day - i_base)              (recurring: the reranker's input moved)
--   reranking   = s_day * (g_day - g_base)              (recurring: what the reranker made of it)
--   mix         = (s_day - s_base) * (o_base - O_B)     (recurring), -s_base * (o_base - O_B)
--                 (gone)
--   new_part    = s_day * (o_day - O_B)                 (new: on the day only)
-- Only spans with both stages valued (not null, not NaN) are read: the gain's pairs.

with

findings as (
    select distinct
        segment,
        variant,
        metric
    from why_stage_findings
),

per_query as (
    select
        findings.segment,
        findings.variant,
        findings.metric,
        stage_query_metrics.query_id,
        count(*) filter (where stage_query_metrics.partition_date = $day) as day_spans,
        avg(stage_query_metrics.input_value) filter (
            where stage_query_metrics.partition_date = $day
        ) as day_input,
        avg(stage_query_metrics.output_value) filter (
            where stage_query_metrics.partition_date = $day
        ) as day_output,
        count(*) filter (
            where stage_query_metrics.partition_date between $baseline_start and $baseline_end
        ) as base_spans,
        avg(stage_query_metrics.input_value) filter (
            where stage_query_metrics.partition_date between $baseline_start and $baseline_end
        ) as base_input,
        avg(stage_query_metrics.output_value) filter (
            where stage_query_metrics.partition_date between $baseline_start and $baseline_end
        ) as base_output
    from stage_query_metrics
    inner join findings
        on
            stage_query_metrics.metric = findings.metric
            and (
                findings.segment = overall_segment()
                or stage_query_metrics.segment = findings.segment
            )
            and (
                findings.variant = $every_variant
                or stage_query_metrics.variant = findings.variant
            )
    where
        (
            stage_query_metrics.partition_date = $day
            or stage_query_metrics.partition_date between $baseline_start and $baseline_end
        )
        and stage_query_metrics.input_value is not null
        and not isnan(stage_query_metrics.input_value)
        and stage_query_metrics.output_value is not null
        and not isnan(stage_query_metrics.output_value)
    group by
        findings.segment, findings.variant, findings.metric, stage_query_metrics.query_id
),

totals as (
    select
        segment,
        variant,
        metric,
        sum(day_spans) as day_total,
        sum(base_spans) as base_total,
        sum(day_output * day_spans) filter (where day_spans > 0)
        / nullif(sum(day_spans), 0) as day_value,
        sum(base_output * base_spans) filter (where base_spans > 0)
        / nullif(sum(base_spans), 0) as base_value
    from per_query
    group by segment, variant, metric
),

shares as (
    select
        per_query.*,
        totals.day_value,
        totals.base_value,
        per_query.day_spans / nullif(totals.day_total, 0) as day_share,
        per_query.base_spans / nullif(totals.base_total, 0) as base_share,
        case
            when per_query.day_spans > 0 and per_query.base_spans > 0 then 'recurring'
            when per_query.day_spans > 0 then 'new'
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
        *,
        case
            when kind = 'recurring' then day_share * (day_input - base_input) else 0
        end as first_stage,
        case
            when
                kind = 'recurring'
                then day_share * ((day_output - day_input) - (base_output - base_input))
            else 0
        end as reranking,
        case
            when kind = 'recurring' then (day_share - base_share) * (base_output - base_value)
            when kind = 'gone' then -base_share * (base_output - base_value)
            else 0
        end as mix,
        case when kind = 'new' then day_share * (day_output - base_value) else 0 end as new_part
    from shares
)

select * from final
order by segment, variant, metric, query_id
