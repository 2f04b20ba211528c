"""The recent history of `segment_metrics`, read from the warehouse, and the pages built on it.

Knows nothing of Dagster. `read_segment_trend` runs `sql/rpt_segment_trend.sql`: the rows of the
last N partitions up to a day, which `html_report.trend_section` draws per segment and variant.
`write_regression_html` is the regression report's HTML file, as the `regression_report` asset
writes it beside the Markdown and JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd

from retrieval_pipeline import html_report
from retrieval_pipeline.comparison import ALL_SEGMENTS
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.report import RegressionReport
from retrieval_pipeline.warehouse.sql import load_sql

TREND_PARTITIONS = 30
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


def config_thresholds(config: PipelineConfig) -> dict[str, dict[str, float]]:
    """The configured thresholds keyed as `comparison.threshold_for` reads them: `*` the
    default of every segment, then each segment's overrides."""
    return {
        ALL_SEGMENTS: dict(config.thresholds),
        **{segment: dict(rule) for segment, rule in config.segment_thresholds.items()},
    }


def regression_page(
    conn: duckdb.DuckDBPyConnection,
    day_report: RegressionReport,
    config: PipelineConfig,
    last_n: int = TREND_PARTITIONS,
) -> str:
    """The self-contained HTML regression report of `day_report`, its trend read from the
    warehouse's `segment_metrics`."""
    metrics = list(day_report.headline_metrics) or list(config.headline_metrics)
    trend = read_segment_trend(conn, day_report.partition, metrics, last_n)
    return html_report.regression_html(
        day_report,
        trend=trend,
        thresholds=config_thresholds(config),
        min_coverage=config.checks.min_coverage,
        last_n=last_n,
    )


def write_regression_html(
    conn: duckdb.DuckDBPyConnection,
    day_report: RegressionReport,
    config: PipelineConfig,
    folder: Path,
) -> Path:
    """Write `regression_report_<day>.html` into `folder` (see `regression_page`); its path."""
    path = folder / f"regression_report_{day_report.partition.isoformat()}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(regression_page(conn, day_report, config), encoding="utf-8")
    return path
