"""The label and metric steps' counts: stale labels dropped and counted, each trace counted once."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.partitions import ALL_DATES
from retrieval_pipeline.warehouse.steps import build_labels, count_traces_labels
from tests.trace_records import good, unjudged, write_lines


def test_stale_labels_are_dropped_and_counted(tmp_path: Path) -> None:
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("fresh", retrieved_ids=["a", "b"], relevant_ids=["a", "gone"])),
            json.dumps(good("all-stale", retrieved_ids=["a"], relevant_ids=["gone", "late"])),
            json.dumps(good("deleted", retrieved_ids=["old"], relevant_ids=["old", "a"])),
        ],
    )
    corpus = tmp_path / "corpus.csv"
    corpus.write_text(
        "doc_id,added_at,deleted_at\n"
        "a,,\n"
        "b,2026-01-01T00:00:00Z,\n"
        "late,2026-12-01T00:00:00Z,\n"  # added after the traces were served
        "old,2020-01-01T00:00:00Z,2026-11-29T00:00:00Z\n"  # deleted before
    )
    run = run_evaluation(traces, "recall@10,mrr", corpus=corpus)
    rows = run.per_query.set_index("trace_id")
    assert rows.loc["fresh", "n_stale_labels"] == 1
    assert rows.loc["fresh", "recall@10"] == pytest.approx(1 / 1)  # not 1/2: gone is stale
    assert pd.isna(rows.loc["all-stale", "mrr"])  # every label stale: unannotated
    assert rows.loc["deleted", "n_stale_labels"] == 1
    assert rows.loc["deleted", "mrr"] == 0  # "old" was retrieved but its label is stale
    assert (run.labels.labels, run.labels.stale, run.labels.traces_with_stale) == (6, 4, 3)
    assert (run.traces.annotated, run.traces.unannotated) == (2, 1)


def test_metric_counts_count_each_trace_once_whatever_the_metrics(tmp_path: Path) -> None:
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("hit", retrieved_ids=["a", "b"], relevant_ids=["a"])),
            # graded, but nothing reaches the relevance level of 1: annotated, no relevant label
            json.dumps(unjudged("all-zero") | {"relevance_scores": {"a": 0}}),
            json.dumps(unjudged("unjudged")),
        ],
    )
    run = run_evaluation(traces, "P@1,mrr,ndcg@2")
    assert run.per_query.set_index("trace_id").loc["all-zero", "mrr"] == 0
    # 3 traces scored for 3 metrics: 9 metric rows, but 3 traces
    assert (run.traces.traces, run.traces.annotated) == (3, 2)
    assert (run.traces.unannotated, run.traces.no_relevant) == (1, 1)


def test_without_a_corpus_the_labels_are_counted_where_they_are(tmp_path: Path) -> None:
    """Without a snapshot no label is stale: a private evaluation counts the traces' labels
    without writing `labels`, and the counts are those `build_labels` gives over the same traces
    (2 + 3 + 0 labels, a repeated record's dropped; none stale)."""
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("two", retrieved_ids=["a", "b"], relevant_ids=["a", "gone"])),
            json.dumps(good("graded", relevance_scores={"a": 1, "b": 0, "c": 3})),
            json.dumps(unjudged("none")),
            json.dumps(good("two", relevant_ids=["x", "y", "z"])),  # a repeat: dropped
        ],
    )
    conn = connect()
    ingest_traces(conn, [traces])
    counted = count_traces_labels(conn, *ALL_DATES)
    assert (counted.labels, counted.stale, counted.traces_with_stale) == (2 + 3, 0, 0)
    assert conn.execute("select count(*) from labels").fetchone() == (0,)
    built = build_labels(conn, *ALL_DATES, use_corpus=False)
    assert counted == built
    run = run_evaluation(traces, "recall@10")
    assert run.labels == counted
    assert list(run.per_query["n_stale_labels"]) == [0, 0, 0]
