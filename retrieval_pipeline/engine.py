"""Batch engine: ingestion, stale-label filtering and metrics in DuckDB, driven by `sql/` files.

Knows nothing of Dagster: the pipeline's assets and the `evaluate` command call the same functions.
Every table carries `partition_date`; functions that write replace the given dates whole or not at
all (in one transaction, or for a new day's traces piece by piece, removed again if the ingestion
does not finish), so re-running a day never duplicates rows.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from datetime import date, datetime
from pathlib import Path
from typing import Any, Self, TypeAlias

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from retrieval_pipeline import readers
from retrieval_pipeline.metrics import Gain, Metric, check_gain, check_relevance_level
from retrieval_pipeline.sql_files import load_sql

TraceSource: TypeAlias = Sequence[Path] | pd.DataFrame | pa.Table


@dataclass(frozen=True)
class IngestCounts:
    """What happened to every record read: read == scored + quarantined."""

    files: int
    read: int
    valid: int
    quarantined: int
    duplicate_ids_dropped: int
    # valid records kept under the store's day although their timestamp is on another UTC day
    outside_day: int = 0


class _Counts:
    """Counts that add up over days."""

    @classmethod
    def total(cls, parts: Iterable[Self]) -> Self:
        items = list(parts)
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        return cls(**{name: sum(getattr(item, name) for item in items) for name in names})


@dataclass(frozen=True)
class LabelCounts(_Counts):
    labels: int
    stale: int
    traces_with_stale: int


@dataclass(frozen=True)
class MetricCounts(_Counts):
    traces: int
    annotated: int
    unannotated: int
    no_relevant: int


class UnreadableDatabaseError(Exception):
    """The database file exists but DuckDB cannot read it (a failed checksum, a file that is not
    DuckDB's): retrying cannot help, unlike a lock another process holds."""


# What DuckDB says, opening a file, when the file itself is damaged or is not a DuckDB database.
_UNREADABLE_FILE_ERRORS = (
    "Corrupt database file",
    "is not a valid DuckDB database file",
    "No more data remaining in MetadataReader",
    "Failed to load metadata pointer",
)


# DuckDB's memory_limit for the warehouse and for `evaluate` (e.g. "4GB"). DuckDB's own default,
# 80% of RAM, lets its cache of the blocks a run has read or written grow with every day of a
# backfill; beyond the limit it spills to disk. With 512MB a 1M-trace partition peaks at 1.7 GiB
# (2.2 GiB with 1GB, about 1.4 s faster: bench/README.md).
MEMORY_LIMIT_ENV = "RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "512MB"


def memory_limit() -> str:
    """DuckDB's memory_limit: $RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT, else DEFAULT_MEMORY_LIMIT."""
    return os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT


# Rows per row group of the warehouse's tables. DuckDB scans a table a row group per thread: at its
# default of 122,880 rows a day of 100k traces is one row group, scored on one core.
ROW_GROUP_ROWS = 16_384


def connect(
    database: str | Path = ":memory:",
    config: dict[str, Any] | None = None,
    compact_strings: bool = False,
    scratch: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse file (or a private in-memory database) with the engine's row groups,
    a UTC session and the tables and macros of sql/; `config` is DuckDB's (e.g. memory_limit).

    The database is attached, not opened directly: the row group size is an option of ATTACH
    only, and DuckDB does not keep it in the file. A `scratch` database is thrown away after use
    (`evaluate`'s): it keeps no write-ahead log, and `close_scratch` closes it without writing
    it out."""
    if str(database) != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    conn = duckdb.connect(":memory:", config=config or {})
    try:
        params = {"database": str(database), "rows": ROW_GROUP_ROWS}
        try:
            if scratch:
                conn.execute(
                    "attach $database as warehouse"
                    " (row_group_size $rows, recovery_mode no_wal_writes)",
                    params,
                )
                conn.execute("set checkpoint_on_detach = 'DISABLED'")
            else:
                conn.execute("attach $database as warehouse (row_group_size $rows)", params)
        except duckdb.Error as exc:
            if not any(words in str(exc) for words in _UNREADABLE_FILE_ERRORS):
                raise
            raise UnreadableDatabaseError(
                f"{database}: DuckDB cannot read this database file ({exc}). The nightly job's"
                " tables are derived from the trace store: move the file aside (keep it to report"
                " the problem) and rebuild the days you need with a backfill (README,"
                ' "Rebuilding the warehouse")'
            ) from exc
        conn.execute("use warehouse")
        prepare(conn, compact_strings)
    except BaseException:
        conn.close()
        raise
    return conn


def close_scratch(conn: duckdb.DuckDBPyConnection) -> None:
    """Close a `scratch` connection without the checkpoint that closing a database does: it
    would write the whole database out once more just before it is deleted (9 s at 1M traces)."""
    conn.execute("use memory")
    conn.execute("detach warehouse")
    conn.close()


def prepare(conn: duckdb.DuckDBPyConnection, compact_strings: bool = False) -> None:
    """Set the session up for the statements in sql/ and create missing tables.

    Unless `compact_strings`, DuckDB's DICT_FSST string compression is off: on the id lists it
    cost more than validating them (at 1M traces, tens of seconds at each checkpoint) for files
    about 2.7x smaller (bench/README.md, "Where the time goes"). `query_metrics` is written with
    it on all the same (`strings_compressed`)."""
    _set_time_zone(conn)
    if compact_strings:
        conn.execute("reset disabled_compression_methods")
    else:
        conn.execute("set disabled_compression_methods = 'dict_fsst'")
    conn.execute(load_sql("schema"))
    _add_label_ranks(conn)
    undo_interrupted_ingestions(conn)
    conn.execute(load_sql("macros"))


@contextmanager
def strings_compressed(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DICT_FSST string compression on for the block, whatever `prepare` chose.

    For `query_metrics`: its strings repeat (five metric names, a few segments and variants, each
    trace's ids once per metric), so compressed rows are faster to write than raw ones (1M
    traces: 1.3-1.4 s against 1.7-2.2 s) and the comparison window reads its seven days in about
    half the time (bench/README.md). DuckDB compresses rows when it writes them out: an insert of
    a row group or more as it goes, a smaller one at the next checkpoint, which may come after
    the block (harmless: it is small). The setting is the database's, not the cursor's: nothing else
    may write while the block runs, and `prepare` sets no other method."""
    row = conn.execute("select current_setting('disabled_compression_methods')").fetchone()
    was_disabled = bool(row and row[0])
    conn.execute("reset disabled_compression_methods")
    try:
        yield
    finally:
        if was_disabled:
            conn.execute("set disabled_compression_methods = 'dict_fsst'")


def _add_label_ranks(conn: duckdb.DuckDBPyConnection) -> None:
    """Bring a warehouse written before labels carried their rank up to date, in one
    transaction (a no-op for any other)."""
    row = conn.execute(
        "select count(*) from duckdb_columns() where database_name = current_database()"
        " and table_name = 'traces' and column_name = 'n_retrieved'"
    ).fetchone()
    if row is not None and row[0] > 0:
        return
    with transaction(conn):
        conn.execute("alter table traces rename to traces_without_ranks")
        conn.execute(load_sql("schema"))
        conn.execute("insert into traces by name " + load_sql("migrate_label_ranks"))
        conn.execute("drop table traces_without_ranks")


def _set_time_zone(conn: duckdb.DuckDBPyConnection) -> None:
    # A timestamp without an offset means UTC (the trace contract), whatever the machine says.
    conn.execute("set TimeZone = 'UTC'")


@contextmanager
def transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All or nothing: a partition is never left half replaced."""
    conn.execute("begin transaction")
    try:
        yield
    except BaseException:
        conn.execute("rollback")
        raise
    conn.execute("commit")


@contextmanager
def registered(conn: duckdb.DuckDBPyConnection, name: str, table: object) -> Iterator[None]:
    """`table` (a DataFrame or Arrow table) visible to SQL as `name` for the block."""
    # DuckDB 2.0 refuses register() while an earlier execute() has unread rows.
    conn.complete()
    conn.register(name, table)
    try:
        yield
    finally:
        conn.complete()
        conn.unregister(name)


# Partitioned tables a statement may replace. Table names are checked against this list (they
# are identifiers, not values); every value is bound as a parameter.
PARTITIONED_TABLES = ("traces", "quarantine", "labels", "query_metrics")
# Every partition date a record can carry (years 0001..9999), as an inclusive range.
ALL_DATES = (date(1, 1, 1), date(9999, 12, 31))


def _delete_partitions(
    conn: duckdb.DuckDBPyConnection, table: str, dates: Sequence[date] | tuple[date, date]
) -> None:
    """Delete the partitions: a list of dates, or an inclusive `(start, end)` range."""
    if table not in PARTITIONED_TABLES:
        raise ValueError(f"{table!r} is not a partitioned warehouse table")
    if isinstance(dates, tuple):
        conn.execute(
            f"delete from {table} where partition_date between $start and $end",
            {"start": dates[0], "end": dates[1]},
        )
    else:
        conn.execute(
            f"delete from {table} where list_contains($dates, partition_date)",
            {"dates": list(dates)},
        )


def _insert(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    statement: str,
    params: dict[str, object] | None = None,
) -> None:
    if table not in PARTITIONED_TABLES:
        raise ValueError(f"{table!r} is not a partitioned warehouse table")
    conn.execute(f"insert into {table} by name " + load_sql(statement), params or {})


def replace_partitions(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    dates: Sequence[date] | tuple[date, date],
    statement: str,
    params: dict[str, object] | None = None,
) -> None:
    """Delete the partitions from `table`, insert the rows of `sql/<statement>.sql`, atomically."""
    with transaction(conn):
        _delete_partitions(conn, table, dates)
        _insert(conn, table, statement, params)


# Rows of a Parquet file or an Arrow table validated at once (JSON lines go by
# readers.PIECE_BYTES): the unit that keeps ingestion's memory flat in the size of a day.
ROWS_PER_PIECE = 50_000


def _raw_record_pieces(
    conn: duckdb.DuckDBPyConnection, source: TraceSource
) -> tuple[int, Iterator[readers.RawPiece]]:
    """The number of files, and every record of `source` as raw JSON text with its file and
    line (or row), a piece at a time, in file then line order."""
    if isinstance(source, pd.DataFrame):
        return 1, _frame_pieces(source)
    if isinstance(source, pa.Table):
        return 1, _table_pieces(conn, source)
    files = readers.discover(source)
    return len(files), _file_pieces(conn, files)


def _read_ahead(pieces: Iterator[readers.RawPiece]) -> Iterator[readers.RawPiece]:
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


def _frame_pieces(frame: pd.DataFrame) -> Iterator[readers.RawPiece]:
    """A DataFrame's rows as JSON lines (pandas' own JSON keeps dict columns as objects, where
    Arrow would make them wide structs), a piece at a time: written whole, the text of 100k
    traces took 0.3 GiB more at once."""
    for start in range(0, len(frame), ROWS_PER_PIECE):
        rows = frame.iloc[start : start + ROWS_PER_PIECE]
        text = rows.to_json(orient="records", lines=True, date_format="iso", date_unit="us")
        yield readers.jsonl_piece(text.encode("utf-8"), "<DataFrame>", first_line=start + 1)


def _table_pieces(conn: duckdb.DuckDBPyConnection, rows: pa.Table) -> Iterator[readers.RawPiece]:
    with _converter(conn) as converter:
        for start in range(0, rows.num_rows, ROWS_PER_PIECE):
            piece = rows.slice(start, ROWS_PER_PIECE)
            yield _rows_as_raw(converter, piece, "<Arrow table>", 0, start + 1)


def _file_pieces(
    conn: duckdb.DuckDBPyConnection, files: Sequence[readers.TraceFile]
) -> Iterator[readers.RawPiece]:
    with _converter(conn) as converter:
        for order, trace_file in enumerate(files):
            if trace_file.kind == "jsonl":
                yield from readers.jsonl_file_pieces(trace_file.path, order)
            else:
                for first_row, rows in readers.parquet_pieces(trace_file.path, ROWS_PER_PIECE):
                    yield _rows_as_raw(converter, rows, str(trace_file.path), order, first_row)


@contextmanager
def _converter(conn: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """A second connection for turning rows into JSON: the pieces are read in the read-ahead
    thread while `conn` validates the one before, and a connection serves one thread at a time."""
    converter = conn.cursor()
    try:
        _set_time_zone(converter)
        yield converter
    finally:
        converter.close()


def _rows_as_raw(
    conn: duckdb.DuckDBPyConnection,
    rows: pa.Table,
    source_file: str,
    file_order: int,
    first_row: int = 1,
) -> readers.RawPiece:
    """Parquet or Arrow rows (numbered from `first_row`) as raw records, so one set of rules
    validates every input. Where the columns are typed as the plain lane reads them
    (`_typed_fields`) the rows' JSON text is left to be written where it is read (a quarantined
    record, the JSON lane): writing it for every row was a quarter of a Parquet file's
    ingestion."""
    rows = readers.struct_scores_as_json(rows)
    numbered = readers.numbered_rows(rows, source_file, file_order, first_row)
    try:
        typed = _typed_fields(conn, rows)
    except duckdb.InvalidInputException as exc:
        if "duplicate key" not in str(exc):
            raise
        typed = None  # a map that repeats a key: read as text below
    if typed is not None and not any(pa.types.is_map(kind) for kind in _other_types(rows)):
        return readers.RawPiece(_records_without_text(numbered), typed=typed, rows=numbered)
    try:
        raw = _rows_as_json(conn, numbered)
    except duckdb.InvalidInputException as exc:
        if "duplicate key" not in str(exc):
            raise
        maps_as_text = readers.maps_as_json(rows)
        numbered = readers.numbered_rows(maps_as_text, source_file, file_order, first_row)
        return readers.RawPiece(_rows_as_json(conn, numbered))
    return readers.RawPiece(raw, typed=typed)


def _other_types(rows: pa.Table) -> list[pa.DataType]:
    """The types of the columns that are not fields of the plain lane."""
    return [field.type for field in rows.schema if field.name not in TYPED_FIELD_NAMES]


def _rows_as_json(conn: duckdb.DuckDBPyConnection, numbered: pa.Table) -> pa.Table:
    """Every row of `numbered` (readers.numbered_rows) as a raw record with its JSON text."""
    with registered(conn, "raw_rows", numbered):
        raw = conn.sql(load_sql("stg_rows_as_json")).to_arrow_table()
    return raw.cast(readers.RAW_SCHEMA)


def _records_without_text(numbered: pa.Table) -> pa.Table:
    """The raw records of `numbered`'s rows with a null raw_record, for a piece whose text is
    written where it is read (`_raw_records`)."""
    count = numbered.num_rows
    return pa.table(
        [
            numbered.column("__source_file"),
            numbered.column("__file_order"),
            numbered.column("__source_row"),
            pa.nulls(count, pa.string()),
            pa.nulls(count, pa.string()),
        ],
        schema=readers.RAW_SCHEMA,
    )


@contextmanager
def _raw_records(conn: duckdb.DuckDBPyConnection, piece: readers.RawPiece) -> Iterator[None]:
    """The piece's raw records as `raw_records` for the block: its table, or, for rows whose text
    is written where it is read, a view of them (sql/stg_rows_as_json.sql). DuckDB then writes
    the text of the rows a statement reads: none for a plain piece without a repeated trace_id
    (an inner join with nothing on its other side reads none)."""
    if piece.rows is None:
        with registered(conn, "raw_records", _in_scan_batches(piece.records)):
            yield
        return
    with registered(conn, "raw_rows", _in_scan_batches(piece.rows)):
        conn.execute("create or replace temp view raw_records as " + load_sql("stg_rows_as_json"))
        try:
            yield
        finally:
            conn.execute("drop view raw_records")


def _typed_fields(conn: duckdb.DuckDBPyConnection, rows: pa.Table) -> pa.Table | None:
    """The fields of Parquet or Arrow rows as the plain lane reads them (PLAIN_FIELDS and
    scores_json), without parsing their JSON text: None unless every column is already of a type
    the JSON text of which the plain lane would read back as the same value (ids as strings and
    lists of strings, the timestamp as a string or a timestamp, relevance_scores as a map of
    numbers). A column of another type (integer ids, say) leaves the rows to the JSON lane, which
    reads and names what it finds."""
    columns: dict[str, pa.ChunkedArray | pa.Array] = {}
    for field in PLAIN_FIELDS:
        if field.name not in rows.column_names:
            if field.name in readers.REQUIRED_FIELDS:
                return None
            columns[field.name] = pa.nulls(rows.num_rows, field.type)
            continue
        column = rows.column(field.name)
        optional_nulls = pa.types.is_null(column.type) and field.name not in readers.REQUIRED_FIELDS
        if field.name == "timestamp" and pa.types.is_timestamp(column.type):
            columns[field.name] = column  # as text below, as to_json writes it
        elif optional_nulls or _is_plain_type(column.type, field.type):
            columns[field.name] = column.cast(field.type)
        else:
            return None
    scores = (
        rows.column("relevance_scores")
        if "relevance_scores" in rows.column_names
        else pa.nulls(rows.num_rows, pa.map_(pa.string(), pa.float64()))
    )
    if not (pa.types.is_null(scores.type) or _is_map_of_grades(scores.type)):
        return None
    # the text of the timestamp and of the grades, each as the record's JSON text holds it
    parts = pa.table({"timestamp": columns["timestamp"], "relevance_scores": scores})
    with registered(conn, "typed_rows", parts):
        texts = conn.sql(load_sql("stg_typed_rows_as_text")).to_arrow_table()
    columns["timestamp"] = texts.column("timestamp")
    fields = pa.table(columns, schema=PLAIN_FIELDS)
    return fields.append_column("scores_json", texts.column("scores_json"))


def _is_string_type(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _is_plain_type(kind: pa.DataType, plain: pa.DataType) -> bool:
    """Whether a column of type `kind` holds what the plain lane reads as `plain`: a string, or a
    list of strings."""
    if pa.types.is_list(plain):
        return bool(
            (pa.types.is_list(kind) or pa.types.is_large_list(kind))
            and _is_string_type(kind.value_type)
        )
    return _is_string_type(kind)


def _is_map_of_grades(kind: pa.DataType) -> bool:
    """A map of string keys to integers or 32- or 64-bit floats, which to_json writes as
    numbers."""
    return bool(
        pa.types.is_map(kind)
        and _is_string_type(kind.key_type)
        and (
            pa.types.is_integer(kind.item_type)
            or pa.types.is_float32(kind.item_type)
            or pa.types.is_float64(kind.item_type)
        )
    )


def _item_keys(items: pa.Array) -> np.ndarray:
    """A 32-bit key per string of `items`, from its length and its last 8 bytes: equal strings
    get equal keys, and different ones rarely do."""
    offset_type = np.int64 if pa.types.is_large_string(items.type) else np.int32
    offsets = np.frombuffer(items.buffers()[1], dtype=offset_type)
    offsets = offsets[items.offset : items.offset + len(items) + 1].astype(np.int64)
    data_buffer = items.buffers()[2]
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    )
    ends, lengths = offsets[1:], np.diff(offsets)
    # the 8 bytes that end where each item ends (the few items ending within the buffer's first
    # 8 bytes read them from a copy with 8 zero bytes in front)
    keys = np.empty(len(ends), dtype=np.uint64)
    early = int(np.searchsorted(ends, 8))
    head = np.concatenate((np.zeros(8, np.uint8), data[:8], np.zeros(8, np.uint8)))
    keys[:early] = _windows(head)[ends[:early]]
    if early < len(ends):
        keys[early:] = _windows(data)[ends[early:] - 8]
    # keep the item's own bytes only: the window's first 8 - length bytes belong to others
    short = np.flatnonzero(lengths < 8)
    keys[short] >>= (8 * (8 - np.maximum(lengths[short], 1))).astype(np.uint64)
    keys[lengths == 0] = 0
    keys ^= lengths.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)  # wraps, as meant
    keys *= np.uint64(0x9E3779B97F4A7C15)
    return (keys >> np.uint64(32)).astype(np.uint32)


def _windows(data: np.ndarray) -> np.ndarray:
    """Every 8-byte window of `data` as a little-endian integer (a view, no copy)."""
    return np.ndarray((max(len(data) - 7, 0),), dtype="<u8", buffer=data, strides=(1,))


# Lists of the same length are screened together, a row per list; lengths beyond this many of the
# commonest are screened in one sort keyed by row.
_SCREENED_LENGTHS = 8

# Rows screened at once: their keys and temporaries (a few MB at 100 ids a list) stay in the CPU's
# cache and in memory the allocator reuses. A whole 64 MiB piece at once took twice as long, much
# of it the kernel handing out fresh pages for each temporary (bench/README.md).
_SCREENED_ROWS = 8_192


def _lists_that_may_repeat(ids: pa.ChunkedArray) -> np.ndarray:
    """Rows whose list may hold an id twice: two of its items with the same key (`_item_keys`).
    Every real repeat is among them; a false alarm only costs an exact look."""
    found = [
        start + _screen(ids.slice(start, _SCREENED_ROWS))
        for start in range(0, len(ids), _SCREENED_ROWS)
    ]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _screen(ids: pa.ChunkedArray) -> np.ndarray:
    """`_lists_that_may_repeat` of a few thousand rows.

    Lists that share a length are sorted as the rows of one 2D array (production lists mostly
    share the top-k's length), which costs far less than one sort of every item keyed by row."""
    lengths = _list_lengths(ids)
    if not lengths.sum():
        return np.zeros(0, dtype=np.int64)
    keys = np.concatenate([_item_keys(chunk.flatten()) for chunk in ids.chunks])
    firsts = np.cumsum(lengths) - lengths
    values, counts = np.unique(lengths[lengths > 1], return_counts=True)
    common = values[np.argsort(-counts, kind="stable")[:_SCREENED_LENGTHS]]
    found = []
    for length in common:
        rows = np.flatnonzero(lengths == length)
        if len(rows) * length == len(keys):  # every item is in these rows: a view, not a copy
            block = keys.reshape(len(rows), length)
        else:
            block = keys[firsts[rows, None] + np.arange(length)]
        block.sort(axis=1)
        found.append(rows[(block[:, 1:] == block[:, :-1]).any(axis=1)])
    rest = np.flatnonzero((lengths > 1) & ~np.isin(lengths, common))
    if len(rest):
        counts = lengths[rest]
        # the items of those rows: each row's first item, then consecutive ones
        items_of_rest = np.arange(counts.sum()) + np.repeat(
            firsts[rest] - (np.cumsum(counts) - counts), counts
        )
        keyed = (np.repeat(rest.astype(np.uint64), counts) << np.uint64(32)) | keys[items_of_rest]
        keyed.sort()
        equal = keyed[1:][keyed[1:] == keyed[:-1]]
        found.append((equal >> np.uint64(32)).astype(np.int64))
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def keep_first_occurrences(staged: pa.Table, keep_retrieved_ids: bool = True) -> pa.Table:
    """`staged` (rows of sql/stg_trace_records.sql) with each list's repeated retrieved ids
    dropped after their first occurrence, `n_duplicate_ids` counting them, `n_retrieved` the
    length left, and each label's rank closed up to its document's place in the shorter list.
    Without `keep_retrieved_ids` every list is left empty instead (a null one stays null), all
    else the same: the shortened lists are not built (for `ingest_traces`).

    Done here, vectorized, because DuckDB's per-list distinct or sort costs as much as the rest
    of the validation (bench/README.md, "Where the time goes"): the few lists that may repeat an
    id are found at once, then walked exactly."""
    # the lists stay in the pieces they were read in: combining them would copy every id, and the
    # insert copies them into whole batches anyway (_in_batches_per_thread)
    ids = staged.column("retrieved_ids")
    lengths = _list_lengths(ids)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    keep = np.ones(int(offsets[-1]), dtype=bool)
    dropped = np.zeros(staged.num_rows, dtype=np.int32)
    for row in _lists_that_may_repeat(ids):
        start = int(offsets[row])
        seen: set[object] = set()
        for position, doc_id in enumerate(ids[int(row)].as_py()):
            if doc_id in seen:
                keep[start + position] = False
            seen.add(doc_id)
        dropped[row] = lengths[row] - int(keep[start : offsets[row + 1]].sum())
    if dropped.any():
        labels = _close_up_ranks(
            staged.column("labels").combine_chunks(), np.flatnonzero(dropped), offsets, keep
        )
        staged = staged.set_column(staged.column_names.index("labels"), "labels", labels)
    n_retrieved = pc.subtract(pc.list_value_length(ids).cast(pa.int32()), pa.array(dropped))
    if not keep_retrieved_ids:
        ids = pa.ListArray.from_arrays(
            pa.array(np.zeros(len(ids) + 1, dtype=np.int32)),
            pa.array([], ids.type.value_type),
            mask=ids.is_null().combine_chunks(),
        )
    elif dropped.any():
        ids = _without_items(ids, offsets, dropped, keep)
    staged = staged.set_column(staged.column_names.index("retrieved_ids"), "retrieved_ids", ids)
    return staged.append_column("n_duplicate_ids", pa.array(dropped)).append_column(
        "n_retrieved", n_retrieved
    )


def _list_lengths(lists: pa.ChunkedArray) -> np.ndarray:
    """Each list's length, 0 for a null one."""
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    return lengths.astype(np.int64)


def _without_items(
    lists: pa.ChunkedArray, offsets: np.ndarray, dropped: np.ndarray, keep: np.ndarray
) -> pa.ListArray:
    """`lists` as one array, without the items `keep` marks False (by position among all items;
    `offsets` are each list's first, `dropped` how many each loses). The runs of kept items
    between the dropped few are copied once, whole, rather than item by item."""
    gone = np.flatnonzero(~keep)
    starts = np.concatenate(([0], gone + 1))
    ends = np.concatenate((gone, [len(keep)]))
    items = pc.list_flatten(lists)
    runs = [
        chunk
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True)
        if end > start
        for chunk in items.slice(start, end - start).chunks
    ]
    dropped_before = np.concatenate(([0], np.cumsum(dropped, dtype=np.int64)))
    return pa.ListArray.from_arrays(
        pa.array((offsets - dropped_before).astype(np.int32)),
        pa.concat_arrays(runs) if runs else pa.array([], lists.type.value_type),
        mask=lists.is_null().combine_chunks(),
    )


def _close_up_ranks(
    labels: pa.ListArray, rows: np.ndarray, id_offsets: np.ndarray, keep: np.ndarray
) -> pa.ListArray:
    """`labels` with the ranks of `rows` counted among the ids kept (`keep`, by item): a rank r
    (the first occurrence, which is always kept) becomes the number of ids kept among the first
    r of its list."""
    items = labels.values
    fields = list(items.type)
    children = dict(zip([f.name for f in fields], items.flatten(), strict=True))
    ranks = children["rank"].fill_null(0).to_numpy(zero_copy_only=False).copy()
    label_offsets = labels.offsets.to_numpy()
    for row in rows:
        of_row = ranks[label_offsets[row] : label_offsets[row + 1]]  # a view: set in place
        retrieved = of_row > 0
        kept_so_far = np.cumsum(keep[id_offsets[row] : id_offsets[row + 1]])
        of_row[retrieved] = kept_so_far[of_row[retrieved] - 1]
    children["rank"] = pa.array(ranks, children["rank"].type, mask=ranks == 0)
    ranked = pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields)
    return pa.ListArray.from_arrays(labels.offsets, ranked, mask=labels.is_null())


