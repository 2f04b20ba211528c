"""trec_eval's output, held to trec_eval's own expected output on its own test files.

`tests/data/trec_eval/out.test.aq` is `trec_eval -a -q qrels.test results.test`. The run and the
qrels are read by this project's readers, every query is scored by its per-trace scorer
(`reference.score_trace`, linear gain as trec_eval), and the lines printed must be trec_eval's,
to the character, in trec_eval's order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_pipeline.ingest.judgments import grades_by_query, read_judgments
from retrieval_pipeline.ingest.trec import read_trec_run
from retrieval_pipeline.metrics import Metric, MetricConfigError, parse_metric, parse_metrics
from retrieval_pipeline.reference import score_trace
from retrieval_pipeline.reports.trec import (
    QueryCounts,
    query_counts,
    trec_eval_lines,
    trec_name,
)

TREC_EVAL = Path(__file__).resolve().parents[1] / "data" / "trec_eval"
CUTS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
# the measures, every cut-off trec_eval prints of them, and the rest it shares with us
METRICS = (
    *parse_metrics(
        [f"{family}@{k}" for family in ("ndcg", "precision", "recall", "map") for k in CUTS]
        + ["map", "mrr", "hit_rate@1", "hit_rate@5", "hit_rate@10"]
    ),
    Metric("ndcg"),
    Metric("precision"),
    Metric("recall"),
)


def _scored() -> tuple[dict[str, dict[str, float]], dict[str, QueryCounts], str | None]:
    run = read_trec_run(TREC_EVAL / "results.test")
    judged = grades_by_query(read_judgments(TREC_EVAL / "qrels.test").table)
    per_query, counts = {}, {}
    for qid, docs in run.ranked().items():
        if qid in judged:  # trec_eval evaluates the queries in both files
            scores = score_trace(docs, judged[qid], METRICS, gain="linear")
            assert scores is not None
            per_query[qid] = scores
            counts[qid] = query_counts(docs, judged[qid])
    return per_query, counts, run.run_id


def test_the_lines_are_trec_evals_expected_output() -> None:
    per_query, counts, run_id = _scored()
    lines = trec_eval_lines(per_query, METRICS, run_id=run_id, counts=counts)
    expected = (TREC_EVAL / "out.test.aq").read_text().splitlines()
    ours = {line.split("\t")[0].rstrip() for line in lines}
    # trec_eval's lines for the measures we print, in its order: ours, to the character
    assert lines == [line for line in expected if line.split("\t")[0].rstrip() in ours]
    assert len(lines) == 3 * (3 + len(METRICS)) + 2 + 3 + len(METRICS)
    named = {trec_name(metric) for metric in METRICS}
    assert {"ndcg_cut_10", "P_5", "recall_20", "map", "recip_rank", "success_5"} <= named


def test_all_is_the_mean_over_the_queries_summed_in_order() -> None:
    ndcg, mrr = parse_metric("ndcg@10"), parse_metric("mrr")
    per_query = {"b": {"ndcg@10": 0.25, "mrr": 1.0}, "a": {"ndcg@10": 0.5, "mrr": 1 / 3}}
    counts = {"a": QueryCounts(10, 4, 2), "b": QueryCounts(7, 0, 0)}
    assert trec_eval_lines(per_query, [mrr, ndcg], run_id="sys", counts=counts) == [
        "num_ret               \ta\t10",
        "num_rel               \ta\t4",
        "num_rel_ret           \ta\t2",
        "recip_rank            \ta\t0.3333",
        "ndcg_cut_10           \ta\t0.5000",
        "num_ret               \tb\t7",
        "num_rel               \tb\t0",
        "num_rel_ret           \tb\t0",
        "recip_rank            \tb\t1.0000",
        "ndcg_cut_10           \tb\t0.2500",
        "runid                 \tall\tsys",
        "num_q                 \tall\t2",
        "num_ret               \tall\t17",
        "num_rel               \tall\t4",
        "num_rel_ret           \tall\t2",
        f"recip_rank            \tall\t{(1 / 3 + 1.0) / 2:6.4f}",  # 0.6667
        f"ndcg_cut_10           \tall\t{(0.5 + 0.25) / 2:6.4f}",  # 0.3750
    ]
    assert trec_eval_lines(per_query, [ndcg], queries=False) == [
        "num_q                 \tall\t2",
        "ndcg_cut_10           \tall\t0.3750",
    ]


def test_names_in_trec_evals_spelling_and_the_ones_it_lacks() -> None:
    names = ("nDCG@10", "P@5", "R@20", "AP", "AP@100", "RR", "Success@5")
    assert [trec_name(parse_metric(name)) for name in names] == [
        "ndcg_cut_10", "P_5", "recall_20", "map", "map_cut_100", "recip_rank", "success_5"
    ]  # fmt: skip
    unbounded = [trec_name(Metric(family)) for family in ("ndcg", "precision", "recall")]
    assert unbounded == ["ndcg", "set_P", "set_recall"]
    with pytest.raises(MetricConfigError, match="use --gain linear"):
        trec_name(parse_metric("ndcg@10"), "exponential")
    for metric in (parse_metric("mrr@10"), Metric("hit_rate")):
        with pytest.raises(MetricConfigError, match="has no trec_eval measure"):
            trec_name(metric)


def test_a_missing_or_nan_value_is_refused() -> None:
    ndcg = parse_metric("ndcg@10")
    with pytest.raises(ValueError, match="query q: no finite value of ndcg@10"):
        trec_eval_lines({"q": {"ndcg@10": float("nan")}}, [ndcg])
    with pytest.raises(ValueError, match="query q: no finite value of ndcg@10"):
        trec_eval_lines({"q": {}}, [ndcg])
