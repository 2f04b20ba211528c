"""Why the day's findings moved: the attribution statements (sql/attr_*.sql) run for the misses
and significant drops of a day's report, read into `reports.why.Explanation`s.

Knows nothing of Dagster. Everything over every query runs in SQL, over query_metrics (one pass
for all findings of the day); only the labels of each finding's top queries' traces
(`why.SPLIT_QUERIES`, their latest `why.TRACES_PER_SIDE` traces a side) come back to be re-scored
with the baseline's labels, and the day's served top k of the queries shown (docs/why.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from typing import Any

import duckdb
import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.metrics import parse_metric
from retrieval_pipeline.reports import why
from retrieval_pipeline.reports.regression import RegressionReport
from retrieval_pipeline.reports.why_causes import Scoring
from retrieval_pipeline.text import finite
from retrieval_pipeline.warehouse.session import registered
from retrieval_pipeline.warehouse.sql import load_sql

Finding = tuple[str, str, str, str]  # segment, variant, metric, kind ("miss" or "watch")


def scoring_of(config: PipelineConfig, metric: str) -> Scoring:
    """How query_metrics scored `metric` under `config`, for re-scoring a trace the same way."""
    return Scoring(
        parse_metric(metric),
        config.gain,
        config.relevance_level,
        gmax=config.gmax,
        judged_only=config.judged_only,
    )


def explain_findings(
    conn: duckdb.DuckDBPyConnection,
    config: PipelineConfig,
    day: date,
    findings: Sequence[Finding],
) -> tuple[why.Explanation, ...]:
    """An `Explanation` of each finding of `day` against the configured baseline window (one
    without baseline data has none), in the order given."""
    unique = list(dict.fromkeys(findings))
    if not unique:
        return ()
    start, end = config.baseline.window(day)
    window = {"day": day, "baseline_start": start, "baseline_end": end}
    keys_frame = pd.DataFrame(
        [f[:3] for f in unique], columns=["segment", "variant", "metric"]
    ).drop_duplicates()
    # why_query_changes, temporary: the per-query rows of the day's findings, which
    # sql/attr_finding_parts.sql and sql/attr_top_queries.sql read
    conn.execute("drop table if exists why_query_changes")
    try:
        with registered(conn, "why_findings", keys_frame):
            conn.execute(
                "create temporary table why_query_changes as " + load_sql("attr_query_changes"),
                window,
            )
        parts = conn.execute(load_sql("attr_finding_parts")).df()
        top = conn.execute(load_sql("attr_top_queries"), {"top": why.SPLIT_QUERIES}).df()
    finally:
        conn.execute("drop table if exists why_query_changes")
    if top.empty:
        return why.explain(unique, parts, top, {}, {})
    keys = ["segment", "variant", "metric", "query_id"]
    with registered(conn, "why_queries", why.split_plan(top)[keys]):
        rows = _records(conn, "attr_query_traces", {**window, "per_side": why.TRACES_PER_SIDE})
    scorings = {metric: scoring_of(config, metric) for metric in keys_frame["metric"].unique()}
    explained = why.explain(unique, parts, top, why.query_traces(rows), scorings)
    wanted = why.served_ids_wanted(explained)
    if not wanted:
        return explained
    # the day's id lists, the widest column, read only where coverage moved the mean
    shown = pd.DataFrame(wanted, columns=keys)
    depth = max(scoring_of(config, str(m)).depth for m in shown["metric"].unique())
    with registered(conn, "why_shown", shown):
        served = _records(conn, "attr_day_top", {"day": day, "depth": depth})
    tops = {str(r["trace_id"]): r["top_ids"] or [] for r in served}
    chosen = set(wanted)
    kept = [r for r in rows if (r["segment"], r["variant"], r["metric"], r["query_id"]) in chosen]
    return why.with_served_ids(explained, why.query_traces(kept, tops))


def _records(
    conn: duckdb.DuckDBPyConnection, statement: str, params: dict[str, object]
) -> list[dict[str, Any]]:
    cursor = conn.execute(load_sql(statement), params)
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def report_findings(misses: Sequence[object], watch: Sequence[object]) -> list[Finding]:
    """The findings of a report: its misses, then its watch list (objects with segment,
    variant and metric, as `gate.Miss` and `reports.regression.Watch`)."""
    return [
        (str(f.segment), str(f.variant), str(f.metric), kind)  # type: ignore[attr-defined]
        for kind, found in (("miss", misses), ("watch", watch))
        for f in found
    ]


def with_why(
    conn: duckdb.DuckDBPyConnection, config: PipelineConfig, report: RegressionReport
) -> RegressionReport:
    """`report` with the explanation of each of its misses and significant drops whose change
    from the baseline is a number (a NaN mean, or no baseline, has no change to explain)."""
    rows = report.rows
    changed = (
        set()
        if rows.empty
        else {
            (str(r["segment"]), str(r["variant"]), str(r["metric"]))
            for r in rows.to_dict(orient="records")
            if finite(r["delta"], numbers_only=True) is not None
        }
    )
    findings = [f for f in report_findings(report.misses, report.watch()) if f[:3] in changed]
    return replace(report, why=explain_findings(conn, config, report.partition, findings))
