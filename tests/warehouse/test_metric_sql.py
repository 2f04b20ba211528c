"""The batch SQL metrics against trec_eval (pytrec_eval) and against visible arithmetic."""

from __future__ import annotations

from math import log2

import pandas as pd
import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_pipeline.metrics import Gain, parse_metrics
from retrieval_pipeline.reference import score_trace
from retrieval_pipeline.warehouse.evaluation import evaluate

TS = "2026-11-30T12:00:00Z"


def trace(trace_id: str, retrieved: list, scores: dict | None = None, **extra: object) -> dict:
    record: dict[str, object] = {
        "trace_id": trace_id,
        "query_id": f"q-{trace_id}",
        "timestamp": TS,
        "retrieved_ids": retrieved,
    }
    if scores is not None:
        record["relevance_scores"] = scores
    record.update(extra)
    return record


# Worked example A (../shared/reference/metric-semantics.md): grades d1=3, d2=2, d3=0, d4=1,
# d5=1; retrieved d3, d1, d9. Relevant (grade >= 1): d1, d2, d4, d5, so R = 4.
EXAMPLE_A = trace("A", ["d3", "d1", "d9"], {"d1": 3, "d2": 2, "d3": 0, "d4": 1, "d5": 1})


def exp_gain(g: float) -> float:
    return 2**g - 1


def test_worked_example_a_linear_gain() -> None:
    row = evaluate(
        pd.DataFrame([EXAMPLE_A]),
        "P@3,P@5,recall@5,mrr,map,map@5,ndcg@3,ndcg@5",
        gain="linear",
    ).iloc[0]
    assert row["precision@3"] == pytest.approx(1 / 3, abs=1e-12)
    assert row["precision@5"] == pytest.approx(1 / 5, abs=1e-12)
    assert row["recall@5"] == pytest.approx(1 / 4, abs=1e-12)
    assert row["mrr"] == pytest.approx(1 / 2, abs=1e-12)
    assert row["map"] == pytest.approx((1 / 2) / 4, abs=1e-12)
    assert row["map@5"] == pytest.approx((1 / 2) / 4, abs=1e-12)
    ideal3 = 3 / log2(2) + 2 / log2(3) + 1 / log2(4)
    assert row["ndcg@3"] == pytest.approx((3 / log2(3)) / ideal3, abs=1e-12)
    assert row["ndcg@3"] == pytest.approx(0.397490, abs=1e-6)  # the reference table's figure
    ideal5 = ideal3 + 1 / log2(5)
    assert row["ndcg@5"] == pytest.approx((3 / log2(3)) / ideal5, abs=1e-12)
    assert row["ndcg@5"] == pytest.approx(0.364521, abs=1e-6)


def test_worked_example_a_exponential_gain() -> None:
    row = evaluate(pd.DataFrame([EXAMPLE_A]), "ndcg@3,ndcg@5").iloc[0]
    dcg = exp_gain(3) / log2(3)
    ideal3 = exp_gain(3) / log2(2) + exp_gain(2) / log2(3) + exp_gain(1) / log2(4)
    ideal5 = ideal3 + exp_gain(1) / log2(5)
    assert row["ndcg@3"] == pytest.approx(dcg / ideal3, abs=1e-12)
    assert row["ndcg@5"] == pytest.approx(dcg / ideal5, abs=1e-12)
    assert row["ndcg@5"] == pytest.approx(0.449588, abs=1e-6)


def test_edge_cases_are_decisions() -> None:
    names = ["precision@5", "recall@3", "mrr", "mrr@3", "hit_rate@3", "map@3", "map", "ndcg@10"]
    frame = evaluate(
        pd.DataFrame(
            [
                trace("unjudged", ["a", "b"]),
                trace("all-zero", ["a", "b"], {"a": 0, "b": 0}),
                trace("empty-judgement", ["a"], relevant_ids=[]),
                trace("short", ["x", "r"], {"r": 1}),
                trace("late", ["x", "y", "z", "r"], {"r": 2}),
            ]
        ),
        names,
    ).set_index("trace_id")
    # no labels at all: unannotated, no scores
    assert frame.loc["unjudged", names].isna().all()
    # judged, nothing relevant: 0 everywhere, as trec_eval
    for name in ("all-zero", "empty-judgement"):
        assert (frame.loc[name, names] == 0).all(), name
    # fewer retrieved than K: the denominator stays K
    assert frame.loc["short", "precision@5"] == pytest.approx(1 / 5)
    # first relevant beyond K: rr@3 and map@3 are 0, the uncut ones are not
    assert frame.loc["late", "mrr@3"] == 0
    assert frame.loc["late", "mrr"] == pytest.approx(1 / 4)
    assert frame.loc["late", "map@3"] == 0
    assert frame.loc["late", "map"] == pytest.approx((1 / 4) / 1)
    assert frame.loc["late", "hit_rate@3"] == 0
    assert frame.loc["late", "ndcg@10"] == pytest.approx((exp_gain(2) / log2(5)) / exp_gain(2))


