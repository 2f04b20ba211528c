-- Whether every raw record of a piece is one JSON object, and the fields its records carry that
-- a trace record does not have, with the number of records carrying each.
--
-- Input: `raw_records` (raw_record: each record's text). Parameter: $known (the fields of a
-- trace record, ingest.files.RECORD_FIELDS).
-- Output: one row. `one_object_per_line`: every record parses as one JSON object (what the
-- plain lane's strict reader needs). `unknown_fields`: a map of each other field to the number
-- of records that carry it (null when there is none): a misspelt `relevant_docs` is named to the
-- user instead of leaving every trace unannotated without a word. The keys come from the parse
-- that checks the records, so a record is parsed once here.

with

keyed as materialized (
    select
        starts_with(raw_record, '{') as is_object,
        try(json_keys(raw_record)) as field_names
    from raw_records
),

unknown as (
    select
        unnest(
            list_distinct(
                list_filter(field_names, lambda f: not list_contains($known, f))
            )
        ) as field_name
    from keyed
)

select
    bool_and(is_object and field_names is not null) as one_object_per_line,
    (select histogram(field_name) from unknown) as unknown_fields
from keyed
