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

-- Position (1-based) of the first item of a JSON list that is not a non-empty string or an
-- integer, 0 when there is none; `item_types` from json_type(list, '$[*]'), `item_texts` from
-- json_extract_string(list, '$[*]'). Two list scans, no lambda over indexes (which is slow).
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
            coalesce(nullif(list_position(item_texts, ''), 0), 2147483647)
        ),
        2147483647
    ),
    0
);
