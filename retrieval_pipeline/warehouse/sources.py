"""A trace source (files, a DataFrame or an Arrow table) as raw pieces, read ahead in a second
thread while the caller validates the piece before.

Parquet and Arrow rows become raw records through DuckDB (`validation.rows_as_raw`), on a cursor
of their own; JSON lines are read by `ingest.jsonl` alone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeGuard, cast

import duckdb
import pyarrow as pa

from retrieval_pipeline import environment
from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.ingest.files import TraceFile, TraceFileError, discover
from retrieval_pipeline.ingest.jsonl import jsonl_file_pieces, jsonl_piece
from retrieval_pipeline.ingest.otlp import SpanFileError
from retrieval_pipeline.ingest.parquet import parquet_pieces
from retrieval_pipeline.ingest.pieces import RawPiece, coalesced
from retrieval_pipeline.ingest.span_pieces import SpanReading, span_file_pieces
from retrieval_pipeline.records import STAGE_RETRIEVER
from retrieval_pipeline.store import DayBatches
from retrieval_pipeline.warehouse.connection import set_time_zone
from retrieval_pipeline.warehouse.validation import RowsOfFile, rows_as_raw, rows_of_files_as_raw

if TYPE_CHECKING:
    import pandas as pd

    from retrieval_pipeline.ingest.phoenix import PhoenixDay


@dataclass(frozen=True)
class NumberedFiles:
    """Trace files with the place each has in its whole day's listing (`file_order`): a shard's
    share of a day, whose records are then ordered, and their repeats named, as in the ingestion
    of the whole day (docs/scaling.md)."""

    files: tuple[tuple[int, Path], ...]


TraceSource: TypeAlias = (
    "Sequence[Path | str] | NumberedFiles | pd.DataFrame | pa.Table | PhoenixDay | DayBatches"
)

# Rows of a Parquet file or an Arrow table validated at once (JSON lines go by
# ingest.jsonl.PIECE_BYTES): the unit that keeps ingestion's memory flat in the size of a day.
ROWS_PER_PIECE = 50_000


def _is_phoenix_day(source: object) -> TypeGuard[PhoenixDay]:
    """Whether `source` is a Phoenix day. Phoenix's reader is imported only where a day is named
    (`ingest.source_kinds`), so without it loaded no source can be one."""
    phoenix = sys.modules.get("retrieval_pipeline.ingest.phoenix")
    return phoenix is not None and isinstance(source, phoenix.PhoenixDay)


def _is_data_frame(source: object) -> TypeGuard[pd.DataFrame]:
    """Whether `source` is a pandas DataFrame: none can be while pandas is not loaded, so the
    check imports nothing (pandas_deferred)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(source, pandas.DataFrame)


def raw_record_pieces(
    conn: duckdb.DuckDBPyConnection, source: TraceSource, spans: SpanReading | None = None
) -> tuple[int, Iterator[RawPiece]]:
    """The number of files, and every record of `source` as raw JSON text with its file and
    line (or row), a piece at a time, in file then line order. Span exports and Phoenix spans
    become records as `spans` says (default: OpenInference names, the retriever stage)."""
    spans = spans or SpanReading()
    if spans.stage != STAGE_RETRIEVER and (
        _is_data_frame(source) or isinstance(source, pa.Table | DayBatches)
    ):
        return 1, iter(())  # trace records are first-stage rankings: no reranker stage in them
    if _is_data_frame(source):
        return 1, _frame_pieces(source)
    if isinstance(source, pa.Table):
        return 1, _table_pieces(conn, source)
    if _is_phoenix_day(source):
        from retrieval_pipeline.ingest.phoenix import phoenix_pieces

        return 1, phoenix_pieces(source, spans)
    if isinstance(source, DayBatches):
        return 1, _batch_pieces(conn, source)
    max_line_bytes = environment.max_line_bytes()
    numbered = _numbered_files(source)
    if spans.stage != STAGE_RETRIEVER:  # only span exports hold a reranker's stages
        numbered = [(order, file) for order, file in numbered if file.kind == "otlp"]
    return len(numbered), _file_pieces(conn, numbered, spans, max_line_bytes)


