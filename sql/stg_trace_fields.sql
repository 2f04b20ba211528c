-- The JSON lane of validation: raw trace records as typed fields, with the reason a record cannot
-- be scored (sql/stg_trace_records.sql, reading them as `trace_fields`, builds the labels).
--
-- Input: `raw_records` (source_file, file_order, source_line, raw_record, read_error), one row per
-- JSON line or Parquet row (as JSON), one piece of an ingestion. Every record is read here,
-- whatever its shape; sql/stg_plain_trace_fields.sql reads a piece of plain records faster and
-- gives the same rows (tests hold them equal).
-- Output: one row per input row. `reason` is null for a valid record; otherwise `field` names the
-- offending field (null for whole-record errors) and the typed columns may be null. The first
-- failing rule in field order decides the reason, so every record gets exactly one verdict.
-- The same rules, for one record in Python: retrieval_pipeline/records.py (tests hold them equal).
-- Ids may be JSON strings or integers and compare as strings (7 and "7" are one document).
-- A timestamp must be an ISO 8601 date, optionally with a time and an offset (no offset: UTC),
-- within years 0001..9999 once in UTC (macros iso_timestamp, within_date_range). A field given
-- twice in one record: the first counts (as in from_json); a document graded twice in
-- relevance_scores is quarantined. A grade is a number from 0 to max_grade() (sql/macros.sql).

with

parsed as (
    select
        source_file,
        file_order,
        source_line,
        raw_record,
        read_error,
        -- the text itself, not a ::json cast: the cast would parse every record once more
        case when read_error is null and json_valid(raw_record) then raw_record end as doc
    from raw_records
),

doc_types as (
    select
        *,
        -- valid JSON that starts with a brace is an object: no parse needed to know it
        case when starts_with(doc, '{') then 'OBJECT' else json_type(doc) end as doc_type
    from parsed
),

fields as (
    select
        *,
        case
            when doc_type = 'OBJECT'
                then from_json(
                    doc,
                    '{"trace_id": "JSON", "query_id": "JSON", "timestamp": "JSON",
                      "retrieved_ids": "JSON", "relevant_ids": "JSON",
                      "relevance_scores": "JSON", "segment": "JSON", "variant": "JSON",
                      "label_source": "JSON"}'
                )
        end as f
    from doc_types
),

typed as (
    select
        *,
        json_type(f.trace_id) as trace_id_type,
        json_type(f.query_id) as query_id_type,
        json_type(f.timestamp) as timestamp_type,
        -- the lists and the object by their first character: json_type would parse them whole
        json_value_type(f.retrieved_ids) as retrieved_type,
        json_value_type(f.relevant_ids) as relevant_type,
        json_value_type(f.relevance_scores) as scores_type,
        json_type(f.segment) as segment_type,
        json_extract_string(f.segment, '$') as segment_text,
        json_type(f.variant) as variant_type,
        json_type(f.label_source) as label_source_type,
        case when retrieved_type = 'ARRAY' then f.retrieved_ids end as retrieved_json,
        case when relevant_type = 'ARRAY' then f.relevant_ids end as relevant_json,
        json_uniform_id_list(retrieved_json) as retrieved_uniform,
        json_uniform_id_list(relevant_json) as relevant_uniform,
        case
            when scores_type = 'OBJECT'
                then from_json(f.relevance_scores, '"MAP(VARCHAR, JSON)"')
        end as scores_map
    from fields
),

