-- What a merge leaves out with the records repeated across shards: their labels, their stale
-- labels and how many of them are annotated, so that the merged day's counts are the shards'
-- counts (their manifests) less these, without counting the day's rows again.
--
-- Input: `shard_repeated` (sql/int_shard_repeated_trace_ids.sql: shard, trace_id of each record
-- left out). Parameters: $label_files and $metric_files (the shards' labels and query_metrics
-- Parquet files, each row with its shard).
-- Output: one row: labels, stale_labels, annotated (each 0 when nothing is repeated).

with

repeated_labels as (
    select shard_rows.stale_reason
    from read_parquet($label_files, hive_partitioning = false) as shard_rows
    semi join shard_repeated
        on shard_rows.shard = shard_repeated.shard and shard_rows.trace_id = shard_repeated.trace_id
),

-- a trace's metrics share its annotation: one row each, any metric
repeated_traces as (
    select distinct
        shard_rows.shard,
        shard_rows.trace_id,
        shard_rows.is_annotated
    from read_parquet($metric_files, hive_partitioning = false) as shard_rows
    semi join shard_repeated
        on shard_rows.shard = shard_repeated.shard and shard_rows.trace_id = shard_repeated.trace_id
),

final as (
    select
        (select count(*) from repeated_labels) as labels,
        (
            select count(*) from repeated_labels
            where stale_reason is not null
        ) as stale_labels,
        (
            select count(*) from repeated_traces
            where is_annotated
        ) as annotated
)

select * from final
