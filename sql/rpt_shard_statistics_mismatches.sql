-- The segments, variants and metrics of merged day $day whose pooled segment_statistics (the
-- shards', sql/agg_shard_segment_statistics.sql) differ from `merged_statistics`, those of the
-- merged rows (sql/agg_segment_statistics.sql): any count, or a mean or standard deviation by
-- more than 1e-9 relative, or one side without the row. Empty when the shards' outputs are
-- complete and of one configuration.

with

pooled as (
    select *
    from segment_statistics
    where partition_date = $day
),

final as (
    select
        coalesce(pooled.segment, merged_statistics.segment) as segment,
        coalesce(pooled.variant, merged_statistics.variant) as variant,
        coalesce(pooled.metric, merged_statistics.metric) as metric
    from pooled
    full outer join merged_statistics
        on
            pooled.segment = merged_statistics.segment
            and pooled.variant = merged_statistics.variant
            and pooled.metric = merged_statistics.metric
    where
        pooled.segment is null
        or merged_statistics.segment is null
        or pooled.traces <> merged_statistics.traces
        or pooled.annotated_traces <> merged_statistics.annotated_traces
        or pooled.judged_traces <> merged_statistics.judged_traces
        or pooled.n_values <> merged_statistics.n_values
        or pooled.not_a_number <> merged_statistics.not_a_number
        or (pooled.mean is null) <> (merged_statistics.mean is null)
        or (pooled.sd is null) <> (merged_statistics.sd is null)
        or abs(pooled.mean - merged_statistics.mean)
        > 1e-9 * greatest(1, abs(merged_statistics.mean))
        or abs(pooled.sd - merged_statistics.sd)
        > 1e-9 * greatest(1, abs(merged_statistics.sd))
)

select * from final
order by segment, variant, metric
