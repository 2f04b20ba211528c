"""Trace stores with one known cause of a drop injected on the last day (the attribution tests,
docs/why.md), written as the pipeline reads them, and built into a warehouse.

Every query has one relevant document `<q>-rel` (grade 3) and ten judged non-relevant ones
`<q>-n0`..`<q>-n9` (grade 0). A clean ranking is [rel, n0..n9]: nDCG@10 = 1. Two baseline days
and the day; two traces per query and day unless a cause says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.store import LocalTraceStore
from retrieval_pipeline.warehouse import connection, corpus, ingestion, nightly, steps

DAY = date(2026, 11, 30)
DAYS = [DAY - timedelta(days=2), DAY - timedelta(days=1), DAY]
QUERIES = [f"q{n:02d}" for n in range(20)]
HARD = QUERIES[15:]  # the traffic cause: ranked [n0..n9, rel] every day (nDCG@10 = 0)
NEW_QUERY = "q99"  # on the day only, ranked clean
CONFIG = PipelineConfig(thresholds={"ndcg@10": 0.99})


def clean(q: str) -> list[str]:
    return [f"{q}-rel", *(f"{q}-n{i}" for i in range(10))]


def pushed(q: str) -> list[str]:
    """The relevant document below the ten judged non-relevant ones: rank 11."""
    return [*(f"{q}-n{i}" for i in range(10)), f"{q}-rel"]


def burst(q: str) -> list[str]:
    """Ten unjudged new documents above the clean ranking: the relevant one at rank 11."""
    return [*(f"{q}-new{i}" for i in range(10)), *clean(q)]


def labels(q: str) -> dict[str, int]:
    return {f"{q}-rel": 3, **{f"{q}-n{i}": 0 for i in range(10)}}


def _records(cause: str, hit: list[str]) -> Iterator[tuple[date, dict[str, object]]]:
    for day in DAYS:
        on_day = day == DAY
        for q in [*QUERIES, *([NEW_QUERY] if on_day else [])]:
            ranking = pushed(q) if q in HARD else clean(q)
            traffic = 2
            if on_day and q in hit:
                ranking = {"rankings": pushed, "coverage": burst}.get(cause, clean)(q)
            if on_day and cause == "traffic" and q in HARD:
                traffic = 10
            for n in range(traffic):
                yield (
                    day,
                    {
                        "trace_id": f"{day}-{q}-{n}",
                        "query_id": q,
                        "timestamp": f"{day}T12:00:{n:02d}Z",
                        "segment": "s",
                        "variant": "v",
                        "retrieved_ids": ranking,
                        "relevance_scores": labels(q),
                    },
                )


def write_store(root: Path, cause: str, hit: list[str]) -> Path:
    """The store with `cause` (rankings, labels, coverage, traffic) injected on DAY into the
    queries `hit` (labels: their relevant document deleted from the corpus at DAY's start, so
    its label is stale on the day only)."""
    by_day: dict[date, list[str]] = {}
    for day, record in _records(cause, hit):
        by_day.setdefault(day, []).append(json.dumps(record))
    for day, lines in by_day.items():
        folder = root / "traces" / f"date={day}"
        folder.mkdir(parents=True)
        (folder / "traces.jsonl").write_text("\n".join(lines) + "\n")
    docs = sorted({d for q in [*QUERIES, NEW_QUERY] for d in [*clean(q), *burst(q)]})
    start = datetime(2026, 1, 1, tzinfo=UTC)
    deleted_at = datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC)
    deleted = {f"{q}-rel" for q in hit} if cause == "labels" else set()
    (root / "corpus").mkdir()
    pd.DataFrame(
        {
            "doc_id": docs,
            "added_at": [start] * len(docs),
            "deleted_at": [deleted_at if d in deleted else None for d in docs],
        }
    ).to_parquet(root / "corpus" / "corpus.parquet")
    return root


def build(root: Path, database: Path, keep_ids: bool = True) -> duckdb.DuckDBPyConnection:
    """The warehouse of the store at `root`, through the day's regression rows (CONFIG);
    `keep_ids` False: without retrieved ids, as `store_retrieved_ids = false` keeps it."""
    conn = connection.connect(database)
    store = LocalTraceStore(root)
    corpus.load_corpus(conn, store.corpus_file())
    for day in DAYS:
        ingestion.ingest_traces(conn, store.trace_files(day), day, keep_retrieved_ids=keep_ids)
    steps.build_labels(conn, DAYS[0], DAY, use_corpus=True)
    steps.compute_query_metrics(conn, CONFIG.scored_metrics(), DAYS[0], DAY, CONFIG.gain)
    nightly.build_segment_metrics(conn, CONFIG, DAYS[0], DAY)
    nightly.build_regression_rows(conn, CONFIG, DAY)
    return conn
