-- A sharded day's segment_statistics, pooled from its shards' own (each the statistics of its rows,
-- sql/agg_segment_statistics.sql) less those of the records repeated across shards
-- (`shard_repeated_statistics`, sql/agg_shard_repeated_statistics.sql): what one process would
-- compute from the merged rows, without reading them. Counts add up. Means and deviations pool
-- exactly (Chan et al.): with n_i values of mean m_i and sum of squared deviations
-- M2_i = sd_i^2 (n_i - 1) in part i, the pooled mean is m = sum n_i m_i / n over n = sum n_i, and
-- M2 = sum (M2_i + n_i (m_i - m)^2), which does not cancel as sums of squares would. A part taken
-- back out enters with its count and M2 negated: the same identities hold. The mean is computed
-- as an offset from the parts' smallest mean, so parts of one mean pool to it exactly.
-- Rows left without traces (a segment or variant only a repeated record had) are dropped.
-- Parameters: $day, $statistics (the shards' segment_statistics Parquet files), $shards (how many).

with

parts as (
    select
        segment,
        variant,
        metric,
        traces,
        annotated_traces,
        judged_traces,
        n_values,
        mean,
        sd,
        not_a_number
    from read_parquet($statistics, hive_partitioning = false)
    union all
    select
        segment,
        variant,
        metric,
        -traces as traces,
        -annotated_traces as annotated_traces,
        -judged_traces as judged_traces,
        -n_values as n_values,
        mean,
        sd,
        -not_a_number as not_a_number
    from shard_repeated_statistics
),

mean_references as (
    select
        segment,
        variant,
        metric,
        min(mean) filter (where n_values > 0) as reference
    from parts
    group by segment, variant, metric
),

pooled_sums as (
    select
        parts.segment,
        parts.variant,
        parts.metric,
        sum(parts.traces) as traces,
        sum(parts.annotated_traces) as annotated_traces,
        sum(parts.judged_traces) as judged_traces,
        sum(parts.n_values) as n_values,
        sum(parts.not_a_number) as not_a_number,
        any_value(mean_references.reference) as reference,
        sum(parts.n_values * (parts.mean - mean_references.reference))
        filter (where parts.n_values <> 0) as offset_sum
    from parts
    inner join mean_references
        on
            parts.segment = mean_references.segment
            and parts.variant = mean_references.variant
            and parts.metric = mean_references.metric
    group by parts.segment, parts.variant, parts.metric
),

pooled as (
    select
        segment,
        variant,
        metric,
        traces,
        annotated_traces,
        judged_traces,
        n_values,
        not_a_number,
        if(n_values > 0, reference + offset_sum / n_values, null) as mean
    from pooled_sums
),

squared_deviations as (
    select
        pooled.segment,
        pooled.variant,
        pooled.metric,
        sum(
            sign(parts.n_values) * pow(coalesce(parts.sd, 0), 2) * (abs(parts.n_values) - 1)
            + parts.n_values * pow(parts.mean - pooled.mean, 2)
        ) as m2
    from pooled
    inner join parts
        on
            pooled.segment = parts.segment
            and pooled.variant = parts.variant
            and pooled.metric = parts.metric
    where parts.n_values <> 0 and pooled.n_values > 0
    group by pooled.segment, pooled.variant, pooled.metric
),

final as (
    select
        $day::date as partition_date,
        pooled.segment,
        pooled.variant,
        pooled.metric,
        pooled.traces,
        pooled.annotated_traces,
        pooled.judged_traces,
        pooled.n_values,
        pooled.mean,
        case
            when pooled.n_values >= 2
                then sqrt(greatest(squared_deviations.m2, 0) / (pooled.n_values - 1))
        end as sd,
        pooled.not_a_number,
        $shards::integer as shards
    from pooled
    left join squared_deviations
        on
            pooled.segment = squared_deviations.segment
            and pooled.variant = squared_deviations.variant
            and pooled.metric = squared_deviations.metric
    where pooled.traces > 0
)

select * from final
