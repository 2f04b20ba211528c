-- A day's HUMAN/LLM grade pairs (the registered relation `stg_label_agreement`, counted while
-- the day's Phoenix spans were labelled) as rows of `label_agreement`, dated $partition_date.
with

final as (
    select
        cast($partition_date as date) as partition_date,
        segment,
        human_grade,
        llm_grade,
        documents
    from stg_label_agreement
)

select * from final
