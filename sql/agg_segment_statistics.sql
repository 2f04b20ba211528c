-- What sql/agg_segment_metrics.sql reads, per partition, segment and variant, plus one overall row
-- per variant (segment = overall_segment(), every segment of that variant pooled), for every
-- metric the partition scored: its traces, annotated traces and those of them labelled by the
-- judgments; and of the metric's annotated values, those that are numbers (n_values, their mean
-- and sample standard deviation) and the NaN ones (not_a_number: a score that could not be
-- computed), kept apart so that these rows add up. Sufficient statistics: the shards of a day
-- write them, and the merge pools them (sql/agg_shard_segment_statistics.sql) instead of reading
-- the day's rows again. Rows of partitions $start_date..$end_date (inclusive) that have
-- query_metrics rows and no statistics (shards = 0: from the rows; a sharded day keeps its pooled
-- ones until its query_metrics rows are written again, warehouse.steps.compute_query_metrics).

with

missing_days as (
    select distinct partition_date
    from query_metrics
    where
        partition_date between $start_date and $end_date
        and partition_date not in (
            select partition_date
            from segment_statistics
            where partition_date between $start_date and $end_date
        )
),

-- a day's rows are written by one statement that crosses every trace with the same metrics, so
-- each trace has one row of each metric and the same is_annotated in all: its annotated traces
-- are read through one metric's rows (a distinct over every metric's took longer)
first_metrics as (
    select
        partition_date,
        min(metric) as metric
    from query_metrics
    where partition_date in (select partition_date from missing_days)
    group by partition_date
),

annotated_traces as (
    select
        query_metrics.partition_date,
        query_metrics.trace_id
    from query_metrics
    inner join first_metrics
        on
            query_metrics.partition_date = first_metrics.partition_date
            and query_metrics.metric = first_metrics.metric
    where query_metrics.is_annotated
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
    where traces.partition_date in (select partition_date from missing_days)
),

trace_counts as (
    select
        partition_date,
        variant,
        if(grouping(segment) = 1, overall_segment(), segment) as segment,
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
    where partition_date in (select partition_date from missing_days)
),

metric_stats as (
    select
        partition_date,
        variant,
        metric,
        if(grouping(segment) = 1, overall_segment(), segment) as segment,
        count(value) filter (where not isnan(value)) as n_values,
        avg(value) filter (where not isnan(value)) as mean,
        stddev_samp(value) filter (where not isnan(value)) as sd,
        count(value) filter (where isnan(value)) as not_a_number
    from query_metrics
    where
        partition_date in (select partition_date from missing_days)
        and is_annotated
        and value is not null
    group by grouping sets (
        (partition_date, segment, variant, metric), (partition_date, variant, metric)
    )
),

final as (
    select
        trace_counts.partition_date,
        trace_counts.segment,
        trace_counts.variant,
        day_metrics.metric,
        trace_counts.traces,
        trace_counts.annotated_traces,
        trace_counts.judged_traces,
        coalesce(metric_stats.n_values, 0) as n_values,
        metric_stats.mean,
        metric_stats.sd,
        coalesce(metric_stats.not_a_number, 0) as not_a_number,
        0 as shards
    from trace_counts
    inner join day_metrics on trace_counts.partition_date = day_metrics.partition_date
    left join metric_stats
        on
            trace_counts.partition_date = metric_stats.partition_date
            and trace_counts.segment = metric_stats.segment
            and trace_counts.variant = metric_stats.variant
            and day_metrics.metric = metric_stats.metric
)

select * from final
