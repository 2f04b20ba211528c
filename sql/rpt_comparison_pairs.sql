-- The paired queries of a comparison window for one metric ($metric), as
-- `comparison.PairedDifferences` takes them: per segment (and over every segment, segment =
-- overall_segment()), the number of queries that both arms served with a value for the metric,
-- both arms' means over them, and the list of their differences candidate - control (in no
-- particular order: the statistics sort them). A query's traces are averaged per arm first; an
-- unannotated trace (value null) or a NaN value counts in no mean; the overall row averages a
-- query's traces across segments. Control $control, candidate $candidate; partitions
-- $start_date..$end_date (inclusive). One metric per statement: the per-query hash tables are a
-- fifth of the size of all metrics' at once, which at a million traces made the five statements
-- faster than one.

with

-- only valued rows: an unannotated trace counts in no mean, and a query without values in both
-- arms is no pair, so the null rows need not be grouped (about a tenth fewer rows to hash)
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
        and metric = $metric
        and value is not null
        and not isnan(value)
),

-- sums and counts rather than means, so the overall row can pool a query's segments
segment_queries as (
    select
        segment,
        query_id,
        metric,
        sum(value) filter (where variant = $control) as control_sum,
        count(value) filter (where variant = $control) as control_values,
        sum(value) filter (where variant = $candidate) as candidate_sum,
        count(value) filter (where variant = $candidate) as candidate_values
    from window_metrics
    group by segment, query_id, metric
),

overall_queries as (
    select
        query_id,
        metric,
        overall_segment() as segment,
        sum(control_sum) as control_sum,
        sum(control_values) as control_values,
        sum(candidate_sum) as candidate_sum,
        sum(candidate_values) as candidate_values
    from segment_queries
    group by query_id, metric
),

query_means as (
    select
        segment,
        metric,
        control_sum / control_values as control_mean,
        candidate_sum / candidate_values as candidate_mean
    from segment_queries
    where control_values > 0 and candidate_values > 0
    union all
    select
        segment,
        metric,
        control_sum / control_values as control_mean,
        candidate_sum / candidate_values as candidate_mean
    from overall_queries
    where control_values > 0 and candidate_values > 0
),

final as (
    select
        segment,
        metric,
        count(*) as pairs,
        avg(control_mean) as control_mean,
        avg(candidate_mean) as candidate_mean,
        list(candidate_mean - control_mean) as differences
    from query_means
    group by segment, metric
)

select * from final
order by segment, metric
