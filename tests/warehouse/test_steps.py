"""The label and metric steps' counts: stale labels dropped and counted, each trace counted once."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from retrieval_pipeline.config import config_from_mapping
from retrieval_pipeline.metrics import parse_metrics, with_coverage
from retrieval_pipeline.records import OVERALL_SEGMENT_REASON
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.corpus import load_corpus
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.judgments import load_judgments
from retrieval_pipeline.warehouse.nightly import build_segment_metrics
from retrieval_pipeline.warehouse.partitions import ALL_DATES
from retrieval_pipeline.warehouse.steps import (
    MetricCounts,
    build_labels,
    compute_query_metrics,
    trace_metrics,
)
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


@pytest.mark.parametrize("with_corpus", [False, True])
def test_a_private_evaluation_writes_only_the_stale_labels_and_counts_them_all(
    tmp_path: Path, with_corpus: bool
) -> None:
    """`evaluate`'s private database holds only the stale labels; the counts are those of every
    label (`build_labels` over the same traces): 2 + 3 + 0 labels, a repeated record's dropped;
    with the snapshot of a and b, "gone" and "c" are stale, one in each of two traces."""
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("two", retrieved_ids=["a", "b"], relevant_ids=["a", "gone"])),
            json.dumps(good("graded", relevance_scores={"a": 1, "b": 0, "c": 3})),
            json.dumps(unjudged("none")),
            json.dumps(good("two", relevant_ids=["x", "y", "z"])),  # a repeat: dropped
        ],
    )
    corpus = None
    if with_corpus:
        corpus = tmp_path / "corpus.csv"
        corpus.write_text("doc_id,added_at,deleted_at\na,,\nb,,\n")
    stale = (2, 2) if with_corpus else (0, 0)
    conn = connect()
    ingest_traces(conn, [traces])
    load_corpus(conn, corpus)
    private = build_labels(conn, *ALL_DATES, use_corpus=with_corpus, stale_only=True)
    assert (private.labels, private.stale, private.traces_with_stale) == (2 + 3, *stale)
    assert conn.execute("select count(*) from labels").fetchone() == (stale[0],)
    every = build_labels(conn, *ALL_DATES, use_corpus=with_corpus)
    assert conn.execute("select count(*) from labels").fetchone() == (5,)
    assert private == every
    run = run_evaluation(traces, "recall@10", corpus=corpus)
    assert run.labels == every
    n_stale = run.per_query.set_index("trace_id")["n_stale_labels"]
    assert n_stale.to_dict() == (
        {"two": 1, "graded": 1, "none": 0} if with_corpus else {"two": 0, "graded": 0, "none": 0}
    )


def test_evaluates_per_trace_table_equals_the_written_rows_and_their_counts(
    tmp_path: Path,
) -> None:
    """`trace_metrics` (evaluate's: the metric rows grouped per trace as computed, never written)
    gives the values `compute_query_metrics` writes to `query_metrics` (the nightly's), and the
    same counts (sql/agg_metric_counts.sql's), by hand: six traces, of them annotated "hit",
    "all-zero" (no relevant label), "empty" (nothing retrieved) and "by-judgment" (labelled by
    the judgments); "unjudged" and "all-stale" (its one label's document is gone) are not."""
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("hit", retrieved_ids=["a", "b"], relevant_ids=["b"])),
            json.dumps(unjudged("all-zero") | {"relevance_scores": {"a": 0, "b": 0}}),
            json.dumps(unjudged("unjudged") | {"query_id": "q-none"}),
            json.dumps(good("empty", retrieved_ids=[], relevance_scores={"a": 2})),
            json.dumps(good("all-stale", relevant_ids=["gone"])),
            json.dumps(unjudged("by-judgment") | {"query_id": "q-judged"}),
        ],
    )
    judgments = tmp_path / "j.jsonl"
    judgments.write_text('{"query_id": "q-judged", "doc_id": "a", "grade": 3}\n')
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("doc_id,added_at,deleted_at\na,,\nb,,\n")
    metrics = with_coverage(parse_metrics("ndcg@2,P@1,mrr,map,bpref,err@2,rbp@0.5"))
    conn = connect()
    load_judgments(conn, [judgments])
    ingest_traces(conn, [traces])
    load_corpus(conn, corpus)
    build_labels(conn, *ALL_DATES, use_corpus=True)
    table, counts = trace_metrics(conn, metrics, *ALL_DATES)
    written = compute_query_metrics(conn, metrics, *ALL_DATES)
    assert counts == written
    assert counts == MetricCounts(
        traces=6, annotated=4, unannotated=2, no_relevant=1, by_judgments=1, empty=1
    )
    conn.complete()  # DuckDB 2.0: no new query while an earlier execute() has unread rows
    long = conn.sql("select trace_id, metric, value from query_metrics").df()
    stored = long.pivot(index="trace_id", columns="metric", values="value")
    names = [m.name for m in metrics]
    # input order, the written values (null where unannotated), column for column
    assert table.column("trace_id").to_pylist() == [
        "hit", "all-zero", "unjudged", "empty", "all-stale", "by-judgment"
    ]  # fmt: skip
    # the per-query file's types: the counts as `traces` and `query_metrics` store them
    assert [table.schema.field(c).type for c in ("n_retrieved", "n_relevant")] == [pa.int32()] * 2
    frame = table.to_pandas().set_index("trace_id")
    pd.testing.assert_frame_equal(
        frame[names], stored.loc[frame.index, names], check_names=False, check_exact=True
    )
    assert frame.loc["hit", "mrr"] == 1 / 2  # the relevant "b" at rank 2
    assert frame[["mrr"]].isna().sum().item() == 2  # "unjudged" and "all-stale"


def test_a_trace_named_as_the_overall_segment_is_quarantined_not_pooled_twice(
    tmp_path: Path,
) -> None:
    """A trace whose segment is `__all__` would be pooled with the overall rows (before, the day
    below had four `__all__` rows of mrr, with means 0.50 and 0.75): it is quarantined, and the
    overall row is the faq trace's alone, mrr 1/1 (its relevant "a" at rank 1)."""
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("faq", retrieved_ids=["a", "b"], relevant_ids=["a"], segment="faq")),
            json.dumps(
                good("all", retrieved_ids=["a", "b"], relevant_ids=["b"], segment="__all__")
            ),
        ],
    )
    day = date(2026, 11, 30)
    config = config_from_mapping({"metrics": ["mrr"]})
    conn = connect()
    counts = ingest_traces(conn, [traces], partition_date=day)
    assert (counts.read, counts.valid, counts.quarantined) == (2, 1, 1)
    load_corpus(conn, None)
    build_labels(conn, day, day, use_corpus=False)
    compute_query_metrics(conn, config.scored_metrics(), day, day)
    rows = build_segment_metrics(conn, config, day, day)
    mrr = rows[rows.metric == "mrr"][["segment", "traces", "mean"]]
    assert sorted(mrr.itertuples(index=False, name=None)) == [("__all__", 1, 1.0), ("faq", 1, 1.0)]
    conn.complete()  # DuckDB 2.0: no new query while an earlier execute() has unread rows
    reason = conn.execute("select field, reason from quarantine").fetchall()
    assert reason == [("segment", OVERALL_SEGMENT_REASON)]
