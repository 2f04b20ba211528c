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

-- each part beside its group's reference: the smallest mean of the parts with values
referenced_parts as (
    select
        *,
        min(mean) filter (where n_values > 0) over (
            partition by segment, variant, metric
        ) as reference
    from parts
),

pooled_sums as (
    select
        segment,
        variant,
        metric,
        sum(traces) as traces,
        sum(annotated_traces) as annotated_traces,
        sum(judged_traces) as judged_traces,
        sum(n_values) as n_values,
        sum(not_a_number) as not_a_number,
        any_value(reference) as reference,
        sum(n_values * (mean - reference)) filter (where n_values <> 0) as offset_sum
    from referenced_parts
    group by segment, variant, metric
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
