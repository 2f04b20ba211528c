"""The recent history of `segment_metrics`, read from the warehouse for the reports' trend.

`read_segment_trend` runs `sql/rpt_segment_trend.sql`: the rows of the last N partitions up to a
day, which `reports.trend_chart.trend_section` draws per segment and variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import duckdb
import pandas as pd

from retrieval_pipeline.reports.trend_chart import TREND_PARTITIONS
from retrieval_pipeline.warehouse.sql import load_sql

TREND_COLUMNS = (
    "partition_date",
    "segment",
    "variant",
    "metric",
    "traces",
    "annotated_traces",
    "coverage",
    "mean",
    "ci_low",
    "ci_high",
    "threshold",
    "status",
)


def read_segment_trend(
    conn: duckdb.DuckDBPyConnection,
    end: date,
    metrics: Sequence[str],
    last_n: int = TREND_PARTITIONS,
) -> pd.DataFrame:
    """`segment_metrics` rows of `metrics` over the last `last_n` partitions holding rows, up to
    and including `end` (empty, with the columns, when there are none or no table yet)."""
    if last_n < 1:
        raise ValueError(f"last_n must be >= 1, got {last_n}")
    exists = conn.execute(
        "select count(*) from information_schema.tables where table_name = 'segment_metrics'"
    ).fetchone()
    if not exists or not exists[0]:
        return pd.DataFrame(columns=list(TREND_COLUMNS))
    return conn.execute(
        load_sql("rpt_segment_trend"),
        {"end_date": end, "metrics": list(metrics), "last_n": last_n},
    ).df()
