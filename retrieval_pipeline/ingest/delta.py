"""A Delta Lake table partitioned by date, read one day's partition at a time as Arrow batches.

A lakehouse holds a day's traces as the partition `date=YYYY-MM-DD` of a Delta table, locally or
in an object store (`s3://bucket/table`). The table is opened with `deltalake` (the delta-rs
bindings: no Spark, no DuckDB extension), only the day's files are listed (Delta's file pruning
on the partition value) and they are read in record batches, so memory stays at one batch. The
object store is reached with the same settings as `filesystems` (`S3Settings`: endpoint,
region, timeouts, attempts); credentials come from the environment, as for every AWS tool.

`deltalake` is an optional dependency (the `delta` extra); it is imported only when a table is
read.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa

from retrieval_pipeline.ingest.filesystems import (
    S3_SCHEME,
    S3Settings,
    StoreError,
    describe_failure,
    is_url,
)

DEFAULT_PARTITION_COLUMN = "date"
BATCH_ROWS = 50_000


class DeltaTableError(ValueError):
    """A Delta table that cannot be used as a trace store: the message names it."""


def _table(table_url: str | Path, settings: S3Settings | None) -> tuple[Any, str]:
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise DeltaTableError(
            "reading a Delta table needs the deltalake package: pip install "
            "'retrieval-pipeline[delta]'"
        ) from exc
    if is_url(table_url):
        url = str(table_url)
        if not url.startswith(S3_SCHEME):
            raise StoreError(f"{url}: unsupported store; use a local path or s3://")
        chosen = settings or S3Settings()
        options: dict[str, str] | None = chosen.storage_options()
        endpoint = chosen.endpoint()
    else:
        url = str(Path(table_url).expanduser().absolute())
        options, endpoint = None, None
    try:
        return DeltaTable(url, storage_options=options), url
    except TableNotFoundError as exc:
        raise DeltaTableError(f"{url}: no Delta table there ({_first_line(exc)})") from exc
    except OSError as exc:
        raise StoreError(describe_failure(url, endpoint, str(exc))) from exc


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def _partition_column(table: Any, url: str, column: str) -> None:
    columns = list(table.metadata().partition_columns)
    if column not in columns:
        shown = ", ".join(columns) or "no column"
        raise DeltaTableError(f"{url}: the table is not partitioned by {column} (by {shown})")


def delta_days(
    table_url: str | Path,
    partition_column: str = DEFAULT_PARTITION_COLUMN,
    settings: S3Settings | None = None,
) -> list[date]:
    """The days the table holds, oldest first; a partition value that is not a date is refused."""
    table, url = _table(table_url, settings)
    _partition_column(table, url, partition_column)
    days: set[date] = set()
    for partition in table.partitions():
        value = partition.get(partition_column)
        try:
            days.add(date.fromisoformat(str(value)))
        except ValueError as exc:
            raise DeltaTableError(
                f"{url}: partition {partition_column}={value} is not a date (YYYY-MM-DD)"
            ) from exc
    return sorted(days)


def read_delta_day(
    table_url: str | Path,
    day: date,
    partition_column: str = DEFAULT_PARTITION_COLUMN,
    settings: S3Settings | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The rows of the day's partition, a record batch at a time (none when the table holds no
    such day); every column of the table, the partition column included."""
    table, url = _table(table_url, settings)
    _partition_column(table, url, partition_column)
    endpoint = settings.endpoint() if settings is not None else S3Settings().endpoint()
    try:
        dataset = table.to_pyarrow_dataset(
            file_pruning_predicate=[(partition_column, "=", day.isoformat())]
        )
        yield from dataset.to_batches(batch_size=batch_rows)
    except OSError as exc:
        raise StoreError(
            describe_failure(url, endpoint if is_url(url) else None, str(exc))
        ) from exc


def is_delta_table(table_url: str | Path, settings: S3Settings | None = None) -> bool:
    """Whether `table_url` (a local folder or an `s3://` URL) holds a Delta table: a
    `_delta_log/` beside its data files."""
    if not is_url(table_url):
        return (Path(table_url).expanduser() / "_delta_log").is_dir()
    from retrieval_pipeline.ingest.filesystems import list_files, resolve

    log = resolve(f"{str(table_url).rstrip('/')}/_delta_log/", settings)
    try:
        return bool(list_files(log))
    except (StoreError, OSError, ValueError):
        return False


def table_version(table_url: str | Path, settings: S3Settings | None = None) -> tuple[str, int]:
    """The table's URL as opened and its current version."""
    table, url = _table(table_url, settings)
    return url, int(table.version())


def read_delta_table(
    table_url: str | Path, settings: S3Settings | None = None, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Every row of the table's current version (the files its log keeps, not every Parquet
    file in its folder: older versions' files stay there until vacuumed), a batch at a time."""
    table, url = _table(table_url, settings)
    endpoint = settings.endpoint() if settings is not None else S3Settings().endpoint()
    try:
        yield from table.to_pyarrow_dataset().to_batches(batch_size=batch_rows)
    except OSError as exc:
        raise StoreError(
            describe_failure(url, endpoint if is_url(url) else None, str(exc))
        ) from exc
