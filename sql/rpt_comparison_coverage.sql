-- Who served what in a comparison window, as `comparison.SegmentCoverage` counts it: per segment
-- and over every segment (segment = overall_segment()), each arm's traces and annotated traces
-- (with values), and its queries: served, paired (a value in both arms), served by both but not
-- paired, served by one arm only. The overall row counts a query once across segments. Control
-- $control, candidate $candidate; partitions $start_date..$end_date (inclusive), day
-- $coverage_days[i] read through its rows of $coverage_metrics[i] (one of the compared metrics).

with

-- one row per trace: a day's rows are written by one statement that crosses every trace with the
-- same metrics (engine.compute_query_metrics), so its rows of one metric are its traces, one each
-- (grouping every metric's rows by trace took three times as long); a trace's value is null for
-- every metric (unannotated) or for none
coverage_metric as (
    select
        unnest($coverage_days::date[]) as partition_date,
        unnest($coverage_metrics::varchar[]) as metric
),

trace_rows as (
    select
        query_metrics.segment,
        query_metrics.variant,
        query_metrics.query_id,
        -- a NaN value is no value (sql/rpt_comparison_window.sql counts it apart)
        query_metrics.value is not null and not isnan(query_metrics.value) as is_annotated
    from query_metrics
    inner join coverage_metric
        on
            query_metrics.partition_date = coverage_metric.partition_date
            and query_metrics.metric = coverage_metric.metric
    where
        query_metrics.partition_date between $start_date and $end_date
        and query_metrics.variant in ($control, $candidate)
),

trace_counts as (
    select
        if(grouping(segment) = 1, overall_segment(), segment) as segment,
        count(*) filter (where variant = $control) as control_traces,
        count(*) filter (where variant = $candidate) as candidate_traces,
        count(*) filter (
            where variant = $control and is_annotated
        ) as control_annotated_traces,
        count(*) filter (
            where variant = $candidate and is_annotated
        ) as candidate_annotated_traces
    from trace_rows
    group by grouping sets ((segment), ())
),

query_arms as (
    select
        query_id,
        if(grouping(segment) = 1, overall_segment(), segment) as segment,
        bool_or(variant = $control) as control_served,
        bool_or(variant = $candidate) as candidate_served,
        bool_or(variant = $control and is_annotated) as control_valued,
        bool_or(variant = $candidate and is_annotated) as candidate_valued
    from trace_rows
    group by grouping sets ((segment, query_id), (query_id))
),

query_counts as (
    select
        segment,
        count(*) filter (where control_served) as control_queries,
        count(*) filter (where candidate_served) as candidate_queries,
        count(*) filter (where control_valued and candidate_valued) as paired,
        count(*) filter (
            where
            control_served and candidate_served
            and not (control_valued and candidate_valued)
        ) as shared_unpaired,
        count(*) filter (where control_served and not candidate_served) as control_only,
        count(*) filter (where candidate_served and not control_served) as candidate_only
    from query_arms
    group by segment
),

final as (
    select
        trace_counts.segment,
        trace_counts.control_traces,
        trace_counts.candidate_traces,
        trace_counts.control_annotated_traces,
        trace_counts.candidate_annotated_traces,
        query_counts.control_queries,
        query_counts.candidate_queries,
        query_counts.paired,
        query_counts.shared_unpaired,
        query_counts.control_only,
        query_counts.candidate_only
    from trace_counts
    inner join query_counts on trace_counts.segment = query_counts.segment
)

select * from final
order by segment
