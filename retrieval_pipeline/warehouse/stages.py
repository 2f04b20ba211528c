"""The reranker's stages of a day: each stage scored in its own private run, their means per
segment and variant and the reranker's gain stored beside the first stage's tables.

`evaluate --stages` and the nightly's `stage_metrics` asset both score the stages here
(`stage_runs`), so that they agree by construction; a test holds them equal. Every stage is
labelled as its retriever: its records carry the retriever span's labels (`ingest.spans`), and
the run takes the same judgments, corpus snapshot, gain, gmax and `judged_only` as the first
stage's (docs/spans.md, "Stages in the nightly").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from retrieval_pipeline.ab.stages import (
    STAGE_QUERY_COLUMNS,
    StageGain,
    gains_frame,
    reranker_records,
    stage_gains,
    stage_means,
    stage_query_rows,
)
from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.ingest.spans import INPUT_SUFFIX, STAGE_RERANKER, STAGE_RERANKER_INPUT
from retrieval_pipeline.metrics import DEFAULT_GMAX, Metric
from retrieval_pipeline.warehouse.evaluation import EvaluationRun, run_evaluation
from retrieval_pipeline.warehouse.partitions import delete_partitions, insert
from retrieval_pipeline.warehouse.session import registered, transaction
from retrieval_pipeline.warehouse.sources import TraceSource, may_hold_reranker_spans
from retrieval_pipeline.warehouse.sql import load_sql

RERANKER_STAGES = (STAGE_RERANKER_INPUT, STAGE_RERANKER)


@dataclass(frozen=True)
class StageDay:
    """A day's reranker stages: the stage means (`ab.stages.STAGE_METRIC_COLUMNS`), the gains
    (`ab.stages.GAIN_COLUMNS`, and as `StageGain`s) and each stage's per-record table; all empty
    on a day without reranker spans."""

    means: pd.DataFrame
    gains: pd.DataFrame
    stage_gains: list[StageGain]
    per_query: Mapping[str, pd.DataFrame]  # the records of reranker spans, per stage
    # per span and metric, its input's and output's value (`ab.stages.stage_query_rows`)
    queries: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STAGE_QUERY_COLUMNS))

    @property
    def scored(self) -> dict[str, int]:
        """Records per stage (one per reranker span)."""
        return {stage: len(rows) for stage, rows in self.per_query.items()}

    def overall_means(self, names: Sequence[str]) -> dict[str, dict[str, float | None]]:
        """Per stage, each metric's mean over its annotated records (None without any)."""
        return {
            stage: {
                name: float(rows[name].dropna().mean()) if rows[name].notna().any() else None
                for name in names
            }
            for stage, rows in self.per_query.items()
        }


def stage_runs(
    traces: Callable[[], TraceSource],
    metrics: Sequence[Metric],
    stages: Sequence[str],
    reading: SpanReading,
    *,
    corpus: str | Path | None = None,
    gain: str = "exponential",
    relevance_level: float = 1,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
    judgments: Sequence[str | Path] = (),
) -> dict[str, EvaluationRun]:
    """One private run per stage over a fresh `traces()` each (a source is read once)."""
    return {
        stage: run_evaluation(
            traces(),
            metrics,
            corpus,
            gain,
            relevance_level,
            gmax=gmax,
            judged_only=judged_only,
            spans=replace(reading, stage=stage),
            judgments=judgments,
        )
        for stage in stages
    }


def stage_rows(runs: Mapping[str, EvaluationRun], names: Sequence[str]) -> StageDay:
    """The reranker stages' rows from their runs (`stage_runs`), over the records of reranker
    spans alone (`ab.stages.reranker_records`): per stage, segment and variant the means, per
    segment the gain (`ab.stages.stage_gains`)."""
    given, reranked = reranker_records(
        runs[STAGE_RERANKER_INPUT].per_query, runs[STAGE_RERANKER].per_query, INPUT_SUFFIX
    )
    per_query = {STAGE_RERANKER_INPUT: given, STAGE_RERANKER: reranked}
    if given.empty:
        return _no_stage_day(names, per_query)
    means = pd.concat(
        [stage_means(stage, rows, names) for stage, rows in per_query.items()], ignore_index=True
    )
    gains = stage_gains(given, reranked, names, INPUT_SUFFIX)
    queries = stage_query_rows(given, reranked, names, INPUT_SUFFIX)
    return StageDay(means, gains_frame(gains), gains, per_query, queries)


def score_stage_day(
    traces: Callable[[], TraceSource],
    metrics: Sequence[Metric],
    reading: SpanReading,
    **labelled: Any,
) -> StageDay:
    """A day's reranker stages, scored by `stage_runs` (`labelled`: its keyword arguments, the
    first stage's corpus, judgments, gain, gmax and `judged_only`). The input stage is scored
    first: without a reranker span in it, the output is not scored at all; a day without a span
    export (trace records only) is not read at all, nor its corpus snapshot loaded."""
    names = [m.name for m in metrics]
    if not may_hold_reranker_spans(traces()):
        nothing = _no_rows(names)
        return _no_stage_day(names, {STAGE_RERANKER_INPUT: nothing, STAGE_RERANKER: nothing})
    runs = stage_runs(traces, metrics, (STAGE_RERANKER_INPUT,), reading, **labelled)
    if not runs[STAGE_RERANKER_INPUT].per_query["trace_id"].str.endswith(INPUT_SUFFIX).any():
        runs[STAGE_RERANKER] = runs[STAGE_RERANKER_INPUT]  # nothing of a reranker in either
    else:
        runs |= stage_runs(traces, metrics, (STAGE_RERANKER,), reading, **labelled)
    return stage_rows(runs, names)


def _no_rows(names: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=["trace_id", "segment", "variant", *names])


def _no_stage_day(names: Sequence[str], per_query: dict[str, pd.DataFrame]) -> StageDay:
    """A day without a reranker span: no stage's means, no gain, the records as given."""
    return StageDay(stage_means("", _no_rows(names), names), gains_frame([]), [], per_query)


def write_stage_day(conn: duckdb.DuckDBPyConnection, day: date, rows: StageDay) -> None:
    """Replace `day` in `stage_metrics`, `stage_gains` and `stage_query_metrics` in one
    transaction (nothing is left for a day without reranker spans)."""
    span = {"start_date": day, "end_date": day}
    dated: dict[str, object] = {"partition_date": day}
    conn.complete()
    with (
        registered(conn, "stg_stage_metrics", rows.means),
        registered(conn, "stg_stage_gains", rows.gains),
        registered(conn, "stg_stage_queries", rows.queries),
        transaction(conn),
    ):
        conn.execute(load_sql("delete_stage_metrics"), span)
        conn.execute(load_sql("delete_stage_gains"), span)
        delete_partitions(conn, "stage_query_metrics", [day])
        if len(rows.queries):
            insert(conn, "stage_query_metrics", "int_stage_query_metrics", dated)
        if len(rows.means):
            conn.execute(load_sql("insert_stage_metrics"), dated)
        if len(rows.gains):
            conn.execute(load_sql("insert_stage_gains"), dated)


def read_stage_metrics(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> pd.DataFrame:
    """The stored stage means of the days [start, end]."""
    return _read(conn, "rpt_stage_metrics", start, end)


def read_stage_gains(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> pd.DataFrame:
    """The stored reranker gains of the days [start, end]."""
    return _read(conn, "rpt_stage_gains", start, end)


def _read(conn: duckdb.DuckDBPyConnection, statement: str, start: date, end: date) -> pd.DataFrame:
    conn.complete()
    params = {"start_date": start, "end_date": end}
    return conn.execute(load_sql(statement), params).df()
