-- Parquet (or DataFrame) rows as raw records: each row as one JSON object, numbered from 1 in the
-- file's own order, so the JSON-lines validation rules apply unchanged.
-- Input: `raw_rows`, the rows with the columns ingest.pieces.numbered_rows adds (__source_file,
-- __file_order, __source_row, and __read_error: why a row cannot be read, e.g. a binary id that
-- is not UTF-8). Read once for the whole piece, or as the view `raw_records` of a
-- piece of typed rows (engine._raw_records), which writes the text of the rows a query reads only.

with

final as (
    select
        __source_file::varchar as source_file,
        __file_order::integer as file_order,
        __source_row::bigint as source_line,
        to_json(
            struct_pack(
                *columns(* exclude (__source_file, __file_order, __source_row, __read_error))
            )
        ) as raw_record,
        __read_error::varchar as read_error
    from raw_rows
)

select * from final
