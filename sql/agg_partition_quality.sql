-- Data-quality counts for partitions $start_date..$end_date: records read (valid traces plus
-- quarantined records), quarantined records, labels and stale labels; and the corpus snapshot's
-- size, since without a snapshot no label can be found stale.

with

trace_count as (
    select count(*) as valid_records
    from traces
    where partition_date between $start_date and $end_date
),

quarantine_count as (
    select count(*) as quarantined_records
    from quarantine
    where partition_date between $start_date and $end_date
),

label_count as (
    select
        count(*) as labels,
        count(*) filter (where stale_reason is not null) as stale_labels
    from labels
    where partition_date between $start_date and $end_date
),

corpus_count as (
    select
        count(*) as corpus_documents,
        count(deleted_at) as corpus_deleted
    from corpus
),

final as (
    select
        trace_count.valid_records,
        quarantine_count.quarantined_records,
        label_count.labels,
        label_count.stale_labels,
        corpus_count.corpus_documents,
        corpus_count.corpus_deleted,
        trace_count.valid_records + quarantine_count.quarantined_records as records_read
    from trace_count
    cross join quarantine_count
    cross join label_count
    cross join corpus_count
)

select * from final
