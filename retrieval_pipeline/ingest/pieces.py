"""Raw records: one row per JSON line or Parquet row, nothing dropped, read a piece at a time.

A piece is the unit that keeps ingestion's memory flat in the size of a day; the warehouse
validates each (`warehouse.validation.stage_records`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
    # spans of other kinds or stages read with this piece and left out (ingest.span_pieces)
    skipped: int = 0
    # records made from spans (ingest.span_pieces): their fields are the converter's, and a
    # quarantined span's text is the span itself, so no field is "unknown" there
    from_spans: bool = False
    # a JSON-lines piece cut once full (its file may go on): `coalesced` hands it out at once
    # rather than hold it to see whether the next piece joins it (a full one never does)
    continues: bool = False


# The columns `numbered_rows` adds; a file's own column of one of these names is refused.
ROW_NUMBER_COLUMNS = ("__source_file", "__file_order", "__source_row", "__read_error")


def numbered_rows(
    rows: pa.Table,
    source_file: str,
    file_order: int,
    first_row: int,
    read_errors: list[str | None] | None = None,
) -> pa.Table:
    """Parquet or Arrow rows with their file, its order, each row's number (from `first_row`)
    and why it cannot be read (`read_errors`, None: every row can), as sql/stg_rows_as_json.sql
    reads them."""
    for name in ROW_NUMBER_COLUMNS:
        if name in rows.column_names:
            raise TraceFileError(f"{source_file}: column name {name} is reserved")
    count = rows.num_rows
    file_name, order = file_columns(source_file, file_order, count)
    return (
        rows.append_column("__source_file", file_name)
        .append_column("__file_order", order)
        .append_column("__source_row", pa.array(np.arange(first_row, first_row + count)))
        .append_column(
            "__read_error",
            pa.nulls(count, pa.string())
            if read_errors is None
            else pa.array(read_errors, pa.string()),
        )
    )


def file_columns(name: str, order: int, count: int) -> tuple[pa.Array, pa.Array]:
    """`count` rows' source_file and file_order (RAW_SCHEMA's types)."""
    return (
        pa.array([name], pa.string()).take(np.zeros(count, dtype=np.int64)),
        pa.array(np.full(count, order, dtype=np.int32)),
    )


def coalesced(pieces: Iterable[RawPiece], max_rows: int, max_bytes: int) -> Iterator[RawPiece]:
    """`pieces` in order, consecutive small ones joined into one of at most `max_rows` records
    and `max_bytes` of text, so that a day of many small files is validated in a few sets of
    statements rather than one set per file (issue 23: a statement per file cost a fixed share
    of a second each, bench/README.md). Only pieces of one kind are joined: JSON-lines text
    pieces (their texts joined line for line), records without text, or typed rows of one
    schema; each row keeps its own file, file order and line, so reasons and repeats name the
    right file."""
    held: list[RawPiece] = []
    rows = size = 0
    iterator = iter(pieces)
    while True:
        try:
            piece = next(iterator)
        except StopIteration:
            break
        except Exception:
            # a file that cannot be read: the pieces read before it are handed out first, as
            # they would be without joining, then the error
            if held:
                yield _joined(held)
            raise
        count, weight = piece.records.num_rows, _text_bytes(piece)
        if held and (
            not _joinable(held[-1], piece) or rows + count > max_rows or size + weight > max_bytes
        ):
            yield _joined(held)
            held, rows, size = [], 0, 0
        held.append(piece)
        rows, size = rows + count, size + weight
        if piece.continues:
            yield _joined(held)
            held, rows, size = [], 0, 0
    if held:
        yield _joined(held)


def _text_bytes(piece: RawPiece) -> int:
    if piece.jsonl is not None:
        return len(piece.jsonl)
    return int(piece.records.nbytes)


def _kind(piece: RawPiece) -> tuple[object, ...]:
    if piece.typed is not None:
        rows = piece.rows.schema if piece.rows is not None else None
        return ("typed", piece.typed.schema, rows)
    return ("text",) if piece.jsonl is not None else ("records", piece.from_spans)


def _joinable(last: RawPiece, piece: RawPiece) -> bool:
    return _kind(last) == _kind(piece)


def _joined(held: list[RawPiece]) -> RawPiece:
    if len(held) == 1:
        return held[0]
    first = held[0]
    # one chunk per column: DuckDB scans an Arrow table a chunk at a time, and thousands of
    # chunks of a line or two would each take a vector of their own (in time and in memory)
    records = pa.concat_tables([piece.records for piece in held]).combine_chunks()
    skipped = sum(piece.skipped for piece in held)
    if first.jsonl is not None:
        texts = [piece.jsonl or b"" for piece in held]
        # each piece's last line ends with a newline before the next piece's first one
        text = b"".join(t if not t or t.endswith(b"\n") else t + b"\n" for t in texts)
        return RawPiece(records, text, skipped=skipped)
    typed = rows = None
    if first.typed is not None:
        typed = pa.concat_tables([p.typed for p in held if p.typed is not None]).combine_chunks()
    if first.rows is not None:
        rows = pa.concat_tables([p.rows for p in held if p.rows is not None]).combine_chunks()
    return RawPiece(records, typed=typed, rows=rows, skipped=skipped, from_spans=first.from_spans)
