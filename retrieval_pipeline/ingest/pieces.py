"""Raw records: one row per JSON line or Parquet row, nothing dropped, read a piece at a time.

A piece is the unit that keeps ingestion's memory flat in the size of a day; the warehouse
validates each (`warehouse.validation.stage_records`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from retrieval_pipeline.ingest.files import TraceFileError

# raw_record is the record's text. The rows of a clean piece (`jsonl._clean_jsonl_table`) share
# its bytes, newline included: each ends with its line's newline and any blank lines after it,
# which the SQL trims where it keeps the text (sql/stg_trace_records.sql).
RAW_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("file_order", pa.int32()),
        ("source_line", pa.int64()),
        ("raw_record", pa.string()),
        ("read_error", pa.string()),
    ]
)


@dataclass(frozen=True)
class RawPiece:
    """Raw records of one piece of an ingestion, and what the plain lane of validation reads
    instead of parsing them again (warehouse.validation._plain_fields): `jsonl`, the piece's text,
    when the records are exactly its non-empty lines, in order and unmended (no byte-order mark,
    carriage return, whitespace-only line, invalid UTF-8 or cut-off stream); `typed`, the fields
    as the columns of Parquet or Arrow rows already typed them
    (warehouse.validation._typed_fields)."""

    records: pa.Table
    jsonl: bytes | None = None
    typed: pa.Table | None = None
    # Parquet or Arrow rows (`numbered_rows`) whose JSON text is written only where SQL reads it
    # (sql/stg_rows_as_json.sql as the view `raw_records`): `records`' raw_record is then null.
    rows: pa.Table | None = None


# The columns `numbered_rows` adds; a file's own column of one of these names is refused.
ROW_NUMBER_COLUMNS = ("__source_file", "__file_order", "__source_row")


def numbered_rows(rows: pa.Table, source_file: str, file_order: int, first_row: int) -> pa.Table:
    """Parquet or Arrow rows with their file, its order and each row's number (from
    `first_row`), as sql/stg_rows_as_json.sql reads them."""
    for name in ROW_NUMBER_COLUMNS:
        if name in rows.column_names:
            raise TraceFileError(f"{source_file}: column name {name} is reserved")
    count = rows.num_rows
    file_name, order = file_columns(source_file, file_order, count)
    return (
        rows.append_column("__source_file", file_name)
        .append_column("__file_order", order)
        .append_column("__source_row", pa.array(np.arange(first_row, first_row + count)))
    )


def file_columns(name: str, order: int, count: int) -> tuple[pa.Array, pa.Array]:
    """`count` rows' source_file and file_order (RAW_SCHEMA's types)."""
    return (
        pa.array([name], pa.string()).take(np.zeros(count, dtype=np.int64)),
        pa.array(np.full(count, order, dtype=np.int32)),
    )
