"""Tests for `retrieval_pipeline.reference`: hand cases, trec_eval as oracle, the evaluator.

Expected values are written as the arithmetic that produces them, so a reader can check each one
against the definitions in `retrieval_pipeline.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from math import log2

import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.metrics import (
    GAINS,
    Gain,
    Metric,
    MetricConfigError,
    parse_metric,
    parse_metrics,
)
from retrieval_pipeline.records import RecordError, TraceRecord
from retrieval_pipeline.reference import (
    UNANNOTATED_REASON,
    EvaluationResult,
    RetrievalMetricsEvaluator,
    ThresholdFailure,
    score_trace,
)

# Worked example A of /work/shared/reference/metric-semantics.md
EXAMPLE_A_LABELS = {"d1": 3.0, "d2": 2.0, "d3": 0.0, "d4": 1.0, "d5": 1.0}
EXAMPLE_A_RETRIEVED = ("d3", "d1", "d9")

CUTOFFS = (1, 3, 5, 10, 20)


def score_one(
    retrieved: Sequence[str],
    labels: Mapping[str, float],
    name: str,
    gain: Gain = "exponential",
    relevance_level: float = 1.0,
) -> float:
    scores = score_trace(retrieved, labels, [parse_metric(name)], gain, relevance_level)
    assert scores is not None
    return scores[parse_metric(name).name]


def trec_key(metric: Metric) -> str:
    """The key pytrec_eval reports a metric under (`ndcg_cut_10`, `P_5`, `recip_rank`...)."""
    no_cut = {"map": "map", "mrr": "recip_rank", "ndcg": "ndcg", "precision": "set_P"}
    no_cut |= {"recall": "set_recall"}
    cut = {"ndcg": "ndcg_cut", "precision": "P", "recall": "recall", "map": "map_cut"}
    cut |= {"hit_rate": "success"}
    return no_cut[metric.family] if metric.k is None else f"{cut[metric.family]}_{metric.k}"


def trec_eval(
    retrieved: Sequence[str],
    labels: Mapping[str, int],
    metrics: Sequence[Metric],
    relevance_level: int = 1,
) -> dict[str, float] | None:
    """Score one query with pytrec_eval; None when it drops the query (as it does with no qrels)."""
    measures = set()
    for metric in metrics:
        key = trec_key(metric)
        measures.add(key if metric.k is None else key.replace(f"_{metric.k}", f".{metric.k}"))
    qrels = {"q": dict(labels)}
    # trec_eval orders by score (ties by docno), so -rank keeps our order strictly
    run = {"q": {doc: float(-rank) for rank, doc in enumerate(retrieved, start=1)}}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=relevance_level)
    result = evaluator.evaluate(run)
    if "q" not in result:
        return None
    return {metric.name: result["q"][trec_key(metric)] for metric in metrics}


def exponential_ndcg(ranked: Sequence[str], labels: Mapping[str, float], k: int) -> float:
    """nDCG@k with gain 2^g - 1, written out independently of the module under test."""
    dcg = sum((2 ** labels.get(d, 0) - 1) / log2(r + 1) for r, d in enumerate(ranked[:k], 1))
    best = sorted(labels.values(), reverse=True)[:k]
    idcg = sum((2**g - 1) / log2(r + 1) for r, g in enumerate(best, 1))
    return dcg / idcg if idcg > 0 else 0.0


def reciprocal_rank_at(
    ranked: Sequence[str], labels: Mapping[str, float], k: int, level: float
) -> float:
    """RR@k written out independently (trec_eval has no cut-off for recip_rank)."""
    ranks = (r for r, d in enumerate(ranked[:k], 1) if labels.get(d, 0) >= level)
    return next((1 / r for r in ranks), 0.0)


def make_record(retrieved: Sequence[str], labels: Mapping[str, float]) -> TraceRecord:
    return TraceRecord(
        trace_id="t1",
        query_id="q1",
        served_at=datetime(2024, 5, 1, 12, tzinfo=UTC),
        retrieved_ids=tuple(retrieved),
        labels=dict(labels),
        is_judged=bool(labels),
    )


# --- worked example A -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gain", "expected", "documented"),
    [
        ("P@3", "linear", 1 / 3, 0.3333),
        ("P@5", "linear", 1 / 5, 0.2),
        ("recall@5", "linear", 1 / 4, 0.25),
        ("RR", "linear", 1 / 2, 0.5),
        ("AP", "linear", (1 / 2) / 4, 0.125),
        ("AP@5", "linear", (1 / 2) / 4, 0.125),
        ("nDCG@3", "linear", (3 / log2(3)) / (3 + 2 / log2(3) + 1 / log2(4)), 0.397490),
        (
            "nDCG@5",
            "linear",
            (3 / log2(3)) / (3 + 2 / log2(3) + 1 / log2(4) + 1 / log2(5)),
            0.364521,
        ),
        (
            "nDCG@5",
            "exponential",
            (7 / log2(3)) / (7 + 3 / log2(3) + 1 / log2(4) + 1 / log2(5)),
            0.449588,
        ),
        ("nDCG@3", "exponential", (7 / log2(3)) / (7 + 3 / log2(3) + 1 / log2(4)), 0.470202),
    ],
)
def test_worked_example_a(name: str, gain: Gain, expected: float, documented: float) -> None:
    value = score_one(EXAMPLE_A_RETRIEVED, EXAMPLE_A_LABELS, name, gain)
    assert value == pytest.approx(expected, abs=1e-12)
    # the table rounds to 4 or 6 places
    assert value == pytest.approx(documented, abs=5e-5 if documented == 0.3333 else 5e-7)


@pytest.mark.parametrize("gain", GAINS)
def test_worked_example_a_binary_metrics_ignore_gain(gain: Gain) -> None:
    names = ["P@3", "P@5", "recall@5", "RR", "AP", "AP@5"]
    scores = score_trace(EXAMPLE_A_RETRIEVED, EXAMPLE_A_LABELS, parse_metrics(names), gain)
    assert scores == pytest.approx(
        {
            "precision@3": 1 / 3,
            "precision@5": 1 / 5,
            "recall@5": 1 / 4,
            "mrr": 1 / 2,
            "map": (1 / 2) / 4,
            "map@5": (1 / 2) / 4,
        }
    )


def test_worked_example_a_matches_trec_eval() -> None:
    metrics = parse_metrics("ndcg@3,ndcg@5,P@3,P@5,recall@5,mrr,map,map@5")
    int_labels = {doc: int(g) for doc, g in EXAMPLE_A_LABELS.items()}
    expected = trec_eval(EXAMPLE_A_RETRIEVED, int_labels, metrics)
    assert expected is not None
    actual = score_trace(EXAMPLE_A_RETRIEVED, EXAMPLE_A_LABELS, metrics, "linear")
    assert actual == pytest.approx(expected, abs=1e-9)


# --- hand cases -----------------------------------------------------------------------------------

ALL_METRICS = parse_metrics(
    "ndcg@1,ndcg@5,mrr,mrr@3,precision@1,precision@5,recall@5,map,map@3,hit_rate@5"
)


@pytest.mark.parametrize("gain", GAINS)
def test_no_relevant_label_scores_zero_everywhere(gain: Gain) -> None:
    scores = score_trace(["a", "b", "c"], {"a": 0.0, "b": 0.0, "z": 0.0}, ALL_METRICS, gain)
    assert scores == {metric.name: 0.0 for metric in ALL_METRICS}


def test_no_relevant_label_matches_trec_eval() -> None:
    # pytrec_eval does not drop a query whose qrels hold only grade-0 judgements: it scores 0 on
    # every measure, nDCG included (IDCG = 0). It drops only a query with no qrels at all, which is
    # what `score_trace` calls unannotated.
    metrics = [m for m in ALL_METRICS if m.family != "mrr" or m.k is None]
    assert trec_eval(["a", "b"], {"a": 0, "z": 0}, metrics) == {m.name: 0.0 for m in metrics}
    assert trec_eval(["a", "b"], {}, metrics) is None


@pytest.mark.parametrize("retrieved", [[], ["a", "b"]])
def test_no_labels_is_unannotated(retrieved: list[str]) -> None:
    assert score_trace(retrieved, {}, ALL_METRICS) is None


def test_empty_ranked_list_with_labels_scores_zero() -> None:
    scores = score_trace([], {"a": 2.0}, [*ALL_METRICS, Metric("precision")])
    assert scores == {metric.name: 0.0 for metric in [*ALL_METRICS, Metric("precision")]}


def test_cutoff_beyond_list_length() -> None:
    retrieved, labels = ["a", "x"], {"a": 1.0, "b": 1.0}
    assert score_one(retrieved, labels, "P@10") == 1 / 10
    assert score_one(retrieved, labels, "recall@10") == 1 / 2
    assert score_one(retrieved, labels, "map@10") == (1 / 1) / 2
    assert score_one(retrieved, labels, "hit_rate@10") == 1
    # the ideal still ranks both relevant labels, although only two documents were retrieved
    assert score_one(retrieved, labels, "ndcg@10", "linear") == pytest.approx(
        (1 / log2(2)) / (1 / log2(2) + 1 / log2(3))
    )


def test_ideal_dcg_uses_the_k_best_grades_of_all_labels() -> None:
    # Phoenix-style nDCG (ideal from the retrieved documents only) would give 1 / log2(3) here
    retrieved, labels = ["x", "a", "y"], {"a": 3.0, "b": 3.0, "c": 3.0}
    assert score_one(retrieved, labels, "ndcg@3", "linear") == pytest.approx(
        (3 / log2(3)) / (3 / log2(2) + 3 / log2(3) + 3 / log2(4))
    )
    assert score_one(retrieved, labels, "ndcg@2", "linear") == pytest.approx(
        (3 / log2(3)) / (3 / log2(2) + 3 / log2(3))
    )


def test_first_relevant_beyond_k() -> None:
    retrieved, labels = ["x", "y", "z", "a"], {"a": 2.0}
    assert score_one(retrieved, labels, "mrr@3") == 0
    assert score_one(retrieved, labels, "mrr@4") == 1 / 4
    assert score_one(retrieved, labels, "mrr") == 1 / 4
    assert score_one(retrieved, labels, "hit_rate@3") == 0
    assert score_one(retrieved, labels, "hit_rate@4") == 1
    assert score_one(retrieved, labels, "ndcg@3") == 0


def test_map_at_k_divides_by_all_relevant_labels() -> None:
    retrieved = ["a", "x", "b", "y", "c"]
    labels = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}  # d relevant, never retrieved
    assert score_one(retrieved, labels, "map") == pytest.approx((1 / 1 + 2 / 3 + 3 / 5) / 4)
    assert score_one(retrieved, labels, "map@5") == pytest.approx((1 / 1 + 2 / 3 + 3 / 5) / 4)
    assert score_one(retrieved, labels, "map@3") == pytest.approx((1 / 1 + 2 / 3) / 4)
    assert score_one(retrieved, labels, "map@1") == pytest.approx((1 / 1) / 4)


def test_float_grades() -> None:
    retrieved, labels = ["a", "b"], {"a": 0.5, "b": 2.5, "c": 1.0}
    # relevant at level 1: b and c (a's 0.5 falls short)
    assert score_one(retrieved, labels, "P@2") == 1 / 2
    assert score_one(retrieved, labels, "recall@2") == 1 / 2
    assert score_one(retrieved, labels, "mrr") == 1 / 2
    assert score_one(retrieved, labels, "mrr", relevance_level=0.5) == 1 / 1
    assert score_one(retrieved, labels, "ndcg@2", "linear") == pytest.approx(
        (0.5 / log2(2) + 2.5 / log2(3)) / (2.5 / log2(2) + 1.0 / log2(3))
    )
    assert score_one(retrieved, labels, "ndcg@2", "exponential") == pytest.approx(
        ((2**0.5 - 1) / log2(2) + (2**2.5 - 1) / log2(3)) / ((2**2.5 - 1) + (2**1.0 - 1) / log2(3))
    )


def test_relevance_level_two() -> None:
    retrieved = ["a", "b", "x", "c"]
    labels = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 1.0}
    metrics = parse_metrics("P@3,recall@3,mrr,map,map@3,ndcg@4")
    scores = score_trace(retrieved, labels, metrics, "linear", relevance_level=2)
    # relevant at level 2: b and c, so R = 2
    assert scores == pytest.approx(
        {
            "precision@3": 1 / 3,
            "recall@3": 1 / 2,
            "mrr": 1 / 2,
            "map": (1 / 2 + 2 / 4) / 2,
            "map@3": (1 / 2) / 2,
            # nDCG ignores relevance_level: a (grade 1) still gains, d still in the ideal
            "ndcg@4": (1 / log2(2) + 2 / log2(3) + 3 / log2(5))
            / (3 / log2(2) + 2 / log2(3) + 1 / log2(4) + 1 / log2(5)),
        }
    )
    level_one = score_trace(retrieved, labels, metrics, "linear", relevance_level=1)
    assert level_one is not None and scores is not None
    assert level_one["ndcg@4"] == scores["ndcg@4"]
    int_labels = {doc: int(g) for doc, g in labels.items()}
    assert scores == pytest.approx(trec_eval(retrieved, int_labels, metrics, 2), abs=1e-9)


def test_no_relevant_label_at_level_keeps_ndcg() -> None:
    # R = 0 at level 2, yet the grade-1 label still has gain; trec_eval agrees (ndcg_cut_2 = 1)
    retrieved, labels = ["a", "x"], {"a": 1}
    metrics = parse_metrics("ndcg@2,P@2,recall@2,mrr,map")
    scores = score_trace(retrieved, labels, metrics, "linear", relevance_level=2)
    assert scores == {"ndcg@2": 1.0, "precision@2": 0, "recall@2": 0, "mrr": 0, "map": 0}
    assert trec_eval(retrieved, labels, metrics, relevance_level=2) == scores


def test_negative_grade_adds_no_gain() -> None:
    # trec_eval sums only positive gains, in DCG and ideal DCG alike
    retrieved, labels = ["a", "b", "c"], {"a": -1, "b": 1, "c": -2}
    metrics = parse_metrics("ndcg@3")
    for gain in GAINS:
        scores = score_trace(retrieved, labels, metrics, gain)
        assert scores == pytest.approx({"ndcg@3": (1 / log2(3)) / (1 / log2(2))})
    assert trec_eval(retrieved, labels, metrics) == pytest.approx({"ndcg@3": 1 / log2(3)})


def test_no_cutoff_reads_as_the_whole_list() -> None:
    # every family accepts k=None; it reads as the trec_eval measure without a cut
    retrieved, labels = ["x", "a", "y", "b"], {"a": 1, "b": 2, "c": 1}
    families = ["ndcg", "precision", "recall", "map", "mrr"]
    metrics = [Metric(family) for family in families]
    scores = score_trace(retrieved, labels, [*metrics, Metric("hit_rate")], "linear")
    assert scores == pytest.approx(
        {
            "ndcg": (1 / log2(3) + 2 / log2(5)) / (2 / log2(2) + 1 / log2(3) + 1 / log2(4)),
            "precision": 2 / 4,
            "recall": 2 / 3,
            "map": (1 / 2 + 2 / 4) / 3,
            "mrr": 1 / 2,
            "hit_rate": 1,
        }
    )
    assert scores is not None
    assert {name: scores[name] for name in families} == pytest.approx(
        trec_eval(retrieved, labels, metrics), abs=1e-9
    )


def test_bad_options_refused() -> None:
    with pytest.raises(MetricConfigError, match="gain"):
        score_trace(["a"], {"a": 1.0}, ALL_METRICS, "log")  # type: ignore[arg-type]
    with pytest.raises(MetricConfigError, match="relevance level"):
        score_trace(["a"], {"a": 1.0}, ALL_METRICS, relevance_level=0)
    with pytest.raises(MetricConfigError, match="unknown metric"):
        score_trace(["a"], {"a": 1.0}, [Metric("bleu")])


# --- property-based, against trec_eval --------------------------------------------------------

POOL = [f"d{i}" for i in range(16)]
ranked_lists = st.lists(st.sampled_from(POOL), max_size=15, unique=True)
grade_maps = st.dictionaries(st.sampled_from(POOL), st.integers(0, 3), max_size=10)
levels = st.sampled_from([1, 2])

TREC_METRICS = (
    Metric("map"),
    Metric("mrr"),
    *[Metric(family, k) for k in CUTOFFS for family in ("ndcg", "precision", "recall", "map")],
    *[Metric("hit_rate", k) for k in CUTOFFS],
)


@settings(max_examples=400, deadline=None)
@given(ranked=ranked_lists, labels=grade_maps, level=levels)
def test_linear_gain_matches_trec_eval(
    ranked: list[str], labels: dict[str, int], level: int
) -> None:
    float_labels = {doc: float(g) for doc, g in labels.items()}
    actual = score_trace(ranked, float_labels, TREC_METRICS, "linear", level)
    expected = trec_eval(ranked, labels, TREC_METRICS, level)
    # pytrec_eval drops a query with no qrels; `score_trace` calls it unannotated
    assert (actual is None) == (not labels) == (expected is None)
    if actual is not None:
        assert actual == pytest.approx(expected, abs=1e-9)


@settings(max_examples=400, deadline=None)
@given(ranked=ranked_lists, labels=grade_maps, level=levels)
def test_exponential_gain_and_cut_rr(ranked: list[str], labels: dict[str, int], level: int) -> None:
    float_labels = {doc: float(g) for doc, g in labels.items()}
    metrics = [Metric(family, k) for k in CUTOFFS for family in ("ndcg", "mrr")]
    actual = score_trace(ranked, float_labels, metrics, "exponential", level)
    if not labels:
        assert actual is None
        return
    assert actual is not None
    for k in CUTOFFS:
        assert actual[f"ndcg@{k}"] == pytest.approx(exponential_ndcg(ranked, labels, k), abs=1e-9)
        expected_rr = reciprocal_rank_at(ranked, labels, k, level)
        assert actual[f"mrr@{k}"] == pytest.approx(expected_rr, abs=1e-9)
    # exponential gain is trec_eval's linear gain on grades relabelled 2^g - 1
    relabelled = {doc: 2**g - 1 for doc, g in labels.items()}
    ndcgs = [m for m in metrics if m.family == "ndcg"]
    expected = trec_eval(ranked, relabelled, ndcgs)
    assert expected is not None
    assert {m.name: actual[m.name] for m in ndcgs} == pytest.approx(expected, abs=1e-9)


# --- the evaluator --------------------------------------------------------------------------------


def test_threshold_failure_text_and_margin() -> None:
    failure = ThresholdFailure("ndcg@10", 0.612, 0.7)
    assert str(failure) == "ndcg@10=0.612 < 0.700"
    assert failure.margin == pytest.approx(0.612 - 0.7)


def test_evaluator_fails_with_reasons() -> None:
    evaluator = RetrievalMetricsEvaluator([("nDCG@5", 0.5), ("P@5", 0.1), ("R@5", 0.3)])
    result = evaluator.evaluate(make_record(EXAMPLE_A_RETRIEVED, EXAMPLE_A_LABELS))
    ndcg_5 = (7 / log2(3)) / (7 + 3 / log2(3) + 1 / log2(4) + 1 / log2(5))
    assert not result.passed
    assert result.annotated
    assert result.reason == "ndcg@5=0.450 < 0.500; recall@5=0.250 < 0.300"
    assert result.scores == pytest.approx(
        {"ndcg@5": ndcg_5, "precision@5": 1 / 5, "recall@5": 1 / 4}
    )
    assert result.score == pytest.approx((ndcg_5 + 1 / 5 + 1 / 4) / 3)
    assert [(f.metric, f.threshold) for f in result.failures] == [
        ("ndcg@5", 0.5),
        ("recall@5", 0.3),
    ]
    assert result.failures[0].margin == pytest.approx(ndcg_5 - 0.5)
    assert result.failures[1].margin == pytest.approx(1 / 4 - 0.3)


def test_evaluator_passes_on_equal_threshold() -> None:
    evaluator = RetrievalMetricsEvaluator({"ndcg@3": 0.4, "RR": 0.5, "AP": 0.1})
    result = evaluator.evaluate(make_record(EXAMPLE_A_RETRIEVED, EXAMPLE_A_LABELS))
    assert result.passed
    assert result.failures == []
    assert result.reason == (
        "all thresholds met (ndcg@3=0.470 >= 0.400, mrr=0.500 >= 0.500, map=0.125 >= 0.100)"
    )


def test_evaluator_unannotated_example_passes_unscored() -> None:
    evaluator = RetrievalMetricsEvaluator([("ndcg@10", 0.9)])
    result = evaluator.evaluate(make_record(["a", "b"], {}))
    assert result == EvaluationResult(
        passed=True,
        score=None,
        scores=None,
        reason=UNANNOTATED_REASON,
        failures=[],
        annotated=False,
    )
    assert result.reason == "unannotated: no labels, not scored"


def test_evaluator_judged_with_no_labels_scores_zero() -> None:
    evaluator = RetrievalMetricsEvaluator([("ndcg@10", 0.5), ("mrr", 0.5)])
    record = {
        "trace_id": "t",
        "query_id": "q",
        "timestamp": "2026-11-30T00:00:00Z",
        "retrieved_ids": ["a"],
        "relevant_ids": [],
    }
    result = evaluator.evaluate(record)
    assert result.annotated
    assert result.scores == {"ndcg@10": 0.0, "mrr": 0.0}
    assert result.reason == "ndcg@10=0.000 < 0.500; mrr=0.000 < 0.500"


def test_evaluator_options_reach_the_scores() -> None:
    record = make_record(["a", "b", "x", "c"], {"a": 1.0, "b": 2.0, "c": 3.0, "d": 1.0})
    linear = RetrievalMetricsEvaluator([("ndcg@4", 0.0), ("mrr", 0.0)], gain="linear")
    level_two = RetrievalMetricsEvaluator([("ndcg@4", 0.0), ("mrr", 0.0)], relevance_level=2)
    assert linear.evaluate(record).scores == pytest.approx(
        {
            "ndcg@4": (1 / log2(2) + 2 / log2(3) + 3 / log2(5))
            / (3 / log2(2) + 2 / log2(3) + 1 / log2(4) + 1 / log2(5)),
            "mrr": 1 / 1,
        }
    )
    assert level_two.evaluate(record).scores == pytest.approx(
        {
            "ndcg@4": (1 / log2(2) + 3 / log2(3) + 7 / log2(5))
            / (7 / log2(2) + 3 / log2(3) + 1 / log2(4) + 1 / log2(5)),
            "mrr": 1 / 2,
        }
    )


def test_evaluate_many_keeps_order() -> None:
    evaluator = RetrievalMetricsEvaluator([("mrr", 0.5)])
    records = [
        make_record(["a"], {"a": 1.0}),
        make_record(["x", "y", "a"], {"a": 1.0}),
        make_record(["a"], {}),
    ]
    results = evaluator.evaluate_many(records)
    assert [(r.passed, r.score, r.annotated) for r in results] == [
        (True, 1 / 1, True),
        (False, 1 / 3, True),
        (True, None, False),
    ]


def test_evaluator_names_are_canonical() -> None:
    evaluator = RetrievalMetricsEvaluator(
        [("nDCG@10", 0.1), ("P@5", 0.1), ("RR", 0.1), ("AP@10", 0.1), ("Success@3", 0.1)]
    )
    result = evaluator.evaluate(make_record(["a"], {"a": 1.0}))
    assert result.scores is not None
    assert list(result.scores) == ["ndcg@10", "precision@5", "mrr", "map@10", "hit_rate@3"]


def test_unknown_metric_lists_the_valid_names() -> None:
    with pytest.raises(MetricConfigError, match="unknown metric 'ndgc@10'") as error:
        RetrievalMetricsEvaluator([("ndgc@10", 0.5)])
    assert "valid metrics: ndcg@K, mrr" in str(error.value)


@pytest.mark.parametrize("threshold", [1.5, -0.1, math.nan, True, "0.5", None])
def test_threshold_outside_unit_interval_refused(threshold: object) -> None:
    with pytest.raises(
        MetricConfigError, match=r"threshold for 'ndcg@10' must be a number in \[0, 1\]"
    ):
        RetrievalMetricsEvaluator([("nDCG@10", threshold)])  # type: ignore[list-item]


@pytest.mark.parametrize("threshold", [0, 1, 0.0, 1.0])
def test_threshold_bounds_accepted(threshold: float) -> None:
    evaluator = RetrievalMetricsEvaluator([("ndcg@10", threshold)])
    assert evaluator.thresholds == {Metric("ndcg", 10): float(threshold)}


def test_other_bad_evaluator_configs_refused() -> None:
    with pytest.raises(MetricConfigError, match="more than one threshold"):
        RetrievalMetricsEvaluator([("nDCG@10", 0.5), ("ndcg@10", 0.6)])
    with pytest.raises(MetricConfigError, match="no threshold"):
        RetrievalMetricsEvaluator([])
    with pytest.raises(MetricConfigError, match="needs a cut-off"):
        RetrievalMetricsEvaluator([("ndcg", 0.5)])
    with pytest.raises(MetricConfigError, match="gain"):
        RetrievalMetricsEvaluator([("ndcg@10", 0.5)], gain="log")  # type: ignore[arg-type]
    with pytest.raises(MetricConfigError, match="relevance level"):
        RetrievalMetricsEvaluator([("ndcg@10", 0.5)], relevance_level=-1)


# --- the evaluator on raw records (through records.parse_record) ----------------------------------


def raw_record(retrieved: list[object], relevant: list[object]) -> dict[str, object]:
    return {
        "trace_id": "t1",
        "query_id": "q1",
        "timestamp": "2024-05-01T12:00:00Z",
        "retrieved_ids": retrieved,
        "relevant_ids": relevant,
    }


def test_integer_ids_score_as_their_strings() -> None:
    evaluator = RetrievalMetricsEvaluator([("ndcg@3", 0.5), ("mrr", 0.5)])
    as_ints = evaluator.evaluate(raw_record([3, 7, 9], [7]))
    as_strings = evaluator.evaluate(raw_record(["3", "7", "9"], ["7"]))
    assert as_ints == as_strings
    assert as_ints.scores == pytest.approx({"ndcg@3": (1 / log2(3)) / 1, "mrr": 1 / 2})


def test_invalid_record_raises_record_error() -> None:
    evaluator = RetrievalMetricsEvaluator([("mrr", 0.5)])
    with pytest.raises(RecordError):
        evaluator.evaluate({"trace_id": "t1"})
