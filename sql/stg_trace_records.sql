-- Validate raw trace records into typed rows; a record that cannot be scored gets a reason.
--
-- Input: `raw_records` (source_file, file_order, source_line, raw_record, read_error), one row per
-- JSON line or Parquet row (as JSON). Parameter: $partition_date (the store's day, or null to use
-- the UTC date of each record's own timestamp).
-- Output: one row per input row. `reason` is null for a valid record; otherwise `field` names the
-- offending field (null for whole-record errors) and the typed columns may be null. The first
-- failing rule in field order decides the reason, so every record gets exactly one verdict.
-- The same rules, for one record in Python: retrieval_pipeline/records.py (tests hold them equal).
-- Ids may be JSON strings or integers and compare as strings (7 and "7" are one document);
-- retrieved_ids keeps the first occurrence of a repeated id and counts the later ones.

with

parsed as (
    select
        source_file,
        file_order,
        source_line,
        raw_record,
        read_error,
        case when read_error is null and json_valid(raw_record) then raw_record::json end as doc
    from raw_records
),

fields as (
    select
        *,
        json_type(doc) as doc_type,
        case
            when json_type(doc) = 'OBJECT'
                then from_json(
                    doc,
                    '{"trace_id": "JSON", "query_id": "JSON", "timestamp": "JSON",
                      "retrieved_ids": "JSON", "relevant_ids": "JSON",
                      "relevance_scores": "JSON", "segment": "JSON", "variant": "JSON",
                      "label_source": "JSON"}'
                )
        end as f
    from parsed
),

typed as (
    select
        *,
        json_type(f.trace_id) as trace_id_type,
        json_type(f.query_id) as query_id_type,
        json_type(f.timestamp) as timestamp_type,
        json_type(f.retrieved_ids) as retrieved_type,
        json_type(f.relevant_ids) as relevant_type,
        json_type(f.relevance_scores) as scores_type,
        json_type(f.segment) as segment_type,
        json_type(f.variant) as variant_type,
        json_type(f.label_source) as label_source_type,
        case when json_type(f.retrieved_ids) = 'ARRAY' then f.retrieved_ids end as retrieved_json,
        case when json_type(f.relevant_ids) = 'ARRAY' then f.relevant_ids end as relevant_json,
        case
            when json_type(f.relevance_scores) = 'OBJECT'
                then from_json(f.relevance_scores, '"MAP(VARCHAR, JSON)"')
        end as scores_map
    from fields
),

elements as (
    select
        *,
        json_type(retrieved_json, '$[*]') as retrieved_item_types,
        json_extract_string(retrieved_json, '$[*]') as retrieved_raw,
        json_type(relevant_json, '$[*]') as relevant_item_types,
        json_extract_string(relevant_json, '$[*]') as relevant_raw,
        map_keys(scores_map) as score_keys,
        list_transform(map_values(scores_map), lambda v: json_type(v)) as score_types,
        list_transform(map_values(scores_map), lambda v: try_cast(v as double)) as score_values,
        json_extract_string(f.trace_id, '$') as trace_id_text,
        json_extract_string(f.query_id, '$') as query_id_text,
        try_cast(json_extract_string(f.timestamp, '$') as timestamptz) as served_at
    from typed
),

