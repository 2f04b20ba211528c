"""Why a day's reranker findings moved: sql/attr_stage_changes.sql run over
`stage_query_metrics` for the findings `reports.stage_why.stage_findings` and `stage_drops`
(over sql/attr_stage_drops.sql) name, read into
`reports.stage_why.StageWhy`s (docs/why.md, "The reranker's stages").

Knows nothing of Dagster. One pass over the day's and the baseline window's stage rows of the
findings' metrics; one row per query comes back.
"""

from __future__ import annotations

from datetime import date

import duckdb
import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.reports.stage_why import (
    EVERY_VARIANT,
    StageWhy,
    explain_stages,
    stage_drops,
    stage_findings,
)
from retrieval_pipeline.warehouse.session import registered
from retrieval_pipeline.warehouse.sql import load_sql


def explain_stage_day(
    conn: duckdb.DuckDBPyConnection,
    config: PipelineConfig,
    day: date,
    means: pd.DataFrame,
    gains: pd.DataFrame,
) -> tuple[StageWhy, ...]:
    """A `StageWhy` of each reranker finding of `day` (its stage means and gains as stored, and
    the output's significant drops against the configured baseline window); () without one."""
    if means.empty:
        return ()
    findings = stage_findings(means, gains, config.stages.thresholds, config.stages.min_gain)
    start, end = config.baseline.window(day)
    window = {
        "day": day,
        "baseline_start": start,
        "baseline_end": end,
    }
    conn.complete()
    findings += stage_drops(conn.execute(load_sql("attr_stage_drops"), window).df(), findings)
    if not findings:
        return ()
    keys = pd.DataFrame([f[:3] for f in findings], columns=["segment", "variant", "metric"])
    params = window | {"every_variant": EVERY_VARIANT}
    with registered(conn, "why_stage_findings", keys.drop_duplicates()):
        rows = conn.execute(load_sql("attr_stage_changes"), params).df()
    return explain_stages(findings, rows)
