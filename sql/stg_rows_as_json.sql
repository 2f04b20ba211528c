-- Parquet (or DataFrame) rows as raw records: each row as one JSON object, numbered from 1 in the
-- file's own order, so the JSON-lines validation rules apply unchanged.
-- Input: `raw_rows` with a `__source_row` column added by the loader.
-- Parameters: $source_file, $file_order.

with

final as (
    select
        $source_file::varchar as source_file,
        $file_order::integer as file_order,
        __source_row::bigint as source_line,
        to_json(struct_pack(*columns(* exclude (__source_row)))) as raw_record,
        null::varchar as read_error
    from raw_rows
)

select * from final
