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
