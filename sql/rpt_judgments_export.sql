-- The warehouse's judgments as a judgments file holds them (warehouse.shards.export_judgments):
-- what the `judgments` asset loaded, for the shards of a day to label their traces with exactly
-- that, in databases of their own.

with

final as (
    select
        query_id,
        doc_id,
        grade,
        judged_at,
        label_source
    from judgments
)

select * from final
order by query_id, doc_id
