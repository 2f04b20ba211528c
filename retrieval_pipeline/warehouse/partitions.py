"""Partition writes: every warehouse table carries `partition_date`, and a write replaces the
given dates whole or not at all, so re-running a day never duplicates rows.

Writes name the stored table (`stored`): a session may show `traces`, `labels` and
`query_metrics` as views that add a sharded day's rows left in Parquet (`merged_days`), and
deleting a day's partitions of those tables forgets its files too."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import duckdb

from retrieval_pipeline.warehouse.merged_days import qualified, unregister
from retrieval_pipeline.warehouse.session import transaction
from retrieval_pipeline.warehouse.sql import load_sql

# Partitioned tables a statement may replace. Table names are checked against this list (they
# are identifiers, not values); every value is bound as a parameter.
PARTITIONED_TABLES = (
    "traces",
    "quarantine",
    "labels",
    "query_metrics",
    "label_agreement",
    "stage_query_metrics",
    "segment_statistics",
)
# Every partition date a record can carry (years 0001..9999), as an inclusive range.
ALL_DATES = (date(1, 1, 1), date(9999, 12, 31))
# The tables an ingestion fills, and the statement that shapes a piece's rows for each.
INGESTED_TABLES = {"traces": "int_valid_traces", "quarantine": "int_quarantined_records"}


def delete_partitions(
    conn: duckdb.DuckDBPyConnection, table: str, dates: Sequence[date] | tuple[date, date]
) -> None:
    """Delete the partitions: a list of dates, or an inclusive `(start, end)` range."""
    target = stored(conn, table)
    if isinstance(dates, tuple):
        conn.execute(
            f"delete from {target} where partition_date between $start and $end",
            {"start": dates[0], "end": dates[1]},
        )
    else:
        conn.execute(
            f"delete from {target} where list_contains($dates, partition_date)",
            {"dates": list(dates)},
        )
    unregister(conn, table, dates)


def insert(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    statement: str,
    params: dict[str, object] | None = None,
) -> None:
    """Insert the rows of `sql/<statement>.sql` into `table`."""
    conn.execute(f"insert into {stored(conn, table)} by name " + load_sql(statement), params or {})


def stored(conn: duckdb.DuckDBPyConnection, table: str) -> str:
    """The stored table's name, qualified by the session's database: a temporary view of the
    same name (`merged_days.show_merged_rows`) would take an unqualified one. Table names are
    checked against PARTITIONED_TABLES (they are identifiers, not values)."""
    if table not in PARTITIONED_TABLES:
        raise ValueError(f"{table!r} is not a partitioned warehouse table")
    return qualified(conn, table)


def replace_partitions(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    dates: Sequence[date] | tuple[date, date],
    statement: str,
    params: dict[str, object] | None = None,
) -> None:
    """Delete the partitions from `table`, insert the rows of `sql/<statement>.sql`, atomically."""
    with transaction(conn):
        delete_partitions(conn, table, dates)
        insert(conn, table, statement, params)
