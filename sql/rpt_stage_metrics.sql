-- The stored stage means of the days [$start_date, $end_date] (sql/schema.sql: stage_metrics).
with

final as (
    select
        partition_date,
        stage,
        segment,
        variant,
        metric,
        traces,
        annotated_traces,
        mean
    from stage_metrics
    where partition_date between $start_date and $end_date
)

select * from final
order by partition_date, stage, segment, variant, metric
