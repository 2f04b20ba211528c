-- The documents named by the labels of the traces in partitions $start_date..$end_date, once
-- each: every doc_id that sql/int_labels.sql looks up in `corpus`, so that a shard loads only
-- these of the corpus snapshot (warehouse.corpus.load_needed_corpus) and its labels are marked
-- stale exactly as against the whole snapshot.

with

trace_labels as (
    -- the struct list expands into its fields, doc_id, grade and rank
    select unnest(traces.labels, recursive := true)  -- noqa: AL03
    from traces
    where traces.partition_date between $start_date and $end_date
),

final as (
    select distinct trace_labels.doc_id
    from trace_labels
    where trace_labels.doc_id is not null
)

select * from final
