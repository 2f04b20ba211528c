-- The plain lane of validation: a piece of plain records as typed fields, the same rows as
-- sql/stg_trace_fields.sql gives for them (tests hold the two equal), without parsing each record
-- as JSON again: pyarrow's parse of a JSON-lines piece took three quarters of that lane's time
-- (0.48 s against 0.65 s for 55k traces of 100 ids), and Parquet or Arrow rows of these types
-- need no parse at all.
--
-- Input: `plain_records` (source_file, file_order, source_line, raw_record, and trace_id,
-- query_id, timestamp, retrieved_ids, relevant_ids, segment, variant, label_source typed as
-- engine.PLAIN_FIELDS: ids and lists of ids as strings; scores_json, relevance_scores as JSON
-- text, null when absent or null), one row per record: pyarrow's strict JSON reader's fields of a
-- JSON-lines piece whose every line is one JSON object (sql/stg_plain_scores_from_lines.sql), or
-- the fields of Parquet or Arrow rows whose columns have those types (engine._typed_fields).
-- Output: one row per record, every one valid. A record that the JSON lane would quarantine (a
-- missing or empty field, an unparsable timestamp, a null or empty id, a grade that is not a
-- number from 0 to max_grade(), a document graded twice) raises the error 'not a plain piece',
-- and the whole piece goes through sql/stg_trace_fields.sql instead, which names the reason.

with

grades as (
    select
        *,
        -- scores_json is written in one form (JSON's own writer): numbers are bare digits, so a
        -- pattern tells an object whose every grade is a number from any other value
        coalesce(
            regexp_full_match(
                scores_json,
                '[{](("([^"\\]|\\.)*":-?[0-9][0-9.eE+-]*)'
                || '(,"([^"\\]|\\.)*":-?[0-9][0-9.eE+-]*)*)?[}]'
            ),
            false
        ) as numeric_grades,
        within_date_range(iso_timestamp(timestamp)) as served_at
    from plain_records
),

-- the keys and the grades, in the object's order, read only from an object of numbers (they
-- cast as they are); building a map of them cost twice as much (bench/README.md)
keyed as (
    select
        *,
        case when numeric_grades then json_keys(scores_json) end as score_keys,
        case
            when numeric_grades then json_extract(scores_json, '$.*')::double[]
        end as score_values
    from grades
),

checked as (
    select
        *,
        coalesce(
            trace_id <> ''
            and query_id <> ''
            and served_at is not null
            -- a segment named as the overall rows goes to the JSON lane, which names it
            and segment is distinct from overall_segment()
            -- ids: no empty string (list_position gives null when it finds none) and no null
            and list_position(retrieved_ids, '') is null
            and list_count(retrieved_ids) = len(retrieved_ids)
            and (
                relevant_ids is null
                or list_position(relevant_ids, '') is null
                and list_count(relevant_ids) = len(relevant_ids)
            )
            and (
                scores_json is null
                or numeric_grades
                -- an object that repeats a key goes to the JSON lane, which names it
                and list_unique(score_keys) = len(score_keys)
                and list_position(score_keys, '') is null
                and coalesce(
                    list_bool_and(
                        list_transform(
                            score_values, lambda v: isfinite(v) and v between 0 and max_grade()
                        )
                    ),
                    true
                )
            ),
            false
        ) as plain
    from keyed
),

final as (
    select
        source_file,
        file_order,
        source_line,
        raw_record,
        null::varchar as field,
        null::varchar as reason,
        trace_id,
        query_id,
        served_at,
        segment,
        variant,
        label_source,
        retrieved_ids,
        relevant_ids,
        score_keys,
        score_values,
        relevant_ids is not null or scores_json is not null as is_judged
    from checked
    where case when plain then true else error('not a plain piece') end
)

select * from final