elements as (
    select
        *,
        json_item_types_unless_uniform(retrieved_json, retrieved_uniform) as retrieved_item_types,
        json_id_texts(retrieved_json, retrieved_uniform) as retrieved_raw,
        json_item_types_unless_uniform(relevant_json, relevant_uniform) as relevant_item_types,
        json_id_texts(relevant_json, relevant_uniform) as relevant_raw,
        map_keys(scores_map) as score_keys,
        list_transform(map_values(scores_map), lambda v: json_type(v)) as score_types,
        list_transform(map_values(scores_map), lambda v: try_cast(v as double)) as score_values,
        json_extract_string(f.trace_id, '$') as trace_id_text,
        json_extract_string(f.query_id, '$') as query_id_text,
        json_extract_string(f.timestamp, '$') as timestamp_text,
        -- from_json gives no map for an object that repeats a key
        case
            when scores_type = 'OBJECT' and scores_map is null
                then json_keys(f.relevance_scores)
        end as repeated_score_keys
    from typed
),

times as (
    select
        *,
        iso_timestamp(timestamp_text) as parsed_at,
        within_date_range(parsed_at) as served_at
    from elements
),

-- position (1-based) of the first list item that is not a non-empty string or an integer
item_checks as (
    select
        *,
        first_bad_id_at(retrieved_item_types, retrieved_raw) as bad_retrieved_at,
        first_bad_id_at(relevant_item_types, relevant_raw) as bad_relevant_at,
        -- the JSON type of that item, looked up for the few records that have one
        case
            when bad_retrieved_at > 0
                then json_type(retrieved_json, '$[' || (bad_retrieved_at - 1)::varchar || ']')
        end as retrieved_bad_item_type,
        case
            when bad_relevant_at > 0
                then json_type(relevant_json, '$[' || (bad_relevant_at - 1)::varchar || ']')
        end as relevant_bad_item_type,
        list_position(
            list_transform(  -- noqa: LT01
                score_types,
                -- a JSON null grade is a SQL null here: coalesce so it is found, not skipped
                lambda t, i: coalesce(
                    t in ('BIGINT', 'UBIGINT', 'DOUBLE')
                    and isfinite(score_values[i])
                    and score_values[i] >= 0
                    and score_values[i] <= max_grade(),
                    false
                )
            ),
            false
        ) as bad_score_at,
        list_position(score_keys, '') as empty_score_key_at,
        list_filter(
            repeated_score_keys, lambda k, i: list_position(repeated_score_keys, k) < i
        )[1] as repeated_score_key
    from times
),

