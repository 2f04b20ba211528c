"""`evaluate` and a nightly partition with DuckDB forced to 16 threads on this 2-core machine: at a
fixed 256MB limit 1M traces run out of DuckDB memory; at the default memory setting (the limit
`resources_budget` gives 16 threads) they pass, with the means of visible arithmetic.

DuckDB starts a thread per core it sees, so this is what a 16-core machine does by default. The
traces are small (10 retrieved ids, 3 graded labels) so that the run is short: the memory that
fails is the per-trace table's (one group per trace), which grows with the traces, not the ids.
The fixed limit was the old default, 512MB, until the per-trace table stopped building a MAP per
trace (sql/rpt_query_metrics.sql): since then 1M traces with the seven metrics here fit in 512MB
at 16 threads in one run of four on this machine, so the failure hung on the boundary. At 256MB
and at 384MB every run failed, in that table; 256MB keeps the failure far from the boundary.
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.defs import ASSETS
from retrieval_pipeline.defs.nightly import checks
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.metrics import DEFAULT_METRICS
from retrieval_pipeline.warehouse.connection import MEMORY_LIMIT_ENV, THREADS_ENV, duckdb_config
from retrieval_pipeline.warehouse.evaluation import run_evaluation

TRACES = 1_000_000
RETRIEVED = 10
LABELLED = 3  # the first three retrieved ids carry the labels
DOCS = 1_000
# the default metrics and two more: each adds to the per-trace table's memory
METRICS = (*DEFAULT_METRICS, "ndcg@5", "precision@10")


def _write_traces(path: Path, seed: int = 11) -> np.ndarray:
    """TRACES traces whose labels are their first three retrieved ids; returns their grades
    (TRACES x 3, the grades at ranks 1, 2, 3)."""
    rng = np.random.default_rng(seed)
    retrieved = rng.integers(0, DOCS, size=(TRACES, RETRIEVED))
    # three distinct ids first (later repeats of them are dropped, keeping ranks 1..3)
    retrieved[:, :LABELLED] = rng.integers(0, DOCS - LABELLED, size=(TRACES, 1)) + np.arange(3)
    grades = rng.integers(0, 4, size=(TRACES, LABELLED))
    names = pa.array([f"d{i}" for i in range(DOCS)])
    lists = pa.ListArray.from_arrays(
        pa.array(np.arange(0, TRACES * RETRIEVED + 1, RETRIEVED, dtype=np.int32)),
        names.take(pa.array(retrieved.ravel())),
    )
    scores = pa.MapArray.from_arrays(
        pa.array(np.arange(0, TRACES * LABELLED + 1, LABELLED, dtype=np.int32)),
        names.take(pa.array(retrieved[:, :LABELLED].ravel())),
        pa.array(grades.ravel().astype(np.float64)),
    )
    numbers = np.arange(TRACES).astype(str)
    table = pa.table(
        {
            "trace_id": pa.array(np.char.add("t", numbers)),
            "query_id": pa.array(np.char.add("q", (np.arange(TRACES) % 5000).astype(str))),
            "timestamp": pa.array(np.full(TRACES, "2026-11-30T12:00:00Z")),
            "retrieved_ids": lists,
            "relevance_scores": scores,
        }
    )
    pq.write_table(table, path, row_group_size=50_000)
    return grades


def _expected_means(grades: np.ndarray) -> dict[str, float]:
    """METRICS' means, exponential gain, relevance level 1: every trace is annotated and its only
    labels sit at ranks 1, 2, 3 (so nDCG@5 is nDCG@10, and recall@20 is 1 or 0)."""
    ranks = np.arange(1, LABELLED + 1)
    relevant = grades >= 1
    n_relevant = relevant.sum(axis=1)
    dcg = ((2.0**grades - 1) / np.log2(ranks + 1)).sum(axis=1)
    ideal = ((2.0 ** -np.sort(-grades, axis=1) - 1) / np.log2(ranks + 1)).sum(axis=1)
    ndcg = np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    first = np.where(relevant.any(axis=1), relevant.argmax(axis=1) + 1, 0)
    mrr = np.divide(1.0, first, out=np.zeros(len(first)), where=first > 0)
    precision_5 = n_relevant / 5
    recall_20 = (n_relevant > 0).astype(float)  # every relevant label is within the top 3
    # AP: the j-th relevant label, at rank r_j, adds j / r_j
    hits = np.cumsum(relevant, axis=1)
    ap_sum = np.where(relevant, hits / ranks, 0.0).sum(axis=1)
    ap = np.divide(ap_sum, n_relevant, out=np.zeros(len(ap_sum)), where=n_relevant > 0)
    return {
        "ndcg@10": float(ndcg.mean()),
        "mrr": float(mrr.mean()),
        "precision@5": float(precision_5.mean()),
        "recall@20": float(recall_20.mean()),
        "map": float(ap.mean()),
        "ndcg@5": float(ndcg.mean()),
        "precision@10": float((n_relevant / 10).mean()),
    }


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, np.ndarray]]:
    path = tmp_path_factory.mktemp("many-threads") / "traces.parquet"
    grades = _write_traces(path)
    yield path, grades
    path.unlink()


def _warehouse_rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(database), read_only=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.slow
def test_sixteen_threads_in_a_fixed_limit_run_out_of_memory(
    traces: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = traces
    monkeypatch.setenv(THREADS_ENV, "16")
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "256MB")  # half the old fixed default (the docstring)
    with pytest.raises(duckdb.OutOfMemoryException, match="Out of Memory"):
        run_evaluation(path, metrics=METRICS)


@pytest.mark.slow
def test_evaluate_at_sixteen_threads_passes_at_the_default_memory(
    traces: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, grades = traces
    monkeypatch.setenv(THREADS_ENV, "16")  # what a 16-core machine does by default
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    assert duckdb_config() == {"threads": 16, "memory_limit": f"{16 * 128}MiB"}
    run = run_evaluation(path, metrics=METRICS)
    assert (run.ingest.read, run.ingest.valid, run.traces.annotated) == (TRACES, TRACES, TRACES)
    expected = _expected_means(grades)
    means = run.means()
    assert means.keys() == expected.keys()
    for name, value in expected.items():
        assert means[name] == pytest.approx(value, abs=1e-12), name


@pytest.mark.slow
def test_a_nightly_partition_at_sixteen_threads_passes_at_the_default_memory(
    traces: tuple[Path, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, grades = traces
    day = tmp_path / "store" / "traces" / "date=2026-11-30"
    day.mkdir(parents=True)
    os.link(path, day / "traces.parquet")
    database = tmp_path / "db" / "warehouse.duckdb"
    monkeypatch.setenv(THREADS_ENV, "16")
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    result = dg.materialize(
        [*ASSETS, *checks.ALL_CHECKS],
        partition_key="2026-11-30",
        resources={
            "trace_store": TraceStoreResource(root=str(tmp_path / "store")),
            "warehouse": WarehouseResource(database=str(database), store_retrieved_ids=False),
            "settings": PipelineSettingsResource(
                reports_dir=str(tmp_path / "reports"), approvals_dir=str(tmp_path / "approvals")
            ),
        },
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    materialized = {
        event.asset_key.to_user_string()
        for event in result.get_asset_materialization_events()
        if event.asset_key is not None
    }
    assert {"traces", "labels", "query_metrics", "segment_metrics", "regression_report"} <= (
        materialized
    )
    means = _expected_means(grades)
    expected = {name: means[name] for name in DEFAULT_METRICS}
    rows = _warehouse_rows(
        database,
        "select metric, n, mean from segment_metrics where segment = '__all__' order by metric",
    )
    # the configured metrics, and the list-level coverage (judged@10) the nightly adds
    assert {metric: n for metric, n, _ in rows} == dict.fromkeys([*expected, "judged@10"], TRACES)
    for metric, _, mean in rows:
        if metric in expected:
            assert mean == pytest.approx(expected[metric], abs=1e-12), metric
