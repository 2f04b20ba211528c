-- The statistics that the records repeated across a day's shards added to their shards'
-- segment_statistics (sql/agg_segment_statistics.sql, of the same rows): per segment (and
-- overall, segment = overall_segment()) and variant, for each metric, the repeated traces, how
-- many are annotated and labelled by the judgments, and their annotated values' count, mean,
-- sample standard deviation and NaN count. The merge takes them back out of the pooled statistics
-- (sql/agg_shard_segment_statistics.sql), as it leaves their rows out.
--
-- Input: `shard_repeated` (sql/int_shard_repeated_trace_ids.sql: shard, trace_id of each record
-- left out). Parameters: $trace_files and $metric_files (the shards' traces and query_metrics
-- Parquet files, each row with its shard). Read only when a record repeats.

with

repeated_traces as (
    select
        shard_rows.shard,
        shard_rows.trace_id,
        shard_rows.is_judged
    from read_parquet($trace_files, hive_partitioning = false) as shard_rows
    semi join shard_repeated
        on shard_rows.shard = shard_repeated.shard and shard_rows.trace_id = shard_repeated.trace_id
),

-- one row per repeated trace and metric: a day's rows cross every trace with the same metrics
repeated_rows as (
    select
        shard_rows.segment,
        shard_rows.variant,
        shard_rows.metric,
        shard_rows.is_annotated,
        shard_rows.is_annotated and not repeated_traces.is_judged as by_judgments,
        if(shard_rows.is_annotated, shard_rows.value, null) as value
    from read_parquet($metric_files, hive_partitioning = false) as shard_rows
    inner join repeated_traces
        on
            shard_rows.shard = repeated_traces.shard
            and shard_rows.trace_id = repeated_traces.trace_id
),

final as (
    select
        if(grouping(segment) = 1, overall_segment(), segment) as segment,
        variant,
        metric,
        count(*) as traces,
        count(*) filter (where is_annotated) as annotated_traces,
        count(*) filter (where by_judgments) as judged_traces,
        count(value) filter (where not isnan(value)) as n_values,
        avg(value) filter (where not isnan(value)) as mean,
        stddev_samp(value) filter (where not isnan(value)) as sd,
        count(value) filter (where isnan(value)) as not_a_number
    from repeated_rows
    group by grouping sets ((segment, variant, metric), (variant, metric))
)

select * from final
