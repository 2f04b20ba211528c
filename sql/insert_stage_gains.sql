-- A day's reranker gains (the registered relation `stg_stage_gains`, from
-- retrieval_pipeline.ab.stages.gains_frame) into `stage_gains`, dated $partition_date.
insert into stage_gains by name
with

final as (
    select
        cast($partition_date as date) as partition_date,
        segment,
        metric,
        pairs,
        input_mean,
        output_mean,
        gain,
        ci_low,
        ci_high,
        ci_method
    from stg_stage_gains
)

select * from final
