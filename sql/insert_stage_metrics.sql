-- A day's stage means (the registered relation `stg_stage_metrics`, computed by
-- retrieval_pipeline.ab.stages.stage_means) into `stage_metrics`, dated $partition_date.
insert into stage_metrics by name
with

final as (
    select
        cast($partition_date as date) as partition_date,
        stage,
        segment,
        variant,
        metric,
        traces,
        annotated_traces,
        mean
    from stg_stage_metrics
)

select * from final
