-- The segments, variants and metrics of a merged day whose shards' partial aggregates, less the
-- rows of the records repeated across shards, do not equal the merged `query_metrics` rows:
-- counts exactly, sums to 1e-9 relative. Empty when the shards' outputs are complete and of one
-- configuration. Input: `shard_repeated` (sql/int_shard_repeated_trace_ids.sql). Parameters:
-- $day, $partials (the shards' segment_partials files), $metric_files (their query_metrics).

with

shard_totals as (
    select
        segment,
        variant,
        metric,
        sum(n) as n,
        sum(total) as total
    from read_parquet($partials, hive_partitioning = false)
    group by segment, variant, metric
),

repeated_rows as (
    select
        shard_rows.segment,
        shard_rows.variant,
        shard_rows.metric,
        count(shard_rows.value) as n,
        coalesce(sum(shard_rows.value), 0) as total
    from read_parquet($metric_files, hive_partitioning = false) as shard_rows
    semi join shard_repeated
        on shard_rows.shard = shard_repeated.shard and shard_rows.trace_id = shard_repeated.trace_id
    group by shard_rows.segment, shard_rows.variant, shard_rows.metric
),

expected as (
    select
        shard_totals.segment,
        shard_totals.variant,
        shard_totals.metric,
        shard_totals.n - coalesce(repeated_rows.n, 0) as n,
        shard_totals.total - coalesce(repeated_rows.total, 0) as total
    from shard_totals
    left join repeated_rows
        on
            shard_totals.segment = repeated_rows.segment
            and shard_totals.variant = repeated_rows.variant
            and shard_totals.metric = repeated_rows.metric
),

merged as (
    select
        segment,
        variant,
        metric,
        count(value) as n,
        coalesce(sum(value), 0) as total
    from query_metrics
    where partition_date = $day
    group by segment, variant, metric
),

final as (
    select
        coalesce(expected.segment, merged.segment) as segment,
        coalesce(expected.variant, merged.variant) as variant,
        coalesce(expected.metric, merged.metric) as metric
    from expected
    full outer join merged
        on
            expected.segment = merged.segment
            and expected.variant = merged.variant
            and expected.metric = merged.metric
    where
        coalesce(expected.n, 0) <> coalesce(merged.n, 0)
        or abs(coalesce(expected.total, 0) - coalesce(merged.total, 0))
        > 1e-9 * greatest(1, abs(coalesce(merged.total, 0)))
)

select * from final