def test_duplicates_keep_first_occurrence_and_ranks_close_up() -> None:
    frame = evaluate(
        pd.DataFrame([trace("dup", ["a", "a", "b", "a", "r"], {"r": 1})]), "mrr,precision@3"
    )
    row = frame.iloc[0]
    # a, b, r after de-duplication: r moves from rank 5 to rank 3
    assert row["n_retrieved"] == 3
    assert row["mrr"] == pytest.approx(1 / 3)
    assert row["precision@3"] == pytest.approx(1 / 3)


def test_integer_and_string_ids_are_the_same_document() -> None:
    frame = evaluate(pd.DataFrame([trace("ints", [7, "8", 9], {"9": 1}, relevant_ids=[7])]), "map")
    # relevant: 7 (grade 1 from relevant_ids) at rank 1 and 9 at rank 3: AP = (1/1 + 2/3) / 2
    assert frame.iloc[0]["map"] == pytest.approx((1 / 1 + 2 / 3) / 2)


def test_relevance_level_applies_to_binary_metrics_not_ndcg() -> None:
    record = trace("lvl", ["a", "b", "c"], {"a": 1, "b": 2, "c": 3})
    low = evaluate(pd.DataFrame([record]), "precision@3,ndcg@3", gain="linear").iloc[0]
    high = evaluate(
        pd.DataFrame([record]), "precision@3,ndcg@3", gain="linear", relevance_level=2
    ).iloc[0]
    assert low["precision@3"] == pytest.approx(3 / 3)
    assert high["precision@3"] == pytest.approx(2 / 3)
    assert high["ndcg@3"] == low["ndcg@3"]


# ---- the oracle: trec_eval through pytrec_eval, on random traces --------------------------------

CUTOFFS = (1, 3, 5, 10, 20)
DOC_POOL = [f"d{i}" for i in range(12)]


def pytrec_values(records: list[dict], relevance_level: int) -> dict[str, dict[str, float]]:
    qrels = {r["trace_id"]: {d: int(g) for d, g in r["relevance_scores"].items()} for r in records}
    run = {}
    for r in records:
        unique = list(dict.fromkeys(r["retrieved_ids"]))
        # pytrec_eval ranks by score: -rank keeps production's order, strictly decreasing
        run[r["trace_id"]] = {doc: float(-rank) for rank, doc in enumerate(unique, start=1)}
    measures = {"map", "recip_rank"} | {
        f"{m}.{k}" for m in ("ndcg_cut", "P", "recall", "map_cut") for k in CUTOFFS
    }
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=relevance_level)
    return evaluator.evaluate(run)


OUR_NAMES = {"map": "map", "recip_rank": "mrr"} | {
    f"{trec}_{k}": f"{ours}@{k}"
    for trec, ours in (
        ("ndcg_cut", "ndcg"),
        ("P", "precision"),
        ("recall", "recall"),
        ("map_cut", "map"),
    )
    for k in CUTOFFS
}

traces_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from(DOC_POOL), max_size=15),  # may repeat ids
        st.dictionaries(st.sampled_from(DOC_POOL), st.integers(0, 3), min_size=1, max_size=10),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces_strategy, st.sampled_from([1, 2]))
