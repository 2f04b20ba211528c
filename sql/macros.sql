-- Helpers the statement files share, created for each session by engine.prepare().

-- A JSON type (from json_type) in the words a person reads in a quarantine reason.
create or replace temp macro json_type_in_words(json_type_name) as
case json_type_name
    when 'VARCHAR' then 'a string'
    when 'BIGINT' then 'an integer'
    when 'UBIGINT' then 'an integer'
    when 'DOUBLE' then 'a number with a fraction'
    when 'BOOLEAN' then 'a boolean'
    when 'NULL' then 'null'
    when 'OBJECT' then 'an object'
    when 'ARRAY' then 'a list'
    else lower(json_type_name)
end;

-- json_type of a JSON value, without parsing a list or an object whole: their first character
-- says what they are (numbers still need json_type: an integer or one with a fraction).
create or replace temp macro json_value_type(value) as
case left(value::varchar, 1)
    when '[' then 'ARRAY'
    when '{' then 'OBJECT'
    when '"' then 'VARCHAR'
    else json_type(value)
end;

-- Whether a JSON list holds only strings or only integers (nulls aside), so that one typed parse
-- (from_json as VARCHAR[]) reads it exactly: json_structure says so in one parse, for less than
-- listing every item's type. A list mixing types (or with any other item) is typed item by item.
create or replace temp macro json_uniform_id_list(list_json) as
json_structure(list_json) in ('["VARCHAR"]', '["UBIGINT"]', '["BIGINT"]');

-- The items of a JSON id list as text, a JSON null as null: one typed parse for a uniform list,
-- item by item for the others.
create or replace temp macro json_id_texts(list_json, uniform) as
case
    when uniform then from_json(list_json, '["VARCHAR"]')
    else json_extract_string(list_json, '$[*]')
end;

-- json_type of every item of a list that is not uniform; null for a uniform one.
create or replace temp macro json_item_types_unless_uniform(list_json, uniform) as
case when not uniform then json_type(list_json, '$[*]') end;

-- Position (1-based) of the first item of a JSON list that is not a non-empty string or an
-- integer, 0 when there is none. `item_types` from json_type(list, '$[*]'), or null for a
-- uniform list (json_uniform_id_list); `item_texts` the items as text, where a JSON null is null.
-- No lambda over indexes (which is slow).
create or replace temp macro first_bad_id_at(item_types, item_texts) as
coalesce(
    nullif(
        least(
            coalesce(
                nullif(
                    list_position(
                        list_transform(
                            item_types, lambda t: t in ('VARCHAR', 'BIGINT', 'UBIGINT')
                        ),
                        false
                    ),
                    0
                ),
                2147483647
            ),
            coalesce(nullif(list_position(item_texts, ''), 0), 2147483647),
            coalesce(nullif(list_position(item_texts, null), 0), 2147483647)
        ),
        2147483647
    ),
    0
);

-- Why a trace_id or query_id is refused, in the words of a quarantine reason: `id_json` is the
-- JSON value, `id_type` its json_type, `id_text` its text.
create or replace temp macro scalar_id_refusal(field_name, id_json, id_type, id_text) as
field_name || ' must be a non-empty string or an integer (got '
|| case
    when id_text = '' then 'an empty string'
    when regexp_full_match(id_json::varchar, '-?[0-9]+') then 'an integer outside the 64-bit range'
    else json_type_in_words(id_type)
end || ')';

-- Why item `bad_at` (1-based, from first_bad_id_at) of a JSON id list is refused, in the words of
-- a quarantine reason; `item_type` is that item's json_type.
create or replace temp macro id_item_refusal(field_name, list_json, bad_at, item_type) as
field_name || '[' || (bad_at - 1)::varchar || '] is '
|| case
    when item_type = 'VARCHAR' then 'an empty string'
    when regexp_full_match(
        json_extract(list_json, '$[' || (bad_at - 1)::varchar || ']')::varchar, '-?[0-9]+'
    ) then 'an integer outside the 64-bit range'
    else json_type_in_words(item_type)
end
|| '; ids must be non-empty strings or integers';

-- A timestamp's text as an instant, null when it is not an ISO 8601 date, optionally with a time
-- and an offset (no offset: UTC). The shape is checked first: a cast alone would also take
-- `epoch`, zone names, 24:00.
create or replace temp macro iso_timestamp(timestamp_text) as
case
    when regexp_full_match(
        timestamp_text,
        '[0-9]{4}-[0-9]{2}-[0-9]{2}([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9]'
        || '([.][0-9]+)?)?(Z|[+-]([01][0-9]|2[0-3])(:?[0-5][0-9])?)?)?'
    ) then try_cast(timestamp_text as timestamptz)
end;

-- The instant when a date (and Python's datetime) can hold it, years 0001..9999 in UTC; else null.
create or replace temp macro within_date_range(instant) as
case
    when
        instant >= timestamptz '0001-01-01 00:00:00+00'
        and instant < timestamptz '10000-01-01 00:00:00+00'
        then instant
end;

-- The largest grade a label may have (retrieval_pipeline.records.MAX_GRADE, which says why; tests
-- hold the two equal): with exponential gain a grade of 1024 is an infinite gain and nDCG NaN.
create or replace temp macro max_grade() as 100;

-- The segment of the rows that pool every segment of a variant (retrieval_pipeline.segments.
-- OVERALL_SEGMENT; tests hold the two equal). A trace may not name its own segment so: its rows
-- would be pooled with the overall ones, counting its traces twice.
create or replace temp macro overall_segment() as '__all__';

-- The quarantine reason of a trace whose segment is overall_segment(); records.parse_record
-- words it the same.
create or replace temp macro overall_segment_reason() as
'segment ' || to_json(overall_segment())
|| ' is reserved for all segments together in reports and checks; rename this segment';

-- The quarantine reason of a record repeating a valid record's trace_id, naming that first
-- record; one wording for every statement that ranks repeats (a piece's, across pieces, across
-- shards), so one can recognise another's.
create or replace temp macro duplicate_trace_id_reason(trace_id, first_file, first_line) as
'duplicate trace_id ' || left(trace_id, 80) || ' (first seen at ' || first_file || ' line '
|| first_line::varchar || ')';

-- Whether a quarantine reason is duplicate_trace_id_reason's.
create or replace temp macro is_duplicate_trace_id_reason(reason) as
starts_with(reason, 'duplicate trace_id ');