# The tables an ingestion fills, and the statement that shapes a piece's rows for each.
INGESTED_TABLES = {"traces": "int_valid_traces", "quarantine": "int_quarantined_records"}


def ingest_traces(
    conn: duckdb.DuckDBPyConnection,
    source: TraceSource,
    partition_date: date | None = None,
    keep_retrieved_ids: bool = True,
) -> IngestCounts:
    """Validate records into `traces`, the rest into `quarantine`: a day is replaced whole or not
    at all.

    Records are validated a piece at a time, so memory does not grow with the size of a day.
    Where nothing is stored yet (a new day) each piece's rows go straight into the tables; else
    they are staged and swapped in at the end (`_piece_writer`).

    With `partition_date` (the trace store's day) every record is stored under that date and that
    date is replaced; the store's day is authoritative, so a valid record whose timestamp falls on
    another UTC day is kept there and counted (`outside_day`). Without, each record goes under the
    UTC date of its own timestamp and every date present is replaced.

    Without `keep_retrieved_ids` each trace is stored with an empty `retrieved_ids` (its
    `n_retrieved`, labels and their ranks as usual): scoring never reads the lists, and storing
    them is most of the insert's cost. For a private database that nothing else reads
    (`evaluate`'s).
    """
    n_files, pieces = _raw_record_pieces(conn, source)
    read = valid = duplicates = outside = 0
    dates: set[date] = set() if partition_date is None else {partition_date}
    create_seen_trace_ids(conn)
    ((threads,),) = conn.execute("select current_setting('threads')").fetchall()
    try:
        with (
            _piece_writer(conn, partition_date, dates) as write_piece,
            _written_behind(conn, write_piece) as write,
        ):
            for number, piece in enumerate(_read_ahead(pieces)):
                staged = _stage_records(conn, piece, partition_date, keep_retrieved_ids)
                staged = _in_batches_per_thread(staged, int(threads))
                with registered(conn, "stg_trace_records", staged):
                    if partition_date is None:  # the dates of this piece's own timestamps
                        rows = conn.execute(
                            "select distinct partition_date from stg_trace_records"
                            " where partition_date is not null"
                        ).fetchall()
                        dates.update(row[0] for row in rows)
                    write(staged, number)
                    conn.execute(
                        "insert into seen_trace_ids select trace_id, file_order, source_file,"
                        " source_line from stg_trace_records where reason is null"
                    )
                    row = conn.execute(load_sql("agg_ingest_counts")).fetchone()
                    assert row is not None
                    read, valid = read + int(row[0]), valid + int(row[1])
                    duplicates, outside = duplicates + int(row[2]), outside + int(row[3])
    finally:
        conn.execute("drop table if exists seen_trace_ids")
    return IngestCounts(
        files=n_files,
        read=read,
        valid=valid,
        quarantined=read - valid,
        duplicate_ids_dropped=duplicates,
        outside_day=outside,
    )


