-- Label counts for partitions $start_date..$end_date where no label can be stale (no corpus
-- snapshot): every label the traces carry, none stale, no trace that lost any; the counts that
-- sql/agg_label_counts.sql gives over the labels sql/int_labels.sql would write for them.

with

final as (
    select
        coalesce(sum(len(labels)), 0) as labels,
        0 as stale_labels,
        0 as traces_with_stale
    from traces
    where partition_date between $start_date and $end_date
)

select * from final
