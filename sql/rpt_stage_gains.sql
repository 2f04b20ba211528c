-- The stored reranker gains of the days [$start_date, $end_date] (sql/schema.sql: stage_gains).
with

final as (
    select
        partition_date,
        segment,
        metric,
        pairs,
        input_mean,
        output_mean,
        gain,
        ci_low,
        ci_high,
        ci_method
    from stage_gains
    where partition_date between $start_date and $end_date
)

select * from final
order by partition_date, segment, metric