-- position (1-based) of the first list item that is not a non-empty string or an integer
item_checks as (
    select
        *,
        list_position(
            list_transform(
                retrieved_item_types, lambda t, i: t in ('VARCHAR', 'BIGINT', 'UBIGINT')
                and retrieved_raw[i] <> ''
            ),
            false
        ) as bad_retrieved_at,
        list_position(
            list_transform(
                relevant_item_types, lambda t, i: t in ('VARCHAR', 'BIGINT', 'UBIGINT')
                and relevant_raw[i] <> ''
            ),
            false
        ) as bad_relevant_at,
        list_position(
            list_transform(
                score_types,
                lambda t, i: t in ('BIGINT', 'UBIGINT', 'DOUBLE')
                and isfinite(score_values[i])
                and score_values[i] >= 0
            ),
            false
        ) as bad_score_at,
        list_position(score_keys, '') as empty_score_key_at
    from elements
),

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
                    reason := 'trace_id must be a non-empty string or an integer (got '
                    || case when trace_id_text = '' then 'an empty string'
                        else json_type_in_words(trace_id_type) end || ')'
                )
            when query_id_type is null or query_id_type = 'NULL' then struct_pack(
                field := 'query_id', reason := 'missing required field query_id'
            )
            when query_id_type not in ('VARCHAR', 'BIGINT', 'UBIGINT') or query_id_text = ''
                then struct_pack(
                    field := 'query_id',
                    reason := 'query_id must be a non-empty string or an integer (got '
                    || case when query_id_text = '' then 'an empty string'
                        else json_type_in_words(query_id_type) end || ')'
                )
            when timestamp_type is null or timestamp_type = 'NULL' then struct_pack(
                field := 'timestamp', reason := 'missing required field timestamp'
            )
            when timestamp_type <> 'VARCHAR' then struct_pack(
                field := 'timestamp',
                reason := 'timestamp must be an ISO 8601 string (got '
                || json_type_in_words(timestamp_type) || ')'
            )
            when served_at is null or not isfinite(served_at) then struct_pack(
                field := 'timestamp',
                reason := 'unparsable timestamp ' || left(f.timestamp::varchar, 80)
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
                reason := 'retrieved_ids[' || (bad_retrieved_at - 1)::varchar || '] is '
                || case
                    when retrieved_item_types[bad_retrieved_at] = 'VARCHAR' then 'an empty string'
                    else json_type_in_words(retrieved_item_types[bad_retrieved_at])
                end
                || '; ids must be non-empty strings or integers'
            )
            when relevant_type not in ('NULL', 'ARRAY') then struct_pack(
                field := 'relevant_ids',
                reason := 'relevant_ids must be a list of ids (got '
                || json_type_in_words(relevant_type) || ')'
            )
            when bad_relevant_at > 0 then struct_pack(
                field := 'relevant_ids',
                reason := 'relevant_ids[' || (bad_relevant_at - 1)::varchar || '] is '
                || case
                    when relevant_item_types[bad_relevant_at] = 'VARCHAR' then 'an empty string'
                    else json_type_in_words(relevant_item_types[bad_relevant_at])
                end
                || '; ids must be non-empty strings or integers'
            )
            when scores_type not in ('NULL', 'OBJECT') then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores must be an object of doc_id -> grade (got '
                || json_type_in_words(scores_type) || ')'
            )
            when empty_score_key_at > 0 then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores has an empty document id'
            )
            when bad_score_at > 0 then struct_pack(
                field := 'relevance_scores',
                reason := 'relevance_scores["' || left(score_keys[bad_score_at], 80)
                || '"] must be a finite number >= 0 (got '
                || coalesce(left(map_values(scores_map)[bad_score_at]::varchar, 40), 'null')
                || ')'
            )
            when segment_type not in ('NULL', 'VARCHAR') then struct_pack(
                field := 'segment',
                reason := 'segment must be a string (got ' || json_type_in_words(segment_type) || ')'
            )
            when variant_type not in ('NULL', 'VARCHAR') then struct_pack(
                field := 'variant',
                reason := 'variant must be a string (got ' || json_type_in_words(variant_type) || ')'
            )
            when label_source_type not in ('NULL', 'VARCHAR') then struct_pack(
                field := 'label_source',
                reason := 'label_source must be a string (got ' || json_type_in_words(label_source_type) || ')'
            )
        end as verdict
    from item_checks
),

deduplicated as (
    select
        *,
        -- keep the first occurrence of a repeated id; the quadratic filter runs only on lists
        -- that hold a repeat
        case
            when len(list_distinct(retrieved_raw)) = len(retrieved_raw) then retrieved_raw
            else list_filter(retrieved_raw, lambda d, i: list_position(retrieved_raw, d) = i)
        end as retrieved_ids
    from verdicts
),

shaped as (
    select
        source_file,
        file_order,
        source_line,
        raw_record,
        verdict.field as field,
        verdict.reason as reason,
        coalesce(
            $partition_date::date,
            (served_at at time zone 'UTC')::date
        ) as partition_date,
        trace_id_text as trace_id,
        query_id_text as query_id,
        served_at,
        coalesce(json_extract_string(f.segment, '$'), 'unknown') as segment,
        coalesce(json_extract_string(f.variant, '$'), 'default') as variant,
        json_extract_string(f.label_source, '$') as label_source,
        retrieved_ids,
        len(retrieved_raw) - len(retrieved_ids) as n_duplicate_ids,
        coalesce(relevant_type = 'ARRAY' or scores_type = 'OBJECT', false) as is_judged,
        -- relevance_scores gives grades; relevant_ids adds grade 1 for ids it does not grade
        list_concat(
            coalesce(
                list_transform(
                    score_keys, lambda k, i: struct_pack(doc_id := k, grade := score_values[i])
                ),
                []
            ),
            coalesce(
                list_transform(
                    list_filter(
                        list_distinct(relevant_raw),
                        lambda d: not coalesce(list_contains(score_keys, d), false)
                    ),
                    lambda d: struct_pack(doc_id := d, grade := 1.0::double)
                ),
                []
            )
        ) as labels
    from deduplicated
),

-- a trace_id seen before (earlier file, then earlier line) quarantines the later record
first_seen as (
    select
        *,
        first_value(source_file) over by_trace as first_file,
        first_value(source_line) over by_trace as first_line,
        row_number() over by_trace as occurrence
    from shaped
    where reason is null
    window by_trace as (partition by trace_id order by file_order, source_line)
),

final as (
    select * exclude (first_file, first_line, occurrence)
        replace (
            case when occurrence > 1 then 'trace_id' end as field,
            case
                when occurrence > 1
                    then 'duplicate trace_id ' || left(trace_id, 80) || ' (first seen at '
                    || first_file || ' line ' || first_line::varchar || ')'
            end as reason
        )
    from first_seen
    union all
    select * from shaped where reason is not null
)

select * from final