# Stores a piece (registered as `stg_trace_records` on the connection it is given) by its number.
PieceWriter: TypeAlias = Callable[[duckdb.DuckDBPyConnection, int], None]


@contextmanager
def _written_behind(
    conn: duckdb.DuckDBPyConnection, write_piece: PieceWriter
) -> Iterator[Callable[[pa.Table, int], None]]:
    """`write(staged, number)`: piece `number` stored by `write_piece` in a second thread, on a
    cursor of its own, while the caller validates the next one; the thread's CPU otherwise sat
    idle during the single-threaded parts of validation (1M traces: 20.3-21.9 -> 18.8-19.5 s).
    One piece at a time, in order; a failed write raises at the next piece or at the end, and
    nothing is left running when the block exits, so an undo never meets a write."""
    writer = _cursor_like(conn)
    in_flight: list[Future[None]] = []

    def store(staged: pa.Table, number: int) -> None:
        with registered(writer, "stg_trace_records", staged):
            write_piece(writer, number)

    def write(staged: pa.Table, number: int) -> None:
        if in_flight:
            in_flight.pop().result()
        in_flight.append(pool.submit(store, staged, number))

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="write-behind") as pool:
            try:
                yield write
                if in_flight:
                    in_flight.pop().result()
            finally:
                wait(in_flight)
    finally:
        writer.close()


