-- A day's segment_statistics rows (sql/agg_segment_statistics.sql), as a shard hands them to the
-- merge. Parameter: $day.

with

final as (
    select *
    from segment_statistics
    where partition_date = $day
)

select * from final
