-- Labels of the traces in partitions $start_date..$end_date, each marked fresh or stale.
--
-- A label is stale when its document is not in the corpus snapshot, was deleted at or before the
-- trace's timestamp, or was added after it; stale labels are kept here with their reason but never
-- used for scoring, so recall is not falsely low. With $use_corpus false (no snapshot given)
-- every label is fresh. Retrieved ids are never filtered: they are what production returned.
-- With $stale_only, only the stale labels (a private evaluation's: the metrics and the per-trace
-- table read the stale ones only, and sql/agg_trace_label_counts.sql counts the rest in place).

with

trace_labels as (
    select
        traces.partition_date,
        traces.trace_id,
        traces.served_at,
        -- the struct list expands into its fields, doc_id and grade
        unnest(traces.labels, recursive := true)  -- noqa: AL03
    from traces
    where traces.partition_date between $start_date and $end_date
),

final as (
    select
        trace_labels.partition_date,
        trace_labels.trace_id,
        trace_labels.doc_id,
        trace_labels.grade,
        case
            when not $use_corpus then null
            when corpus.doc_id is null then 'not in corpus'
            when corpus.deleted_at <= trace_labels.served_at
                then 'deleted before the query was served'
            when corpus.added_at > trace_labels.served_at
                then 'added after the query was served'
        end as stale_reason
    from trace_labels
    left join corpus on trace_labels.doc_id = corpus.doc_id
)

select * from final
where not $stale_only or stale_reason is not null
