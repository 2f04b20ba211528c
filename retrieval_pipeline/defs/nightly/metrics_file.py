"""The nightly numbers for Prometheus: `regression_report` writes the newest day's segment metrics
and quality counts to `$RETRIEVAL_PIPELINE_METRICS_DIR/retrieval_pipeline.prom`, and the deploy
gate, once it approves that day, records the last success in it (docs/operations.md).

Nothing happens while the variable is unset. prometheus_client (the `prometheus` extra) is imported
only when it is set, and its absence then fails the asset with the command that installs it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from types import ModuleType

import dagster as dg
import duckdb

from retrieval_pipeline import environment
from retrieval_pipeline.warehouse import nightly
from retrieval_pipeline.warehouse import stages as stages_table

METRICS_DIR_ENV = environment.METRICS_DIR


def _writer() -> ModuleType | None:
    """reports.prometheus when the variable is set (None when unset); dg.Failure in words when it
    is set but unusable."""
    import os

    if not os.environ.get(METRICS_DIR_ENV, "").strip():
        return None
    try:
        from retrieval_pipeline.reports import prometheus
    except ModuleNotFoundError as exc:
        raise dg.Failure(
            description=f"{METRICS_DIR_ENV} is set, but {exc}",
        ) from exc
    return prometheus


def _file() -> tuple[ModuleType, Path] | None:
    """reports.prometheus and the metrics file's path; None when no file is configured;
    dg.Failure in words when the variable names no folder."""
    prometheus = _writer()
    if prometheus is None:
        return None
    try:
        path = prometheus.metrics_path()
    except prometheus.MetricsFileError as exc:
        raise dg.Failure(description=str(exc)) from exc
    return (prometheus, path) if path is not None else None


def _said(outcome: object, path: Path) -> dict[str, str]:
    written, reason = getattr(outcome, "written", False), getattr(outcome, "reason", "")
    return {"metrics_file": str(path) if written else f"{path} {reason}"}


def write_day(conn: duckdb.DuckDBPyConnection, day: date) -> dict[str, str]:
    """Write `day`'s numbers to the metrics file (unless it holds a later day); the metadata
    that says what happened, empty when no file is configured."""
    found = _file()
    if found is None:
        return {}
    prometheus, path = found
    rows = nightly.read_segment_metrics(conn, day, day).to_dict(orient="records")
    if not rows:
        return {"metrics_file": f"not written: no segment metrics for {day.isoformat()}"}
    quality = nightly.quality_counts(conn, day, day)
    stages = (
        stages_table.read_stage_metrics(conn, day, day).to_dict(orient="records"),
        stages_table.read_stage_gains(conn, day, day).to_dict(orient="records"),
    )
    outcome = prometheus.write_metrics_file(
        path, rows, quality, datetime.now(UTC), succeeded=False, stages=stages
    )
    return _said(outcome, path)


def record_success(day: date) -> dict[str, str]:
    """Mark the metrics file's `day` as a success now (the gate approved it); metadata as above."""
    found = _file()
    if found is None:
        return {}
    prometheus, path = found
    return _said(prometheus.record_success(path, day, datetime.now(UTC)), path)