-- one rule per when, its reason beside it (sqlfluff would break each struct_pack apart)
-- noqa: disable=LT02
verdicts as (
    select
        *,
        case
            when read_error is not null then struct_pack(field := null, reason := read_error)
            when doc is null then struct_pack(field := null, reason := 'malformed JSON')
            when doc_type <> 'OBJECT' then struct_pack(
                field := null,
                reason := 'not a JSON object (got ' || json_type_in_words(doc_type) || ')'
            )
            when trace_id_type is null or trace_id_type = 'NULL' then struct_pack(
                field := 'trace_id', reason := 'missing required field trace_id'
            )
            when trace_id_type not in ('VARCHAR', 'BIGINT', 'UBIGINT') or trace_id_text = ''
                then struct_pack(
                    field := 'trace_id',
                    reason := scalar_id_refusal(
                        'trace_id', f.trace_id, trace_id_type, trace_id_text
                    )
                )
            when query_id_type is null or query_id_type = 'NULL' then struct_pack(
                field := 'query_id', reason := 'missing required field query_id'
            )
            when query_id_type not in ('VARCHAR', 'BIGINT', 'UBIGINT') or query_id_text = ''
                then struct_pack(
                    field := 'query_id',
                    reason := scalar_id_refusal(
                        'query_id', f.query_id, query_id_type, query_id_text
                    )
                )
            when timestamp_type is null or timestamp_type = 'NULL' then struct_pack(
                field := 'timestamp', reason := 'missing required field timestamp'
            )
            when timestamp_type <> 'VARCHAR' then struct_pack(
                field := 'timestamp',
                reason := 'timestamp must be an ISO 8601 string (got '
                || json_type_in_words(timestamp_type) || ')'
            )
            when parsed_at is null or not isfinite(parsed_at) then struct_pack(
                field := 'timestamp',
                reason := 'unparsable timestamp ' || left(f.timestamp::varchar, 80)
            )
            when served_at is null then struct_pack(
                field := 'timestamp',
                reason := 'timestamp ' || left(f.timestamp::varchar, 80)
                || ' is out of range (0001-01-01 to 9999-12-31 in UTC)'
            )
            when retrieved_type is null or retrieved_type = 'NULL' then struct_pack(
                field := 'retrieved_ids', reason := 'missing required field retrieved_ids'
            )
            when retrieved_type <> 'ARRAY' then struct_pack(
                field := 'retrieved_ids',
                reason := 'retrieved_ids must be a list of ids (got '
                || json_type_in_words(retrieved_type) || ')'
            )
            when bad_retrieved_at > 0 then struct_pack(
                field := 'retrieved_ids',
                reason := id_item_refusal(
                    'retrieved_ids', retrieved_json, bad_retrieved_at, retrieved_bad_item_type
                )
            )
            when relevant_type not in ('NULL', 'ARRAY') then struct_pack(
                field := 'relevant_ids',
                reason := 'relevant_ids must be a list of ids (got '
                || json_type_in_words(relevant_type) || ')'
            )
            when bad_relevant_at > 0 then struct_pack(
                field := 'relevant_ids',
                reason := id_item_refusal(
                    'relevant_ids', relevant_json, bad_relevant_at, relevant_bad_item_type
                )
            )
            when scores_type not in ('NULL', 'OBJECT') then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores must be an object of doc_id -> grade (got '
                || json_type_in_words(scores_type) || ')'
            )
            when repeated_score_key is not null then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores grades document '
                || to_json(left(repeated_score_key, 80)) || ' more than once'
            )
            when empty_score_key_at > 0 then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores has an empty document id'
            )
            when bad_score_at > 0 then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores[' || to_json(left(score_keys[bad_score_at], 80))
                || '] must be '
                || case
                    -- a number, only too large (its gain could overflow: records.MAX_GRADE)
                    when score_types[bad_score_at] in ('BIGINT', 'UBIGINT', 'DOUBLE')
                        and score_values[bad_score_at] > max_grade()
                        and isfinite(score_values[bad_score_at])
                        then 'a grade from 0 to ' || max_grade()::varchar
                    else 'a finite number >= 0'
                end
                || ' (got '
                || coalesce(left(map_values(scores_map)[bad_score_at]::varchar, 40), 'null')
                || ')'
            )
            when segment_type not in ('NULL', 'VARCHAR') then struct_pack(
                field := 'segment',
                reason := 'segment must be a string (got '
                || json_type_in_words(segment_type) || ')'
            )
            when segment_text = overall_segment() then struct_pack(
                field := 'segment', reason := overall_segment_reason()
            )
            when variant_type not in ('NULL', 'VARCHAR') then struct_pack(
                field := 'variant',
                reason := 'variant must be a string (got '
                || json_type_in_words(variant_type) || ')'
            )
            when label_source_type not in ('NULL', 'VARCHAR') then struct_pack(
                field := 'label_source',
                reason := 'label_source must be a string (got '
                || json_type_in_words(label_source_type) || ')'
            )
        end as verdict
    from item_checks
),
-- noqa: enable=LT02

final as (
    select
        source_file,
        file_order,
        source_line,
        raw_record,
        verdict.field,
        verdict.reason,
        trace_id_text as trace_id,
        query_id_text as query_id,
        served_at,
        segment_text as segment,
        json_extract_string(f.variant, '$') as variant,
        json_extract_string(f.label_source, '$') as label_source,
        retrieved_raw as retrieved_ids,
        relevant_raw as relevant_ids,
        score_keys,
        score_values,
        coalesce(relevant_type = 'ARRAY' or scores_type = 'OBJECT', false) as is_judged
    from verdicts
)

select * from final