def _cursor_like(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A second connection to `conn`'s database, in its session's database and time zone."""
    ((database,),) = conn.execute("select current_database()").fetchall()
    cursor = conn.cursor()
    _set_time_zone(cursor)
    if database == "warehouse":  # `connect`'s
        cursor.execute("use warehouse")
    elif database != "memory":
        cursor.close()
        raise ValueError(f"a connection to database {database!r}: use engine.connect")
    return cursor


@contextmanager
def _piece_writer(
    conn: duckdb.DuckDBPyConnection, partition_date: date | None, dates: set[date]
) -> Iterator[PieceWriter]:
    """How an ingestion stores a piece.

    Where nothing is stored yet (`partition_date` holds no rows; without one, both tables are
    empty) there is nothing to keep: each piece goes straight in, in a transaction of its own,
    while `pending_ingestions` says so; a failure removes what was written, and a killed run's
    rows are removed by the next `prepare`. Else the day's old rows stay until the new ones are
    complete: pieces are staged as Parquet files, outside any transaction (inside one DuckDB
    keeps every Arrow piece it inserted until the commit, about 0.4 GB per 55k traces), and one
    short transaction replaces the dates in `dates` from them at the end."""
    if not _holds_rows(conn, partition_date):
        with transaction(conn):
            conn.execute("insert into pending_ingestions values ($date)", {"date": partition_date})
        try:
            yield lambda cursor, number: _insert_piece(cursor)
        except BaseException:
            # a connection that cannot undo it now (it broke) leaves it to the next one
            with suppress(duckdb.Error):
                undo_interrupted_ingestions(conn)
            raise
        conn.execute("delete from pending_ingestions")
        return
    staged_files: dict[str, list[str]] = {table: [] for table in INGESTED_TABLES}
    with _staging_directory(conn) as staging:

        def stage(cursor: duckdb.DuckDBPyConnection, number: int) -> None:
            for table, path in _write_piece(cursor, staging, number).items():
                staged_files[table].append(path)

        yield stage
        _replace_from_staging(conn, sorted(dates), staged_files)


def _holds_rows(conn: duckdb.DuckDBPyConnection, partition_date: date | None) -> bool:
    """Whether `traces` or `quarantine` holds rows of `partition_date` (None: any rows)."""
    row = conn.execute(
        "select exists (select 1 from traces where coalesce(partition_date = $date, true))"
        " or exists (select 1 from quarantine where coalesce(partition_date = $date, true))",
        {"date": partition_date},
    ).fetchone()
    return bool(row and row[0])


def _insert_piece(conn: duckdb.DuckDBPyConnection) -> None:
    """Insert piece `stg_trace_records` into the tables it fills, in one transaction."""
    with transaction(conn):
        for table, statement in INGESTED_TABLES.items():
            _insert(conn, table, statement)


def undo_interrupted_ingestions(conn: duckdb.DuckDBPyConnection) -> None:
    """Remove the rows of ingestions that wrote straight into the tables and did not finish
    (`pending_ingestions`), in one transaction: their dates are back to holding nothing."""
    pending = [
        row[0] for row in conn.execute("select partition_date from pending_ingestions").fetchall()
    ]
    if not pending:
        return
    with transaction(conn):
        for table in INGESTED_TABLES:
            # null: the tables were empty when it started, so every row is its
            _delete_partitions(conn, table, ALL_DATES if None in pending else pending)
        conn.execute("delete from pending_ingestions")


def create_seen_trace_ids(conn: duckdb.DuckDBPyConnection) -> None:
    """The valid trace_ids of an ingestion's earlier pieces, which sql/stg_trace_records.sql reads:
    a later record repeating one is quarantined."""
    conn.execute(
        "create or replace temp table seen_trace_ids"
        " (trace_id varchar, file_order integer, source_file varchar, source_line bigint)"
    )


@contextmanager
def _staging_directory(conn: duckdb.DuckDBPyConnection) -> Iterator[Path]:
    """A fresh folder for one ingestion's staging files, removed afterwards: beside the warehouse
    file (the disk the user gave it), or in the system's temporary folder for an in-memory one."""
    row = conn.execute(
        "select path from duckdb_databases() where database_name = current_database()"
    ).fetchone()
    if row is None or row[0] is None:
        with tempfile.TemporaryDirectory(prefix="retrieval-pipeline-staging-") as folder:
            yield Path(folder)
        return
    root = Path(row[0]).with_name(Path(row[0]).name + ".staging")
    # Holding the warehouse's write lock, no other ingestion is using this root: what is there was
    # left by a killed one.
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_piece(conn: duckdb.DuckDBPyConnection, staging: Path, number: int) -> dict[str, str]:
    """Write piece `number` (registered as `stg_trace_records`) to staging files, one per table
    in INGESTED_TABLES that it has rows for: {table: path}."""
    written = {}
    for table, statement in INGESTED_TABLES.items():
        path = staging / f"{table}-{number:06d}.parquet"
        if _write_staged(conn, statement, path):
            written[table] = str(path)
    return written


def _replace_from_staging(
    conn: duckdb.DuckDBPyConnection, dates: Sequence[date], staged_files: dict[str, list[str]]
) -> None:
    """In one transaction, empty the partitions of `dates` in each staged table and insert its
    staging files: the day is replaced whole or not at all."""
    with transaction(conn):
        for table, files in staged_files.items():
            _delete_partitions(conn, table, dates)
            if files:
                _insert(conn, table, "stg_staged_rows", {"files": files})


def _write_staged(conn: duckdb.DuckDBPyConnection, statement: str, path: Path) -> bool:
    """Write the rows of `sql/<statement>.sql` to `path` as Parquet; False when there are none."""
    rows = conn.sql(load_sql(statement)).to_arrow_table()
    if rows.num_rows == 0:
        return False
    try:
        # read once, right after: no compression, dictionaries or statistics to pay for
        pq.write_table(
            rows,
            path,
            row_group_size=STAGING_ROW_GROUP_ROWS,
            compression="none",
            use_dictionary=False,
            write_statistics=False,
        )
    except OSError as exc:
        raise OSError(
            f"{path}: cannot write a staging file ({exc.strerror or exc}); validated rows are"
            " staged there before they are stored, and nothing was stored"
        ) from exc
    return True


# Row groups of the staging files: the final insert reads one per thread.
STAGING_ROW_GROUP_ROWS = 16_384

# Rows of one Arrow record batch handed to DuckDB: it scans an Arrow table a batch per thread, so
# a piece in one batch would be validated on one core.
SCAN_BATCH_ROWS = 8_192


def _in_scan_batches(table: pa.Table) -> pa.Table:
    return pa.Table.from_batches(table.to_batches(max_chunksize=SCAN_BATCH_ROWS), table.schema)


def _in_batches_per_thread(table: pa.Table, threads: int) -> pa.Table:
    """`table` in one record batch per DuckDB thread, for inserting it: each thread then writes
    long row groups. Per 55k-trace piece: one batch took 0.47-0.49 s, batches of 8,192 rows
    0.39-0.49 s, one per thread (2 here) 0.26-0.28 s (bench/README.md)."""
    rows = max(-(-table.num_rows // max(threads, 1)), 1)
    return pa.Table.from_batches(
        table.combine_chunks().to_batches(max_chunksize=rows), table.schema
    )


def _stage_records(
    conn: duckdb.DuckDBPyConnection,
    piece: readers.RawPiece,
    partition_date: date | None,
    keep_retrieved_ids: bool = True,
) -> pa.Table:
    """One piece of raw records validated (sql/stg_trace_records.sql), repeats dropped (or every
    list emptied: `ingest_traces`).

    Its typed fields come from the plain lane (sql/stg_plain_trace_fields.sql) when every record
    is plainly valid, else from the JSON lane (sql/stg_trace_fields.sql), which reads any record
    and names what is wrong with it: both give the same rows for a plain piece."""
    with _raw_records(conn, piece):
        staged = _plain_lane(conn, piece, partition_date)
        if staged is None:
            staged = _trace_records(conn, "stg_trace_fields", partition_date)
        assert staged is not None
    return keep_first_occurrences(staged, keep_retrieved_ids)


def _plain_lane(
    conn: duckdb.DuckDBPyConnection, piece: readers.RawPiece, partition_date: date | None
) -> pa.Table | None:
    """The plain lane's rows of the piece (registered as `raw_records`); None when a record is
    not plain.

    The lists of retrieved ids are pyarrow's, attached to the statement's rows here: the
    statement reads them (labels' ranks, checks) but does not hand them back, which saved about
    a third of its time (DuckDB copying every id into its Arrow result: bench/README.md)."""
    plain = _plain_fields(conn, piece)
    if plain is None:
        return None
    with _as_plain_records(conn, plain):
        staged = _trace_records(
            conn, "stg_plain_trace_fields", partition_date, without=["retrieved_ids"]
        )
    if staged is None:
        return None
    return _with_column_of(staged, plain, "retrieved_ids")


@contextmanager
def _as_plain_records(conn: duckdb.DuckDBPyConnection, fields: pa.Table) -> Iterator[None]:
    """`fields` (`_plain_fields`) as the `plain_records` that sql/stg_plain_trace_fields.sql
    reads: typed rows have their grades as text already, a JSON-lines piece's are taken from its
    lines (sql/stg_plain_scores_from_lines.sql)."""
    if "scores_json" in fields.column_names:
        with registered(conn, "plain_records", fields):
            yield
        return
    with registered(conn, "parsed_records", fields):
        conn.execute(
            "create or replace temp view plain_records as "
            + load_sql("stg_plain_scores_from_lines")
        )
        try:
            yield
        finally:
            conn.execute("drop view plain_records")


def _with_column_of(staged: pa.Table, fields: pa.Table, name: str) -> pa.Table:
    """`staged` in the order of `fields`, with its column `name`: one row each for the same
    records, matched by `source_line` (ascending in `fields`, a piece of one file). DuckDB's
    parallel join does not keep the rows' order; putting them back moves the narrower table,
    and the column (100 ids a row) is shared, not copied."""
    lines = fields.column("source_line").to_numpy()
    staged_lines = staged.column("source_line").to_numpy()
    rows = np.searchsorted(lines, staged_lines).clip(0, max(len(lines) - 1, 0))
    order = np.argsort(rows)
    # each line of `fields` once: the rows are a permutation of them
    assert np.array_equal(lines[rows], staged_lines)
    assert np.array_equal(rows[order], np.arange(len(lines)))
    if not np.array_equal(order, np.arange(len(order))):
        staged = staged.take(pa.array(order))
    return staged.append_column(name, fields.column(name))


# The fields of a plain record as pyarrow's JSON reader types them. It refuses a value of another
# JSON type (an integer id included) and a field given twice; relevance_scores, a map, which it
# cannot type, is read by DuckDB (sql/stg_plain_trace_fields.sql).
PLAIN_FIELDS = pa.schema(
    [
        ("trace_id", pa.string()),
        ("query_id", pa.string()),
        ("timestamp", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevant_ids", pa.list_(pa.string())),
        ("segment", pa.string()),
        ("variant", pa.string()),
        ("label_source", pa.string()),
    ]
)
# The fields `_typed_fields` reads from Parquet or Arrow columns.
TYPED_FIELD_NAMES = frozenset(PLAIN_FIELDS.names) | {"relevance_scores"}
# What sql/stg_plain_trace_fields.sql raises for a record that is not plainly valid.
NOT_PLAIN = "not a plain piece"


def _plain_fields(conn: duckdb.DuckDBPyConnection, piece: readers.RawPiece) -> pa.Table | None:
    """The piece's records (registered as `raw_records`) as the plain lane's typed fields, with
    their file, line and text: the typed rows' own (`_typed_fields`), or a JSON-lines piece's
    text typed by pyarrow's strict JSON reader; None when the records are neither typed rows nor
    one JSON object per line of the types in PLAIN_FIELDS."""
    if piece.records.num_rows == 0:
        return None
    if piece.typed is not None:
        return _in_scan_batches(_with_raw_columns(piece.typed, piece.records))
    if piece.jsonl is None:
        return None
    # pyarrow's reader crashes on a JSON null between records, and reads two objects on one line
    # as two records: it is given only lines that are each one JSON object
    ((one_object_per_line,),) = conn.execute(
        "select bool_and(starts_with(raw_record, '{') and json_valid(raw_record)) from raw_records"
    ).fetchall()
    if not one_object_per_line:
        return None
    try:
        typed = pj.read_json(
            pa.BufferReader(piece.jsonl),
            parse_options=pj.ParseOptions(
                explicit_schema=PLAIN_FIELDS, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowInvalid:
        return None
    if typed.num_rows != piece.records.num_rows:
        return None
    return _in_scan_batches(_with_raw_columns(typed, piece.records))


def _with_raw_columns(fields: pa.Table, records: pa.Table) -> pa.Table:
    """`fields` with each record's file, line and text, from `records` (the same rows)."""
    for name in ("source_file", "file_order", "source_line", "raw_record"):
        fields = fields.append_column(name, records.column(name))
    return fields


def _trace_records(
    conn: duckdb.DuckDBPyConnection,
    lane: str,
    partition_date: date | None,
    without: Sequence[str] = (),
) -> pa.Table | None:
    """sql/stg_trace_records.sql over the fields of `lane`, less the columns `without`; None
    when the plain lane finds a record that is not plain."""
    conn.execute("create or replace temp view trace_fields as " + load_sql(lane))
    try:
        rows = conn.sql(load_sql("stg_trace_records"), params={"partition_date": partition_date})
        if without:
            rows = rows.project(f"* exclude ({', '.join(without)})")
        return rows.to_arrow_table()
    except duckdb.InvalidInputException as exc:
        if NOT_PLAIN not in str(exc):
            raise
        return None
    finally:
        conn.execute("drop view trace_fields")


@dataclass(frozen=True)
class CorpusLoad:
    """What `load_corpus` left in `corpus` and `corpus_rejects`."""

    documents: int
    rejected: int  # rows that could not be read: their documents are left out
    # True: the file was unchanged since it was loaded at `loaded_at`, and was not read again
    kept: bool
    loaded_at: datetime | None  # when the table's snapshot was read; None without a snapshot
    first_rejects: tuple[str, ...] = ()  # `file:line: reason` of the first few rejected rows


# The statements that read a corpus snapshot: a change to them reads an unchanged file again.
_CORPUS_STATEMENTS = ("stg_corpus_rows", "int_corpus")


def load_corpus(conn: duckdb.DuckDBPyConnection, path: Path | None) -> CorpusLoad:
    """Replace `corpus` with the snapshot at `path` (Parquet or CSV); None empties it. Rows that
    cannot be read go to `corpus_rejects` with their reason (sql/stg_corpus_rows.sql).

    A snapshot is not read again while its file and the loader are unchanged since it was loaded
    (`corpus_snapshot` in sql/schema.sql): the nightly job finds the same snapshot most nights, and
    reading tens of millions of documents would be most of its `corpus` step."""
    if path is None:
        with transaction(conn):
            _empty_corpus(conn)
        return CorpusLoad(0, 0, False, None)
    loader = "".join(load_sql(name) for name in _CORPUS_STATEMENTS)
    snapshot = readers.corpus_fingerprint(Path(path)) | {
        "loader": hashlib.sha256(loader.encode()).hexdigest()[:16]
    }
    kept = conn.execute(load_sql("stg_corpus_kept"), snapshot).fetchall()
    if kept:
        ((documents, rejected, loaded_at),) = kept
        return CorpusLoad(documents, rejected, True, loaded_at, _first_corpus_rejects(conn))
    raw = readers.corpus_table(Path(path))
    for column in ("added_at", "deleted_at"):
        if column not in raw.column_names:
            raw = raw.append_column(column, pa.nulls(raw.num_rows, pa.string()))
    with registered(conn, "raw_corpus", raw), transaction(conn):
        conn.execute("create or replace temp view corpus_rows as " + load_sql("stg_corpus_rows"))
        _empty_corpus(conn)
        conn.execute("insert into corpus by name " + load_sql("int_corpus"))
        conn.execute(
            "insert into corpus_rejects by name select $source_file as source_file, source_line,"
            " doc_id, field, reason, added_given::varchar as added_at,"
            " deleted_given::varchar as deleted_at"
            " from corpus_rows where reason is not null",
            {"source_file": str(path)},
        )
        conn.execute("drop view corpus_rows")
        ((documents, rejected, loaded_at),) = conn.execute(
            "insert into corpus_snapshot by name select $source_file as source_file,"
            " $size_bytes as size_bytes, $modified_ns as modified_ns, $changed_ns as changed_ns,"
            " $loader as loader, (select count(*) from corpus) as documents,"
            " (select count(*) from corpus_rejects) as rejected, now() as loaded_at"
            " returning documents, rejected, loaded_at",
            snapshot,
        ).fetchall()
    return CorpusLoad(documents, rejected, False, loaded_at, _first_corpus_rejects(conn))


def _empty_corpus(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("delete from corpus")
    conn.execute("delete from corpus_rejects")
    conn.execute("delete from corpus_snapshot")


def _first_corpus_rejects(conn: duckdb.DuckDBPyConnection, count: int = 5) -> tuple[str, ...]:
    rows = conn.execute(
        "select source_file, source_line, reason from corpus_rejects"
        " order by source_line limit $count",
        {"count": count},
    ).fetchall()
    return tuple(f"{file}:{line}: {reason}" for file, line, reason in rows)


def build_labels(
    conn: duckdb.DuckDBPyConnection, start: date, end: date, use_corpus: bool
) -> LabelCounts:
    """Rebuild `labels` for partitions start..end (inclusive), marking stale ones."""
    params = {"start_date": start, "end_date": end, "use_corpus": use_corpus}
    replace_partitions(conn, "labels", (start, end), "int_labels", params)
    row = conn.execute(
        load_sql("agg_label_counts"), {"start_date": start, "end_date": end}
    ).fetchone()
    labels, stale, traces_with_stale = row if row else (0, 0, 0)
    return LabelCounts(int(labels), int(stale), int(traces_with_stale))


def compute_query_metrics(
    conn: duckdb.DuckDBPyConnection,
    metrics: Sequence[Metric],
    start: date,
    end: date,
    gain: Gain = "exponential",
    relevance_level: float = 1.0,
) -> MetricCounts:
    """Rebuild `query_metrics` (long: one row per trace and metric) for start..end inclusive."""
    params = {
        "start_date": start,
        "end_date": end,
        "cutoffs": sorted({m.k for m in metrics if m.k is not None}),
        "metric_names": [m.name for m in metrics],
        "relevance_level": check_relevance_level(relevance_level),
        "exponential_gain": check_gain(gain) == "exponential",
    }
    with strings_compressed(conn):
        replace_partitions(conn, "query_metrics", (start, end), "fct_query_metrics", params)
    row = conn.execute(
        load_sql("agg_metric_counts"),
        {"start_date": start, "end_date": end, "metric": metrics[0].name},
    ).fetchone()
    traces, annotated, no_relevant = row if row else (0, 0, 0)
    return MetricCounts(
        traces=int(traces),
        annotated=int(annotated),
        unannotated=int(traces) - int(annotated),
        no_relevant=int(no_relevant),
    )


def query_metrics_wide(
    conn: duckdb.DuckDBPyConnection, metrics: Sequence[Metric], start: date, end: date
) -> pd.DataFrame:
    """One row per trace: trace_id, query_id, segment, variant, n_retrieved, n_relevant,
    n_stale_labels, then one column per metric (canonical names), null when unannotated."""
    columns = [
        "trace_id",
        "query_id",
        "segment",
        "variant",
        "n_retrieved",
        "n_relevant",
        "n_stale_labels",
    ]
    names = [m.name for m in metrics]
    params = {"start_date": start, "end_date": end, "metric_names": names}
    conn.complete()  # DuckDB 2.0: no new query while an earlier execute() has unread rows
    table = conn.sql(load_sql("rpt_query_metrics"), params=params).to_arrow_table()
    if table.num_rows == 0:
        return pd.DataFrame(columns=columns + names)
    values = table.column("metric_values")
    wide = {column: table.column(column) for column in columns}
    for i, name in enumerate(names):
        wide[name] = pc.list_element(values, i).cast(pa.float64())
    return pa.table(wide).to_pandas()
