-- Who served what in a comparison window, as `comparison.SegmentCoverage` counts it: per segment
-- and over every segment (segment = $overall_segment), each arm's traces and annotated traces
-- (a value for any of the metrics $metrics), and its queries: served, paired (a value in both
-- arms), served by both but not paired, served by one arm only. The overall row counts a query
-- once across segments. Control $control, candidate $candidate; partitions $start_date..
-- $end_date (inclusive).

with

-- one row per trace: its rows share segment, variant and query, so any one of them names them
-- (cheaper than grouping on all three)
trace_rows as (
    select
        partition_date,
        trace_id,
        any_value(segment) as segment,
        any_value(variant) as variant,
        any_value(query_id) as query_id,
        bool_or(value is not null) as is_annotated
    from query_metrics
    where
        partition_date between $start_date and $end_date
        and variant in ($control, $candidate)
        and list_contains($metrics, metric)
    group by partition_date, trace_id
),

trace_counts as (
    select
        if(grouping(segment) = 1, $overall_segment, segment) as segment,
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
        if(grouping(segment) = 1, $overall_segment, segment) as segment,
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
