"""The corpus snapshot file (Parquet or CSV of `doc_id`, `added_at`, `deleted_at`): its rows with
their line numbers, whole or a part at a time, and the fingerprint that tells one version of the
file from the next."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.files import TraceFileError

# The snapshot's columns that are read, doc_id first; the others are ignored.
COLUMNS = ("doc_id", "added_at", "deleted_at")
# The fewest rows `scan_corpus` hands on at a time (a CSV is read in pyarrow's blocks of 1 MiB).
STREAM_ROWS = 65_536

T = TypeVar("T")


def corpus_fingerprint(path: Path) -> dict[str, object]:
    """What tells a corpus snapshot file from its next version without reading it, as make and
    rsync do: its path, size and times (sql/stg_corpus_kept.sql compares them)."""
    try:
        found = path.stat()
    except FileNotFoundError as exc:
        raise TraceFileError(f"{path}: no such corpus file") from exc
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read the corpus snapshot ({exc})") from exc
    return {
        "source_file": str(path.absolute()),
        "size_bytes": found.st_size,
        "modified_ns": found.st_mtime_ns,
        "changed_ns": found.st_ctime_ns,
    }


def corpus_table(path: Path) -> pa.Table:
    """Read a corpus snapshot (Parquet or CSV with `doc_id`, optional added_at, deleted_at), each
    row with its `source_line`: the CSV line (the header is line 1) or the Parquet row (from 1)."""
    if not path.is_file():
        raise TraceFileError(f"{path}: no such corpus file")
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            table = pq.read_table(path)
        elif name.endswith((".csv", ".csv.gz")):
            table = pacsv.read_csv(path, **_csv_options())
        else:
            raise TraceFileError(f"{path}: a corpus snapshot must be .parquet or .csv")
    except (OSError, pa.ArrowException) as exc:
        raise TraceFileError(f"{path}: cannot read the corpus snapshot ({exc})") from exc
    if "doc_id" not in table.column_names:
        raise TraceFileError(f"{path}: the corpus snapshot has no doc_id column")
    return _shaped(table, 1 if name.endswith(".parquet") else 2)


def scan_corpus(path: Path, scan: Callable[[Iterator[pa.Table]], T], rows: int = 0) -> T:
    """`scan` over the rows `corpus_table(path)` gives, in tables of at least `rows` rows (and of
    `STREAM_ROWS`; the last may hold fewer): the same columns, types, rows and `source_line`,
    without the file ever held whole. A reader that keeps a few of the rows needs memory for those
    and one table; a shard's corpus (warehouse.corpus) asks for tables as large as the documents
    it needs, since each table is then matched against all of those.

    A file that cannot be streamed so is read whole by `corpus_table`, and `scan` runs again from
    its start over that one table (or the reader's `TraceFileError` is raised): a CSV whose later
    lines do not fit the column types pyarrow's streaming reader took from its first block
    (`read_csv` widens the column instead, to text for a bad time that is then rejected), or a
    file `corpus_table` refuses. `scan` must therefore start over when called again."""
    size = max(rows, STREAM_ROWS)
    try:
        return scan(_gathered(_streamed(path, size), size))
    except _NotStreamed:
        return scan(iter([corpus_table(path)]))


class _NotStreamed(Exception):
    """The streaming reader cannot give this file's rows as `corpus_table` does."""


def _gathered(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """`batches` gathered into tables of at least `rows` rows, the last of what is left."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(held)
            held, count = [], 0
    if held:
        yield pa.Table.from_batches(held)


def _streamed(path: Path, rows: int) -> Iterator[pa.RecordBatch]:
    """The snapshot's batches (Parquet: of `rows` rows at most; CSV: pyarrow's blocks) as
    `corpus_table` shapes its rows; `_NotStreamed` when it cannot give them so."""
    name = path.name.lower()
    parquet = name.endswith(".parquet")
    if not path.is_file() or not (parquet or name.endswith((".csv", ".csv.gz"))):
        raise _NotStreamed
    line = 1 if parquet else 2
    try:
        if parquet:
            with pq.ParquetFile(path) as source:
                columns = [c for c in COLUMNS if c in source.schema_arrow.names]
                if "doc_id" not in columns:
                    raise _NotStreamed
                for batch in source.iter_batches(rows, columns=columns):
                    yield _shaped(batch, line)
                    line += batch.num_rows
        else:
            with pacsv.open_csv(path, **_csv_options()) as reader:
                if "doc_id" not in reader.schema.names:
                    raise _NotStreamed
                for batch in reader:
                    yield _shaped(batch, line)
                    line += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise _NotStreamed from exc


_Rows = TypeVar("_Rows", pa.Table, pa.RecordBatch)


def _shaped(rows: _Rows, first_line: int) -> _Rows:
    """The rows' columns of `COLUMNS` (doc_id first), doc_id as text, and each row's
    `source_line` counted from `first_line`: the whole file's or a batch's, the same way."""
    keep: list[str] = [c for c in COLUMNS if c in rows.schema.names]
    columns: list[Any] = [rows.column(c) for c in keep]
    columns[0] = columns[0].cast(pa.string())
    lines = pa.array(np.arange(first_line, first_line + rows.num_rows, dtype=np.int64))
    return type(rows).from_arrays([*columns, lines], names=[*keep, "source_line"])


def _csv_options() -> dict[str, object]:
    """How a CSV snapshot is read, whole or streamed."""
    return {
        # a blank line is a row (of nulls), so that every row's number is its line's
        "parse_options": pacsv.ParseOptions(ignore_empty_lines=False),
        "convert_options": pacsv.ConvertOptions(
            column_types={"doc_id": pa.string()}, strings_can_be_null=True
        ),
    }