def test_sql_metrics_equal_trec_eval(cases: list, relevance_level: int) -> None:
    records = [trace(f"t{i}", retrieved, scores) for i, (retrieved, scores) in enumerate(cases)]
    ours = evaluate(
        pd.DataFrame(records),
        list(OUR_NAMES.values()),
        gain="linear",
        relevance_level=relevance_level,
    ).set_index("trace_id")
    oracle = pytrec_values(records, relevance_level)
    for r in records:
        tid = r["trace_id"]
        # pytrec_eval drops a query with no relevant label; trec_eval scores it 0 everywhere
        expected = oracle.get(tid, dict.fromkeys(OUR_NAMES, 0.0))
        for trec_name, our_name in OUR_NAMES.items():
            assert ours.loc[tid, our_name] == pytest.approx(expected[trec_name], abs=1e-9), (
                tid,
                our_name,
                r,
            )


@settings(max_examples=40, deadline=None)
@given(traces_strategy)
def test_sql_exponential_ndcg_equals_the_formula(cases: list) -> None:
    records = [trace(f"t{i}", retrieved, scores) for i, (retrieved, scores) in enumerate(cases)]
    ours = evaluate(pd.DataFrame(records), "ndcg@5,ndcg@20").set_index("trace_id")
    for r in records:
        ranked = list(dict.fromkeys(r["retrieved_ids"]))
        grades = r["relevance_scores"]
        for k in (5, 20):
            dcg = sum((2 ** grades.get(d, 0) - 1) / log2(i + 2) for i, d in enumerate(ranked[:k]))
            best = sorted(grades.values(), reverse=True)[:k]
            ideal = sum((2**g - 1) / log2(i + 2) for i, g in enumerate(best))
            expected = dcg / ideal if ideal > 0 else 0.0
            assert ours.loc[r["trace_id"], f"ndcg@{k}"] == pytest.approx(expected, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(DOC_POOL), max_size=10),
            st.dictionaries(
                st.sampled_from(DOC_POOL),
                st.floats(0, 3, allow_nan=False).map(lambda g: round(g, 2)),
                min_size=1,
                max_size=6,
            ),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_sql_float_grades_equal_the_formula(cases: list) -> None:
    records = [trace(f"t{i}", retrieved, scores) for i, (retrieved, scores) in enumerate(cases)]
    ours = evaluate(pd.DataFrame(records), "ndcg@10,recall@10", gain="linear").set_index("trace_id")
    for r in records:
        ranked = list(dict.fromkeys(r["retrieved_ids"]))[:10]
        grades = r["relevance_scores"]
        dcg = sum(grades.get(d, 0) / log2(i + 2) for i, d in enumerate(ranked))
        best = sorted(grades.values(), reverse=True)[:10]
        ideal = sum(g / log2(i + 2) for i, g in enumerate(best))
        assert ours.loc[r["trace_id"], "ndcg@10"] == pytest.approx(
            dcg / ideal if ideal > 0 else 0.0, abs=1e-9
        )
        relevant = {d for d, g in grades.items() if g >= 1}
        hits = len(relevant & set(ranked))
        assert ours.loc[r["trace_id"], "recall@10"] == pytest.approx(
            hits / len(relevant) if relevant else 0.0, abs=1e-9
        )


ALL_FAMILIES = "ndcg@3,ndcg@10,precision@1,precision@5,recall@5,recall@20,mrr,mrr@3,map,map@5"
ALL_FAMILIES += ",hit_rate@1,hit_rate@10"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(DOC_POOL), max_size=15),
            st.dictionaries(
                st.sampled_from(DOC_POOL),
                st.one_of(st.integers(0, 3), st.sampled_from([0.5, 1.5, 2.25])),
                max_size=8,
            ),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["exponential", "linear"]),
    st.sampled_from([1, 2]),
)
def test_sql_equals_the_python_reference(cases: list, gain: Gain, relevance_level: int) -> None:
    records = [trace(f"t{i}", retrieved, scores) for i, (retrieved, scores) in enumerate(cases)]
    metrics = parse_metrics(ALL_FAMILIES)
    ours = evaluate(pd.DataFrame(records), metrics, gain=gain, relevance_level=relevance_level)
    by_id = ours.set_index("trace_id")
    for r in records:
        expected = score_trace(
            list(dict.fromkeys(r["retrieved_ids"])),
            {d: float(g) for d, g in r["relevance_scores"].items()},
            metrics,
            gain,
            relevance_level,
        )
        # an empty relevance_scores object is a judgement with nothing relevant: zeros
        expected = expected or dict.fromkeys((m.name for m in metrics), 0.0)
        for name, value in expected.items():
            assert by_id.loc[r["trace_id"], name] == pytest.approx(value, abs=1e-9), (name, r)
