-- The HUMAN/LLM grade pairs of partition $day (sql/schema.sql: label_agreement), for kappa.
with

final as (
    select
        segment,
        human_grade,
        llm_grade,
        documents
    from label_agreement
    where partition_date = $day
)

select * from final
order by segment, human_grade, llm_grade
