"""One evaluation of a set of traces, start to finish, in a private DuckDB database.

The `evaluate` command and the `evaluate()` Python function are this module; the nightly pipeline
runs the same warehouse steps partition by partition against the warehouse file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from retrieval_pipeline.metrics import (
    DEFAULT_METRICS,
    Gain,
    Metric,
    check_gain,
    check_relevance_level,
    parse_metrics,
)
from retrieval_pipeline.warehouse.connection import close_scratch, connect, duckdb_config
from retrieval_pipeline.warehouse.corpus import CorpusLoad, load_corpus
from retrieval_pipeline.warehouse.ingestion import IngestCounts, ingest_traces
from retrieval_pipeline.warehouse.partitions import ALL_DATES
from retrieval_pipeline.warehouse.sources import TraceSource
from retrieval_pipeline.warehouse.steps import (
    LabelCounts,
    MetricCounts,
    build_labels,
    compute_query_metrics,
    query_metrics_wide,
)


@dataclass(frozen=True)
class EvaluationRun:
    """The per-trace table, the quarantined records and every count a user is told."""

    metrics: tuple[Metric, ...]
    per_query: pd.DataFrame
    quarantine: pd.DataFrame
    ingest: IngestCounts
    labels: LabelCounts
    traces: MetricCounts
    corpus: CorpusLoad  # no documents, nothing rejected without a corpus

    def means(self) -> dict[str, float | None]:
        """Mean of each metric over annotated traces (None when no trace is annotated)."""
        out: dict[str, float | None] = {}
        for metric in self.metrics:
            column = self.per_query[metric.name].dropna()
            out[metric.name] = float(column.mean()) if len(column) else None
        return out


def run_evaluation(
    traces: TraceSource | str | Path,
    metrics: str | Sequence[str] | Sequence[Metric] = DEFAULT_METRICS,
    corpus: str | Path | None = None,
    gain: str = "exponential",
    relevance_level: float = 1,
) -> EvaluationRun:
    """Validate, filter stale labels and score `traces` (paths, a DataFrame or an Arrow table)."""
    parsed = _metrics(metrics)
    checked_gain = check_gain(gain)
    level = check_relevance_level(relevance_level)
    if isinstance(traces, str | Path):
        traces = [Path(traces)]
    # a temporary database file, not an in-memory one: its memory stays within the limit, where
    # an in-memory database holds every table (bench/README.md)
    with tempfile.TemporaryDirectory(prefix="retrieval-pipeline-evaluate-") as folder:
        database = Path(folder) / "evaluation.duckdb"
        conn = connect(database, duckdb_config(), scratch=True)
        try:
            return _evaluate_in(conn, traces, parsed, corpus, checked_gain, level)
        finally:
            close_scratch(conn)


def _evaluate_in(
    conn: duckdb.DuckDBPyConnection,
    traces: TraceSource,
    metrics: tuple[Metric, ...],
    corpus: str | Path | None,
    gain: Gain,
    relevance_level: float,
) -> EvaluationRun:
    # the lists of retrieved ids are not kept: nothing here reads them after ingestion
    ingest = ingest_traces(conn, traces, keep_retrieved_ids=False)
    corpus_load = load_corpus(conn, Path(corpus) if corpus is not None else None)
    start, end = ALL_DATES  # the private database holds just this evaluation
    labels = build_labels(conn, start, end, use_corpus=corpus is not None)
    counts = compute_query_metrics(conn, metrics, start, end, gain, relevance_level)
    per_query = query_metrics_wide(conn, metrics, start, end)
    quarantine = conn.execute(
        "select source_file, source_line, trace_id, field, reason, raw_record"
        " from quarantine order by source_file, source_line"
    ).df()
    return EvaluationRun(metrics, per_query, quarantine, ingest, labels, counts, corpus_load)


def evaluate(
    traces: TraceSource | str | Path,
    metrics: str | Sequence[str] | Sequence[Metric] = DEFAULT_METRICS,
    corpus: str | Path | None = None,
    gain: str = "exponential",
    relevance_level: float = 1,
) -> pd.DataFrame:
    """Per-query metrics: one row per valid trace, one column per metric (null: unannotated)."""
    return run_evaluation(traces, metrics, corpus, gain, relevance_level).per_query


def _metrics(metrics: str | Sequence[str] | Sequence[Metric]) -> tuple[Metric, ...]:
    if isinstance(metrics, str):
        return parse_metrics(metrics)
    items = list(metrics)
    if items and all(isinstance(m, Metric) for m in items):
        return tuple(dict.fromkeys(items))  # type: ignore[arg-type]
    return parse_metrics([str(m) for m in items])
