-- A shard's partial aggregates per query: per segment, query, variant and metric, the annotated
-- values and their sum, what the A/B comparison's pairs are built from (a query served in several
-- shards adds up to one query). Parameter: $day.

with

final as (
    select
        partition_date,
        segment,
        query_id,
        variant,
        metric,
        count(value) as n,
        coalesce(sum(value), 0) as total
    from query_metrics
    where partition_date = $day
    group by partition_date, segment, query_id, variant, metric
)

select * from final
