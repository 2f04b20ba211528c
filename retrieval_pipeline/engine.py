"""Batch engine: ingestion, stale-label filtering and metrics in DuckDB, driven by `sql/` files.

Knows nothing of Dagster: the pipeline's assets and the `evaluate` command call the same functions.
Every table carries `partition_date`; functions that write replace the given dates in one
transaction, so re-running a day never duplicates rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TypeAlias

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

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


@dataclass(frozen=True)
class LabelCounts:
    labels: int
    stale: int
    traces_with_stale: int


@dataclass(frozen=True)
class MetricCounts:
    traces: int
    annotated: int
    unannotated: int
    no_relevant: int


def connect(database: str | Path = ":memory:") -> duckdb.DuckDBPyConnection:
    """Open the warehouse (UTC session time zone) and create missing tables."""
    if str(database) != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    conn = duckdb.connect(str(database))
    prepare(conn)
    return conn


def prepare(conn: duckdb.DuckDBPyConnection) -> None:
    """Set the session up for the statements in sql/ and create missing tables."""
    # A timestamp without an offset means UTC (the trace contract), whatever the machine says.
    conn.execute("set TimeZone = 'UTC'")
    conn.execute(load_sql("schema"))
    conn.execute(load_sql("macros"))


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


def _delete_and_insert(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    dates: Sequence[date] | tuple[date, date],
    statement: str,
    params: dict[str, object] | None = None,
) -> None:
    """Delete the partitions (a list of dates, or an inclusive `(start, end)` range) and insert."""
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
        _delete_and_insert(conn, table, dates, statement, params)


def _raw_records(conn: duckdb.DuckDBPyConnection, source: TraceSource) -> tuple[pa.Table, int]:
    """Every record of `source` as raw JSON text with its file and line (or row), and the
    number of files read."""
    if isinstance(source, pd.DataFrame):
        # pandas' own JSON keeps dict columns as objects (Arrow would make them wide structs).
        text = source.to_json(orient="records", lines=True, date_format="iso", date_unit="us")
        return readers.jsonl_table(text.encode("utf-8"), "<DataFrame>"), 1
    if isinstance(source, pa.Table):
        return _rows_as_raw(conn, source, "<Arrow table>", 0), 1
    files = readers.discover(source)
    parts = [readers.read_jsonl_files(files)]
    for order, trace_file in enumerate(files):
        if trace_file.kind == "parquet":
            rows = readers.parquet_table(trace_file.path)
            parts.append(_rows_as_raw(conn, rows, str(trace_file.path), order))
    return pa.concat_tables(parts), len(files)


def _rows_as_raw(
    conn: duckdb.DuckDBPyConnection, rows: pa.Table, source_file: str, file_order: int
) -> pa.Table:
    """Parquet or DataFrame rows as JSON text, so one set of rules validates every input."""
    if "__source_row" in rows.column_names:
        raise readers.TraceFileError(f"{source_file}: column name __source_row is reserved")
    rows = readers.struct_scores_as_json(rows)
    try:
        return _rows_as_json(conn, rows, source_file, file_order)
    except duckdb.InvalidInputException as exc:
        if "duplicate key" not in str(exc):
            raise
        return _rows_as_json(conn, readers.maps_as_json(rows), source_file, file_order)


def _rows_as_json(
    conn: duckdb.DuckDBPyConnection, rows: pa.Table, source_file: str, file_order: int
) -> pa.Table:
    numbered = rows.append_column("__source_row", pa.array(range(1, rows.num_rows + 1)))
    with registered(conn, "raw_rows", numbered):
        raw = conn.sql(
            load_sql("stg_rows_as_json"),
            params={"source_file": source_file, "file_order": file_order},
        ).to_arrow_table()
    return raw.cast(readers.RAW_SCHEMA)


def _lists_that_may_repeat(ids: pa.ListArray) -> np.ndarray:
    """Rows whose list may hold an id twice: two items of one list with the same length and the
    same last 8 bytes. Every real repeat is among them; a false alarm only costs an exact look."""
    items = ids.flatten()
    if len(items) == 0:
        return np.zeros(0, dtype=np.int64)
    offset_type = np.int64 if pa.types.is_large_string(items.type) else np.int32
    offsets = np.frombuffer(items.buffers()[1], dtype=offset_type)
    offsets = offsets[items.offset : items.offset + len(items) + 1]
    # 8 zero bytes first, so the 8-byte window that ends where an item ends is always inside
    data = np.concatenate((np.zeros(8, np.uint8), np.frombuffer(items.buffers()[2], np.uint8)))
    windows = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    lengths = np.diff(offsets)
    keys = windows[offsets[1:]]  # the 8 bytes before each item's end, its own last
    # keep the item's own bytes only: the window's first 8 - length bytes belong to others
    short = np.flatnonzero(lengths < 8)
    keys[short] >>= (8 * (8 - lengths[short])).astype(np.uint64)
    keys[lengths == 0] = 0
    # mix in the length, keep the top 32 bits, and put the row number above them (in place:
    # these arrays hold one number per retrieved id)
    keys *= np.uint64(0x9E3779B97F4A7C15)  # wraps, as meant
    np.add(keys, lengths, out=keys, casting="unsafe")
    keys >>= np.uint64(32)
    keys |= np.repeat(
        np.arange(len(ids), dtype=np.uint64) << np.uint64(32),
        pc.list_value_length(ids).fill_null(0).to_numpy(zero_copy_only=False),
    )
    keys.sort()
    equal = keys[1:][keys[1:] == keys[:-1]]
    return np.unique(equal >> np.uint64(32)).astype(np.int64)


def keep_first_occurrences(staged: pa.Table) -> pa.Table:
    """`staged` (rows of sql/stg_trace_records.sql) with each list's repeated retrieved ids
    dropped after their first occurrence and `n_duplicate_ids` counting them.

    Done here, vectorized, because DuckDB's per-list distinct or sort costs as much as the rest
    of the validation (bench/README.md, "Where the time goes"): the few lists that may repeat an
    id are found at once, then walked exactly."""
    ids = staged.column("retrieved_ids").combine_chunks()
    offsets = ids.offsets.to_numpy()
    keep = np.ones(len(ids.values), dtype=bool)
    dropped = np.zeros(staged.num_rows, dtype=np.int32)
    for row in _lists_that_may_repeat(ids):
        start, end = int(offsets[row]), int(offsets[row + 1])
        seen: set[object] = set()
        for position, doc_id in enumerate(ids.values.slice(start, end - start).to_pylist()):
            if doc_id in seen:
                keep[start + position] = False
            seen.add(doc_id)
        dropped[row] = end - start - int(keep[start:end].sum())
    if dropped.any():
        kept_before = np.concatenate(([0], np.cumsum(keep)))
        ids = pa.ListArray.from_arrays(
            pa.array(kept_before[offsets].astype(np.int32)),
            ids.values.filter(pa.array(keep)),
            mask=ids.is_null(),
        )
    index = staged.column_names.index("retrieved_ids")
    staged = staged.set_column(index, "retrieved_ids", ids)
    return staged.append_column("n_duplicate_ids", pa.array(dropped))


def ingest_traces(
    conn: duckdb.DuckDBPyConnection,
    source: TraceSource,
    partition_date: date | None = None,
) -> IngestCounts:
    """Validate records into `traces`, the rest into `quarantine`.

    With `partition_date` (the trace store's day) every record is stored under that date and that
    date is replaced; the store's day is authoritative, so a valid record whose timestamp falls on
    another UTC day is kept there and counted (`outside_day`). Without, each record goes under the
    UTC date of its own timestamp and every date present is replaced.
    """
    raw, n_files = _raw_records(conn, source)
    with registered(conn, "raw_records", raw):
        # Held as Arrow, not a DuckDB table: DuckDB 2.0 writes a persistent table several
        # times faster from Arrow than from another table (bench/README.md, "Where the time goes").
        staged = conn.sql(
            load_sql("stg_trace_records"), params={"partition_date": partition_date}
        ).to_arrow_table()
    del raw
    staged = keep_first_occurrences(staged)
    with registered(conn, "stg_trace_records", staged):
        if partition_date is not None:
            dates = [partition_date]
        else:
            dates = [
                row[0]
                for row in conn.execute(
                    "select distinct partition_date from stg_trace_records"
                    " where partition_date is not null"
                ).fetchall()
            ]
        # One transaction for both tables: a record is in exactly one of them.
        with transaction(conn):
            _delete_and_insert(conn, "traces", dates, "int_valid_traces")
            _delete_and_insert(conn, "quarantine", dates, "int_quarantined_records")
        row = conn.execute(load_sql("agg_ingest_counts")).fetchone()
        outside = conn.execute(
            "select count(*) from stg_trace_records where outside_partition_day"
        ).fetchone()
    read, valid, duplicates = row if row else (0, 0, 0)
    return IngestCounts(
        files=n_files,
        read=int(read),
        valid=int(valid),
        quarantined=int(read) - int(valid),
        duplicate_ids_dropped=int(duplicates),
        outside_day=int(outside[0]) if outside else 0,
    )


def load_corpus(conn: duckdb.DuckDBPyConnection, path: Path | None) -> int:
    """Replace `corpus` with the snapshot at `path` (Parquet or CSV); None empties it."""
    if path is None:
        raw = pa.table({"doc_id": pa.array([], pa.string())})
    else:
        raw = readers.corpus_table(Path(path))
    for column in ("added_at", "deleted_at"):
        if column not in raw.column_names:
            raw = raw.append_column(column, pa.nulls(raw.num_rows, pa.string()))
    with registered(conn, "raw_corpus", raw), transaction(conn):
        conn.execute("delete from corpus")
        conn.execute("insert into corpus by name " + load_sql("stg_corpus"))
    row = conn.execute("select count(*) from corpus").fetchone()
    return int(row[0]) if row else 0


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
    replace_partitions(conn, "query_metrics", (start, end), "fct_query_metrics", params)
    row = conn.execute(
        load_sql("agg_metric_counts"), {"start_date": start, "end_date": end}
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
