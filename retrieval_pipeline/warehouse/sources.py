"""A trace source (files, a DataFrame or an Arrow table) as raw pieces, read ahead in a second
thread while the caller validates the piece before.

Parquet and Arrow rows become raw records through DuckDB (`validation.rows_as_raw`), on a cursor
of their own; JSON lines are read by `ingest.jsonl` alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import duckdb
import pandas as pd
import pyarrow as pa

from retrieval_pipeline.ingest.files import TraceFile, discover
from retrieval_pipeline.ingest.jsonl import jsonl_file_pieces, jsonl_piece
from retrieval_pipeline.ingest.parquet import parquet_pieces
from retrieval_pipeline.ingest.pieces import RawPiece
from retrieval_pipeline.warehouse.connection import set_time_zone
from retrieval_pipeline.warehouse.validation import rows_as_raw


@dataclass(frozen=True)
class NumberedFiles:
    """Trace files with the place each has in its whole day's listing (`file_order`): a shard's
    share of a day, whose records are then ordered, and their repeats named, as in the ingestion
    of the whole day (docs/scaling.md)."""

    files: tuple[tuple[int, Path], ...]


TraceSource: TypeAlias = Sequence[Path] | NumberedFiles | pd.DataFrame | pa.Table

# Rows of a Parquet file or an Arrow table validated at once (JSON lines go by
# ingest.jsonl.PIECE_BYTES): the unit that keeps ingestion's memory flat in the size of a day.
ROWS_PER_PIECE = 50_000


def raw_record_pieces(
    conn: duckdb.DuckDBPyConnection, source: TraceSource
) -> tuple[int, Iterator[RawPiece]]:
    """The number of files, and every record of `source` as raw JSON text with its file and
    line (or row), a piece at a time, in file then line order."""
    if isinstance(source, pd.DataFrame):
        return 1, _frame_pieces(source)
    if isinstance(source, pa.Table):
        return 1, _table_pieces(conn, source)
    if isinstance(source, NumberedFiles):
        numbered = [(order, file) for order, path in source.files for file in discover([path])]
        return len(numbered), _file_pieces(conn, numbered)
    files = discover(source)
    return len(files), _file_pieces(conn, list(enumerate(files)))


def read_ahead(pieces: Iterator[RawPiece]) -> Iterator[RawPiece]:
    """`pieces` in order, the next one read in a second thread while the caller validates this
    one: reading (gunzip, splitting lines, Parquet rows to JSON) keeps one core busy while DuckDB's
    validation does not keep both busy all the time."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as reader:
        upcoming = reader.submit(next, pieces, None)
        try:
            while (piece := upcoming.result()) is not None:
                upcoming = reader.submit(next, pieces, None)
                yield piece
        finally:
            upcoming.cancel()
            wait([upcoming])  # the generator is closed below, never while it runs
            close = getattr(pieces, "close", None)
            if close is not None:
                close()


def _frame_pieces(frame: pd.DataFrame) -> Iterator[RawPiece]:
    """A DataFrame's rows as JSON lines (pandas' own JSON keeps dict columns as objects, where
    Arrow would make them wide structs), a piece at a time: written whole, the text of a large
    frame would be held all at once."""
    for start in range(0, len(frame), ROWS_PER_PIECE):
        rows = frame.iloc[start : start + ROWS_PER_PIECE]
        text = rows.to_json(orient="records", lines=True, date_format="iso", date_unit="us")
        yield jsonl_piece(text.encode("utf-8"), "<DataFrame>", first_line=start + 1)


def _table_pieces(conn: duckdb.DuckDBPyConnection, rows: pa.Table) -> Iterator[RawPiece]:
    with _converter(conn) as converter:
        for start in range(0, rows.num_rows, ROWS_PER_PIECE):
            piece = rows.slice(start, ROWS_PER_PIECE)
            yield rows_as_raw(converter, piece, "<Arrow table>", 0, start + 1)


def _file_pieces(
    conn: duckdb.DuckDBPyConnection, files: Sequence[tuple[int, TraceFile]]
) -> Iterator[RawPiece]:
    with _converter(conn) as converter:
        for order, trace_file in files:
            if trace_file.kind == "jsonl":
                yield from jsonl_file_pieces(trace_file.path, order)
            else:
                for first_row, rows in parquet_pieces(trace_file.path, ROWS_PER_PIECE):
                    yield rows_as_raw(converter, rows, str(trace_file.path), order, first_row)


@contextmanager
def _converter(conn: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """A second connection for turning rows into JSON: the pieces are read in the read-ahead
    thread while `conn` validates the one before, and a connection serves one thread at a time."""
    converter = conn.cursor()
    try:
        set_time_zone(converter)
        yield converter
    finally:
        converter.close()
