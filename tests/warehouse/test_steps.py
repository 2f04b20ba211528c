"""The label and metric steps' counts: stale labels dropped and counted, each trace counted once."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from retrieval_pipeline.warehouse.evaluation import run_evaluation
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
