"""The nightly pipeline's aggregate steps: segment metrics, the regression rows and the
data-quality counts its checks read.

Knows nothing of Dagster (the assets in `defs/nightly/` call these). Like the other tables, the two
tables written here carry `partition_date` and are replaced date range by date range inside one
transaction, so re-running a day never duplicates rows. They are created on first use from their
own SELECT (`create table ... as <select> with no data`), so the statement file is the one
definition of their columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import duckdb
import pandas as pd

from retrieval_pipeline.config import PipelineConfig, thresholds_frame
from retrieval_pipeline.intervals import Z_95
from retrieval_pipeline.warehouse.session import registered, transaction
from retrieval_pipeline.warehouse.sql import load_sql
from retrieval_pipeline.warehouse.steps import build_segment_statistics

# Tables this module owns -> the statement that fills them. Table names are identifiers checked
# against this mapping, never values; every value is bound as a parameter.
_STATEMENTS = {
    "segment_metrics": "agg_segment_metrics",
    "regression_report": "rpt_regression",
}


@dataclass(frozen=True)
class QualityCounts:
    """What the data-quality checks compare with their limits, for a range of partitions."""

    records_read: int
    valid_records: int
    quarantined_records: int
    labels: int
    stale_labels: int
    corpus_documents: int
    corpus_deleted: int

    @property
    def quarantine_rate(self) -> float | None:
        """Share of records read that were quarantined; None when nothing was read."""
        return self.quarantined_records / self.records_read if self.records_read else None

    @property
    def stale_label_rate(self) -> float | None:
        """Share of labels dropped as stale; None when there are no labels."""
        return self.stale_labels / self.labels if self.labels else None


def _replace(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    start: date,
    end: date,
    params: dict[str, object],
) -> None:
    statement = load_sql(_STATEMENTS[table])
    with transaction(conn):
        conn.execute(f"create table if not exists {table} as {statement} with no data", params)
        conn.execute(
            f"delete from {table} where partition_date between $start and $end",
            {"start": start, "end": end},
        )
        conn.execute(f"insert into {table} by name {statement}", params)


def _read(conn: duckdb.DuckDBPyConnection, table: str, start: date, end: date) -> pd.DataFrame:
    exists = conn.execute(
        "select count(*) from information_schema.tables where table_name = $name", {"name": table}
    ).fetchone()
    if not exists or not exists[0]:
        return pd.DataFrame()
    return conn.execute(
        f"select * from {_checked(table)} where partition_date between $start and $end"
        " order by all",
        {"start": start, "end": end},
    ).df()


def _checked(table: str) -> str:
    if table not in _STATEMENTS:
        raise ValueError(f"{table!r} is not a table of the nightly pipeline")
    return table


def build_segment_metrics(
    conn: duckdb.DuckDBPyConnection, config: PipelineConfig, start: date, end: date
) -> pd.DataFrame:
    """Rebuild `segment_metrics` for partitions start..end (inclusive) and return its rows: from
    `segment_statistics`, built first from the `query_metrics` rows of any partition without
    them (a sharded day's come pooled from its shards)."""
    build_segment_statistics(conn, start, end)
    params: dict[str, object] = {"start_date": start, "end_date": end, "z": Z_95}
    with registered(conn, "metric_thresholds", thresholds_frame(config)):
        _replace(conn, "segment_metrics", start, end, params)
    return read_segment_metrics(conn, start, end)


def read_segment_metrics(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> pd.DataFrame:
    """The stored `segment_metrics` rows of partitions start..end (empty if none)."""
    return _read(conn, "segment_metrics", start, end)


def build_regression_rows(
    conn: duckdb.DuckDBPyConnection, config: PipelineConfig, day: date
) -> pd.DataFrame:
    """Rebuild `regression_report` for `day` against the configured baseline; return its rows."""
    baseline_start, baseline_end = config.baseline.window(day)
    params: dict[str, object] = {
        "day": day,
        "baseline_start": baseline_start,
        "baseline_end": baseline_end,
    }
    _replace(conn, "regression_report", day, day, params)
    return read_regression_rows(conn, day, day)


def read_regression_rows(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> pd.DataFrame:
    """The stored `regression_report` rows of partitions start..end (empty if none)."""
    return _read(conn, "regression_report", start, end)


def label_sources(conn: duckdb.DuckDBPyConnection, day: date) -> tuple[tuple[str, str, int], ...]:
    """(variant, label source, annotated traces) of partition `day` (sql/agg_label_sources.sql)."""
    rows = conn.execute(load_sql("agg_label_sources"), {"day": day}).fetchall()
    return tuple((str(variant), str(source), int(n)) for variant, source, n in rows)


def quality_counts(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> QualityCounts:
    """Records read and quarantined, labels and stale labels for partitions start..end."""
    frame = conn.execute(
        load_sql("agg_partition_quality"), {"start_date": start, "end_date": end}
    ).df()
    row = frame.iloc[0]
    return QualityCounts(**{name: int(row[name]) for name in QualityCounts.__dataclass_fields__})
