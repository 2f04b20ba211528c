-- Whether every raw record of a piece is one JSON object whose fields have the plain lane's
-- types, and the fields its records carry that a trace record does not have, with the number of
-- records carrying each.
--
-- Input: `raw_records` (raw_record: each record's text). Parameter: $known (the fields of a
-- trace record, ingest.files.RECORD_FIELDS).
-- Output: one row. `one_object_per_line`: every record parses as one JSON object.
-- `plain_types`: besides, every record's ids, timestamp, segment, variant and label_source are
-- strings or null and its id lists lists of strings (or null, or empty): what the plain lane's
-- typed parse (sql/stg_plain_fields_from_lines.sql) reads exactly, where it would turn a number
-- or a boolean into text. `unknown_fields`: a map of each other field to the number of records
-- that carry it (null when there is none): a misspelt `relevant_docs` is named to the user
-- instead of leaving every trace unannotated without a word. All three come from one parse of
-- each record, its JSON structure (the type of every value, a field given twice merged into
-- one); the rest reads that short text.

with

described as materialized (
    select
        starts_with(raw_record, '{') as is_object,
        try(json_structure(raw_record)) as structure
    from raw_records
),

typed as (
    select
        is_object and structure is not null as one_object,
        case when is_object then json_keys(structure) end as field_names,
        json_extract_string(
            structure,
            ['$.trace_id', '$.query_id', '$.timestamp', '$.segment', '$.variant', '$.label_source']
        ) as scalar_types,
        json_extract_string(structure, ['$.retrieved_ids', '$.relevant_ids']) as list_types
    from described
),

unknown as (
    select unnest(list_filter(field_names, lambda f: not list_contains($known, f))) as field_name
    from typed
)

select
    coalesce(bool_and(one_object), false) as one_object_per_line,
    coalesce(
        bool_and(
            one_object
            and list_bool_and(
                list_transform(scalar_types, lambda t: coalesce(t in ('VARCHAR', 'NULL'), true))
            )
            and list_bool_and(
                list_transform(
                    list_types, lambda t: coalesce(t in ('NULL', '["VARCHAR"]', '["NULL"]'), true)
                )
            )
        ),
        false
    ) as plain_types,
    (select histogram(field_name) from unknown) as unknown_fields
from typed
