-- A day's per-span stage values (the registered relation `stg_stage_queries`, computed by
-- retrieval_pipeline.ab.stages.stage_query_rows) into `stage_query_metrics`, dated
-- $partition_date.

with

final as (
    select
        cast($partition_date as date) as partition_date,
        span_id,
        query_id,
        segment,
        variant,
        metric,
        input_value,
        output_value
    from stg_stage_queries
)

select * from final