def may_hold_reranker_spans(source: TraceSource) -> bool:
    """Whether `source` can hold a reranker's spans: a Phoenix day, or files among which a span
    export is (only span exports hold a reranker's stages: `raw_record_pieces` reads nothing else
    for them). Lists the files; reads none."""
    if _is_phoenix_day(source):
        return True
    if _is_data_frame(source) or isinstance(source, pa.Table | DayBatches):
        return False
    return any(file.kind == "otlp" for _, file in _numbered_files(source))


def _numbered_files(source: TraceSource) -> list[tuple[int, TraceFile]]:
    """The trace files of a source of files, each with its place in the day's listing."""
    if isinstance(source, NumberedFiles):
        return [(order, file) for order, path in source.files for file in discover([path])]
    return list(enumerate(discover(cast(Sequence[Path | str], source))))


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


def _batch_pieces(conn: duckdb.DuckDBPyConnection, source: DayBatches) -> Iterator[RawPiece]:
    """Record batches (a Delta table's day, a TREC run's queries) gathered into pieces of
    ROWS_PER_PIECE rows or jsonl.PIECE_BYTES of Arrow data, whichever comes first (a run's
    record holds a whole query's documents), their rows numbered from 1 across the source."""
    with _converter(conn) as converter:
        held: list[pa.RecordBatch] = []
        first_row = 1
        for batch in source.batches():
            held.append(batch)
            count = sum(b.num_rows for b in held)
            if count >= ROWS_PER_PIECE or sum(b.nbytes for b in held) >= jsonl.PIECE_BYTES:
                rows = pa.Table.from_batches(held)
                yield rows_as_raw(converter, rows, source.description, 0, first_row)
                first_row += rows.num_rows
                held = []
        if held:
            rows = pa.Table.from_batches(held)
            yield rows_as_raw(converter, rows, source.description, 0, first_row)


def _file_pieces(
    conn: duckdb.DuckDBPyConnection,
    files: Sequence[tuple[int, TraceFile]],
    spans: SpanReading,
    max_line_bytes: int,
) -> Iterator[RawPiece]:
    """Every file's pieces (each file with its file order), the small ones of consecutive files
    joined (`coalesced`)."""
    # the piece size read when called, as the readers read it (tests set it small)
    pieces = _each_file_pieces(conn, files, spans, max_line_bytes)
    return coalesced(pieces, ROWS_PER_PIECE, jsonl.PIECE_BYTES)


def _each_file_pieces(
    conn: duckdb.DuckDBPyConnection,
    files: Sequence[tuple[int, TraceFile]],
    spans: SpanReading,
    max_line_bytes: int,
) -> Iterator[RawPiece]:
    """Each file's pieces, with the file order given beside it; consecutive small Parquet files
    of one schema are made raw records together (`rows_of_files_as_raw`), so that their typing
    is one statement, not one each."""
    with _converter(conn) as converter:
        held: list[RowsOfFile] = []  # small Parquet files not yet made raw records
        held_rows = 0
        for order, trace_file in files:
            if trace_file.kind in ("jsonl", "otlp") and held:
                yield rows_of_files_as_raw(converter, held)
                held, held_rows = [], 0
            if trace_file.kind == "otlp":
                assert isinstance(trace_file.path, Path)  # span exports are local files
                try:
                    yield from span_file_pieces(trace_file.path, order, spans)
                except SpanFileError as exc:
                    raise TraceFileError(str(exc)) from exc
                continue
            if trace_file.kind == "jsonl":
                # the ingestion's first piece ends sooner: validation waits for it
                first = jsonl.FIRST_PIECE_BYTES if trace_file is files[0][1] else None
                yield from jsonl_file_pieces(trace_file.path, order, None, max_line_bytes, first)
                continue
            file_pieces = parquet_pieces(trace_file.path, ROWS_PER_PIECE)
            while True:
                try:
                    item = next(file_pieces, None)
                except Exception:
                    if held:  # the files read before one that cannot be read come first
                        yield rows_of_files_as_raw(converter, held)
                    raise
                if item is None:
                    break
                first_row, rows = item
                joinable = not held or (
                    held[-1][0].schema.equals(rows.schema)
                    and held_rows + rows.num_rows <= ROWS_PER_PIECE
                )
                if not joinable:
                    yield rows_of_files_as_raw(converter, held)
                    held, held_rows = [], 0
                held.append((rows, trace_file.name, order, first_row))
                held_rows += rows.num_rows
        if held:
            yield rows_of_files_as_raw(converter, held)


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
