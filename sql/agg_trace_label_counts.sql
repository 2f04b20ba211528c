-- Label counts for partitions $start_date..$end_date whose `labels` hold the stale labels only
-- (sql/int_labels.sql with $stale_only): every label the traces carry, the stale ones and the
-- traces that lost any; the counts sql/agg_label_counts.sql gives over every label.

with

stale as (
    select
        count(stale_reason) as stale_labels,
        count(distinct trace_id) filter (where stale_reason is not null) as traces_with_stale
    from labels
    where partition_date between $start_date and $end_date
),

final as (
    select
        (
            select coalesce(sum(len(traces.labels)), 0) from traces
            where traces.partition_date between $start_date and $end_date
        ) as labels,
        stale.stale_labels,
        stale.traces_with_stale
    from stale
)

select * from final
