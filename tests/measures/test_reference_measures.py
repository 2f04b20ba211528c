"""The per-trace scorer's measures for incomplete judgments: trec_eval as the oracle for rprec,
bpref and condensed lists, visible arithmetic for judged@K, rbp@P with its residual and err@K.

Expected values are spelled as the arithmetic of the definitions in `retrieval_pipeline.metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import log2

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.metrics import (
    Metric,
    MetricConfigError,
    parse_metric,
    parse_metrics,
    with_residuals,
)
from retrieval_pipeline.reference import RetrievalMetricsEvaluator, score_trace
from tests.measures.trec_oracle import trec_eval_scores


def scores_of(
    retrieved: Sequence[str],
    labels: Mapping[str, float],
    names: str,
    relevance_level: float = 1.0,
    gmax: float = 3.0,
    judged_only: bool = False,
) -> dict[str, float]:
    scores = score_trace(
        retrieved,
        labels,
        parse_metrics(names),
        relevance_level=relevance_level,
        gmax=gmax,
        judged_only=judged_only,
    )
    assert scores is not None
    return scores


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("judged@10", "judged@10"),
        ("Judged@5", "judged@5"),
        ("Rprec", "rprec"),
        ("RPrec", "rprec"),
        ("Bpref", "bpref"),
        ("BPref", "bpref"),
        ("ERR@10", "err@10"),
        ("err", "err"),
        ("rbp@0.8", "rbp@0.8"),
        ("rbp@0.80", "rbp@0.8"),
        ("RBP", "rbp@0.8"),  # ir_measures' default persistence
        ("RBP(p=0.95)", "rbp@0.95"),
        ("rbp@0.5_residual", "rbp@0.5_residual"),
    ],
)
def test_names_and_ir_measures_aliases(text: str, canonical: str) -> None:
    metric = parse_metric(text)
    assert metric.name == canonical
    assert parse_metric(metric.name) == metric  # the canonical name reads back as itself


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("judged", "needs a cut-off"),
        ("rprec@5", "takes no cut-off"),
        ("bpref@10", "takes no cut-off"),
        ("rbp@1", "must be a number in (0, 1)"),
        ("rbp@0", "must be a number in (0, 1)"),
        ("rbp@nan", "must be a number in (0, 1)"),
        ("RBP(p=1.5)", "must be a number in (0, 1)"),
        ("err@0", "must be >= 1"),
    ],
)
def test_bad_names_say_why(text: str, words: str) -> None:
    with pytest.raises(MetricConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_metric(text)


def test_every_rbp_gets_its_residual_beside_it() -> None:
    names = [m.name for m in with_residuals(parse_metrics("rbp@0.8,ndcg@10,rbp@0.5"))]
    assert names == ["rbp@0.8", "rbp@0.8_residual", "ndcg@10", "rbp@0.5", "rbp@0.5_residual"]
    # one already asked for is not repeated
    names = [m.name for m in with_residuals(parse_metrics("rbp@0.8_residual,rbp@0.8"))]
    assert names == ["rbp@0.8_residual", "rbp@0.8"]


def test_bad_gmax_refused() -> None:
    for gmax in (0, -1, float("inf"), float("nan")):
        with pytest.raises(MetricConfigError, match="gmax"):
            score_trace(["a"], {"a": 1.0}, [parse_metric("err@5")], gmax=gmax)


# --- visible arithmetic -----------------------------------------------------------------------

# d1=3 at rank 1, u (unjudged) at rank 2, d0 (grade 0) at rank 3, d2=2 at rank 4, v (unjudged)
# at rank 5; d9=1 was not retrieved.
RETRIEVED = ["d1", "u", "d0", "d2", "v"]
LABELS = {"d1": 3.0, "d0": 0.0, "d2": 2.0, "d9": 1.0}


def test_judged_at_k_counts_grade_zero_and_divides_by_k() -> None:
    got = scores_of(RETRIEVED, LABELS, "judged@1,judged@2,judged@4,judged@10")
    assert got["judged@1"] == pytest.approx(1 / 1)
    assert got["judged@2"] == pytest.approx(1 / 2)
    assert got["judged@4"] == pytest.approx(3 / 4)  # d1, d0 (grade 0 is judged), d2
    assert got["judged@10"] == pytest.approx(3 / 10)  # 5 retrieved, K stays the denominator


def test_rprec_and_bpref_by_hand() -> None:
    got = scores_of(RETRIEVED, LABELS, "rprec,bpref")
    # R = 3 (d1, d2, d9): the top 3 hold d1 only
    assert got["rprec"] == pytest.approx(1 / 3)
    # N = 1 (d0). d1: no non-relevant above, 1. d2: d0 above, 1 - min(1, 3) / min(1, 3) = 0.
    assert got["bpref"] == pytest.approx((1 + (1 - 1 / 1)) / 3)


def test_bpref_with_more_non_relevant_than_relevant() -> None:
    # R = 2 (r1, r2), N = 3 (n1, n2, n3); ranked n1 r1 n2 x r2 (x unjudged, skipped)
    labels = {"r1": 1.0, "r2": 2.0, "n1": 0.0, "n2": 0.0, "n3": 0.0}
    got = scores_of(["n1", "r1", "n2", "x", "r2"], labels, "bpref")
    assert got["bpref"] == pytest.approx(((1 - 1 / 2) + (1 - min(2, 2) / min(3, 2))) / 2)


def test_rbp_and_its_residual_by_hand() -> None:
    got = scores_of(RETRIEVED, LABELS, "rbp@0.8,rbp@0.8_residual", gmax=3)
    # gains min(g, 3) / 3 at ranks 1 (d1: 3/3), 3 (d0: 0/3) and 4 (d2: 2/3)
    assert got["rbp@0.8"] == pytest.approx((1 - 0.8) * (1 + 0.8**3 * 2 / 3))
    # unjudged at ranks 2 and 5, then everything past rank 5
    assert got["rbp@0.8_residual"] == pytest.approx((1 - 0.8) * (0.8**1 + 0.8**4) + 0.8**5)
    # the same, from the judged ranks 1, 3, 4
    assert got["rbp@0.8_residual"] == pytest.approx(1 - (1 - 0.8) * (1 + 0.8**2 + 0.8**3))


def test_rbp_gain_is_capped_at_gmax() -> None:
    got = scores_of(["a", "b"], {"a": 5.0, "b": 1.0}, "rbp@0.5", gmax=2)
    assert got["rbp@0.5"] == pytest.approx((1 - 0.5) * (2 / 2 + 0.5 * 1 / 2))


def test_err_by_hand() -> None:
    got = scores_of(RETRIEVED, LABELS, "err@1,err@3,err@10,err", gmax=3)
    stop1, stop4 = (2**3 - 1) / 2**3, (2**2 - 1) / 2**3  # d1 (grade 3), d2 (grade 2)
    assert got["err@1"] == pytest.approx(stop1 / 1)
    assert got["err@3"] == pytest.approx(stop1 / 1)  # ranks 2, 3 stop nobody
    assert got["err@10"] == pytest.approx(stop1 / 1 + (1 - stop1) * stop4 / 4)
    assert got["err"] == got["err@10"]


def test_err_caps_grades_at_gmax() -> None:
    got = scores_of(["a", "b"], {"a": 4.0, "b": 1.0}, "err@2", gmax=2)
    stop_a, stop_b = (2**2 - 1) / 2**2, (2**1 - 1) / 2**2
    assert got["err@2"] == pytest.approx(stop_a + (1 - stop_a) * stop_b / 2)


# --- edge cases -------------------------------------------------------------------------------

NEW = "judged@3,rprec,bpref,rbp@0.8,rbp@0.8_residual,err@3"


def test_no_relevant_label() -> None:
    got = scores_of(["a", "x"], {"a": 0.0, "b": 0.0}, NEW)
    assert got == pytest.approx(
        {
            "judged@3": 1 / 3,
            "rprec": 0.0,
            "bpref": 0.0,
            "rbp@0.8": 0.0,
            "rbp@0.8_residual": 1 - (1 - 0.8) * 1,  # only rank 1 is judged
            "err@3": 0.0,
        }
    )


def test_judged_with_no_labels_at_all() -> None:
    # `relevant_ids: []`: annotated, nothing judged in the list
    assert score_trace(["a", "b"], {}, parse_metrics(NEW)) is None
    got = score_trace(["a", "b"], {}, parse_metrics(NEW), judged=True)
    expected = dict.fromkeys(["judged@3", "rprec", "bpref", "rbp@0.8", "err@3"], 0.0)
    assert got == pytest.approx(expected | {"rbp@0.8_residual": 1.0})
    result = RetrievalMetricsEvaluator({"rbp@0.8_residual": 0.0}).evaluate(
        {"trace_id": "t", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
         "retrieved_ids": ["a"], "relevant_ids": []}
    )  # fmt: skip
    assert result.annotated and result.scores == {"rbp@0.8_residual": 1.0}


def test_empty_list() -> None:
    got = scores_of([], {"a": 2.0}, NEW)
    assert got == pytest.approx(dict.fromkeys(got, 0.0) | {"rbp@0.8_residual": 1.0})


def test_repeated_ids_are_dropped_first_kept() -> None:
    repeated = scores_of(["a", "a", "u", "a", "b"], {"a": 0.0, "b": 2.0}, NEW)
    assert repeated == scores_of(["a", "u", "b"], {"a": 0.0, "b": 2.0}, NEW)
    assert repeated["judged@3"] == pytest.approx(2 / 3)  # a, b; not a counted three times


def test_condensed_list_by_hand() -> None:
    # RETRIEVED condensed: d1 (3), d0 (0), d2 (2); the labels (R = 3, N = 1) are unchanged
    names = "judged@2,precision@2,rprec,bpref,rbp@0.8,rbp@0.8_residual,err@3,mrr,map,ndcg@3"
    got = scores_of(RETRIEVED, LABELS, names, judged_only=True)
    full = scores_of(RETRIEVED, LABELS, names)
    assert got["judged@2"] == pytest.approx(1 / 2)  # the list as served: d1, u
    assert got["precision@2"] == pytest.approx(1 / 2)
    assert got["rprec"] == pytest.approx(2 / 3)  # the top R = 3 are d1, d0, d2
    assert got["bpref"] == full["bpref"]  # bpref never sees unjudged documents
    assert got["rbp@0.8"] == pytest.approx((1 - 0.8) * (1 + 0.8**2 * 2 / 3))
    assert got["rbp@0.8_residual"] == pytest.approx(0.8**3)
    stop1, stop3 = (2**3 - 1) / 2**3, (2**2 - 1) / 2**3
    assert got["err@3"] == pytest.approx(stop1 + (1 - stop1) * stop3 / 3)
    assert got["mrr"] == pytest.approx(1 / 1)
    assert got["map"] == pytest.approx((1 / 1 + 2 / 3) / 3)
    ideal = (2**3 - 1) / log2(2) + (2**2 - 1) / log2(3) + (2**1 - 1) / log2(4)  # 3, 2, 1 (d9)
    assert got["ndcg@3"] == pytest.approx(((2**3 - 1) / log2(2) + (2**2 - 1) / log2(4)) / ideal)


# --- trec_eval as the oracle, on random traces ------------------------------------------------

POOL = [f"d{i}" for i in range(14)]
# repeated ids, unjudged documents (labels cover part of the pool) and grade-0 labels
ranked_lists = st.lists(st.sampled_from(POOL), max_size=16)
grade_maps = st.dictionaries(st.sampled_from(POOL), st.integers(0, 3), max_size=10)
TREC_NAMES = ["rprec", "bpref", "precision@3", "ndcg@5", "map", "mrr", "recall@10"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(ranked_lists, grade_maps), min_size=1, max_size=6),
    st.sampled_from([1, 2, 3]),
    st.booleans(),
)
def test_rprec_bpref_and_condensed_lists_equal_trec_eval(
    cases: list[tuple[list[str], dict[str, int]]], relevance_level: int, judged_only: bool
) -> None:
    by_query = {f"q{i}": case for i, case in enumerate(cases)}
    oracle = trec_eval_scores(by_query, TREC_NAMES, relevance_level, judged_only)
    metrics = parse_metrics(TREC_NAMES)
    for qid, (ranked, labels) in by_query.items():
        ours = score_trace(
            ranked,
            {doc: float(grade) for doc, grade in labels.items()},
            metrics,
            "linear",  # trec_eval's nDCG gain
            relevance_level,
            judged_only=judged_only,
            judged=True,  # an empty qrels entry scores 0, as in trec_eval
        )
        assert ours is not None
        for name in TREC_NAMES:
            assert ours[name] == pytest.approx(oracle[qid][name], abs=1e-9), (name, qid)


@settings(max_examples=150, deadline=None)
@given(ranked_lists, grade_maps, st.sampled_from([0.5, 0.8, 0.95]))
def test_rbp_plus_residual_bounds_any_completion(
    ranked: list[str], labels: dict[str, int], p: float
) -> None:
    """Judging every unjudged document of the list at the top grade, and appending top-grade
    documents past its end, raises rbp@P towards rbp@P + residual and never beyond."""
    grades = {doc: float(grade) for doc, grade in labels.items()}
    names = f"rbp@{p},rbp@{p}_residual"
    got = score_trace(ranked, grades, parse_metrics(names), judged=True)
    assert got is not None
    unique = list(dict.fromkeys(ranked))
    filled = grades | {doc: 3.0 for doc in unique if doc not in grades}
    tail = [f"extra{i}" for i in range(600)]
    best = score_trace(unique + tail, filled | dict.fromkeys(tail, 3.0), parse_metrics(names))
    assert best is not None
    assert best[f"rbp@{p}"] == pytest.approx(got[f"rbp@{p}"] + got[f"rbp@{p}_residual"], abs=1e-9)


def test_metric_objects_for_rbp_compare_by_persistence() -> None:
    assert parse_metric("rbp@0.8") == Metric("rbp", p=0.8)
    assert parse_metric("rbp@0.8") != parse_metric("rbp@0.9")


def test_the_evaluator_takes_gmax_and_condensed_lists() -> None:
    record = {"trace_id": "t", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
              "retrieved_ids": ["u", "a"], "relevance_scores": {"a": 1}}  # fmt: skip
    full = RetrievalMetricsEvaluator({"err@2": 0.0, "mrr": 0.0}, gmax=1).evaluate(record)
    assert full.scores == pytest.approx({"err@2": (2**1 - 1) / 2**1 / 2, "mrr": 1 / 2})
    condensed = RetrievalMetricsEvaluator({"mrr": 0.0}, judged_only=True).evaluate(record)
    assert condensed.scores == pytest.approx({"mrr": 1 / 1})
