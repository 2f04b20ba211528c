"""The live monitor's statements: its two tables (`live_window_metrics`, `live_alerts`), the open
alerts the `live_sustained_drop` check reads, a Parquet file's rows as JSON text, and the one
connection attempt a sensor tick makes.

Takes plain rows (`live.rows` builds them from events), so nothing here knows the monitor's
types. Rows are keyed by window (and segment, metric, event) and replaced on conflict, so writing
the same events again (a tick replayed after a crash) changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from retrieval_pipeline.warehouse.session import transaction
from retrieval_pipeline.warehouse.sql import load_sql

if TYPE_CHECKING:
    import pyarrow as pa


def open_warehouse(database: str) -> duckdb.DuckDBPyConnection:
    """One connection attempt, no retries: a sensor tick skipped on a locked file costs nothing,
    so it must not wait out the warehouse resource's back-off."""
    if database != ":memory:":
        # a missing folder fails like a lock: create it first
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return duckdb.connect(database)


def prepare_warehouse(conn: duckdb.DuckDBPyConnection) -> None:
    """UTC session and the live tables (`sql/live_windows_schema.sql`), created if missing."""
    conn.execute("set TimeZone = 'UTC'")
    conn.execute(load_sql("live_windows_schema"))


def record_events(
    conn: duckdb.DuckDBPyConnection,
    windows: Sequence[Mapping[str, Any]],
    alerts: Mapping[str, Sequence[Any]] | None,
) -> None:
    """Write closed windows (each one's `live.rows.window_rows`) and alert events
    (`live.rows.alert_rows`, or None when there are none) in one transaction."""
    prepare_warehouse(conn)
    with transaction(conn):
        for rows in windows:
            conn.execute(
                "insert or replace into live_window_metrics by name "
                + load_sql("stg_live_window_metrics"),
                rows,
            )
        if alerts is not None:
            conn.execute(
                "insert or replace into live_alerts by name " + load_sql("stg_live_alerts"),
                alerts,
            )


def open_alert_reasons(conn: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """Alerts in the warehouse that no recovery closed: `(segment, metric, reason)`."""
    prepare_warehouse(conn)
    rows = conn.execute(load_sql("rpt_live_open_alerts")).fetchall()
    return [(str(segment), str(metric), str(reason)) for segment, metric, reason, *_ in rows]


def rows_as_json(numbered: pa.Table) -> list[tuple[int, str]]:
    """Rows of a Parquet slice (an Arrow table numbered by `ingest.pieces.numbered_rows`) as the
    JSON text batch ingestion makes of them (`sql/stg_rows_as_json.sql`): `(line, text)` in
    order."""
    with duckdb.connect() as conn:
        conn.register("raw_rows", numbered)
        raw = conn.execute(load_sql("stg_rows_as_json")).fetchall()
    return [(int(row[2]), str(row[3])) for row in raw]
