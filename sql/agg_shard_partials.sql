-- A shard's partial aggregates of its day's metric values, per segment, variant and metric:
-- annotated values, their sum and sum of squares, smallest and largest. They add up over shards
-- (mean = sum / n; variance = (sum of squares - sum^2 / n) / (n - 1)); the merge checks them
-- against the merged rows. Parameter: $day.

with

final as (
    select
        partition_date,
        segment,
        variant,
        metric,
        count(value) as n,
        coalesce(sum(value), 0) as total,
        coalesce(sum(value * value), 0) as total_of_squares,
        min(value) as low,
        max(value) as high
    from query_metrics
    where partition_date = $day
    group by partition_date, segment, variant, metric
)

select * from final
