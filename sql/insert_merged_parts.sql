-- A merged day's rows of each table in $tables are those of merge $run's Parquet files beside the
-- warehouse (retrieval_pipeline/warehouse/merged_days.py), dated $day.
insert into merged_parts by name
with

final as (
    select
        unnest(cast($tables as varchar[])) as table_name,
        cast($day as date) as partition_date,
        cast($run as varchar) as run
)

select * from final
