-- Label counts for partitions $start_date..$end_date: all, stale, and traces that lost any.

with

final as (
    select
        count(*) as labels,
        count(*) filter (where stale_reason is not null) as stale_labels,
        count(distinct trace_id) filter (where stale_reason is not null) as traces_with_stale
    from labels
    where partition_date between $start_date and $end_date
)

select * from final
