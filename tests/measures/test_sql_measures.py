"""The batch SQL's measures for incomplete judgments against the per-trace Python scorer and
trec_eval (pytrec_eval), per trace, on random traces with grade-0 labels, repeated ids and
unjudged documents, on full and condensed lists; through the warehouse's own steps (ingestion,
`build_labels`, `compute_query_metrics`), as `evaluate` and the nightly run them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_pipeline.metrics import Gain, Metric, parse_metrics, with_residuals
from retrieval_pipeline.reference import score_trace
from retrieval_pipeline.warehouse.connection import close_scratch, connect
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.partitions import ALL_DATES
from retrieval_pipeline.warehouse.steps import build_labels, compute_query_metrics
from tests.measures.trec_oracle import trec_eval_scores

TS = "2026-11-30T12:00:00Z"


def sql_scores(
    records: list[dict[str, object]],
    metrics: Sequence[Metric],
    gain: Gain = "exponential",
    relevance_level: float = 1.0,
    gmax: float = 3.0,
    judged_only: bool = False,
) -> dict[str, dict[str, float | None]]:
    """trace_id -> metric name -> value (None: unannotated), from the SQL statement."""
    with tempfile.TemporaryDirectory(prefix="measures-") as folder:
        conn = connect(Path(folder) / "w.duckdb", {"memory_limit": "512MB"}, scratch=True)
        try:
            ingest_traces(conn, pd.DataFrame(records), keep_retrieved_ids=False)
            start, end = ALL_DATES
            build_labels(conn, start, end, use_corpus=False)
            compute_query_metrics(
                conn,
                metrics,
                start,
                end,
                gain,
                relevance_level,
                gmax=gmax,
                judged_only=judged_only,
            )
            rows = conn.execute("select trace_id, metric, value from query_metrics").fetchall()
        finally:
            close_scratch(conn)
    out: dict[str, dict[str, float | None]] = {}
    for trace_id, metric, value in rows:
        out.setdefault(trace_id, {})[metric] = value
    return out


def trace(trace_id: str, retrieved: list[str], scores: dict[str, float] | None) -> dict:
    record: dict[str, object] = {
        "trace_id": trace_id,
        "query_id": f"q-{trace_id}",
        "timestamp": TS,
        "retrieved_ids": retrieved,
    }
    if scores is not None:
        record["relevance_scores"] = scores
    return record


NEW = with_residuals(parse_metrics("judged@1,judged@5,rprec,bpref,rbp@0.8,rbp@0.5,err,err@3"))
OLD = parse_metrics("ndcg@3,precision@5,recall@5,mrr,mrr@3,map,map@5,hit_rate@3")


def test_hand_example_and_unannotated_trace() -> None:
    # d1=3 at 1, u unjudged at 2, d0=0 at 3, d2=2 at 4, v unjudged at 5; d9=1 not retrieved
    records = [
        trace("t", ["d1", "u", "d0", "d2", "v"], {"d1": 3, "d0": 0, "d2": 2, "d9": 1}),
        trace("never-judged", ["a"], None),
        trace("empty-judgement", ["a", "b"], {}),
    ]
    full = sql_scores(records, NEW)
    condensed = sql_scores(records, NEW, judged_only=True)
    got = full["t"]
    assert got["judged@5"] == pytest.approx(3 / 5)
    assert got["rprec"] == pytest.approx(1 / 3)
    assert got["bpref"] == pytest.approx((1 + (1 - 1 / 1)) / 3)
    assert got["rbp@0.8"] == pytest.approx((1 - 0.8) * (1 + 0.8**3 * 2 / 3))
    assert got["rbp@0.8_residual"] == pytest.approx((1 - 0.8) * (0.8**1 + 0.8**4) + 0.8**5)
    stop1, stop2 = (2**3 - 1) / 2**3, (2**2 - 1) / 2**3
    assert got["err"] == pytest.approx(stop1 + (1 - stop1) * stop2 / 4)
    assert got["err@3"] == pytest.approx(stop1)
    got = condensed["t"]  # d1, d0, d2
    assert got["judged@5"] == pytest.approx(3 / 5)
    assert got["rprec"] == pytest.approx(2 / 3)
    assert got["rbp@0.8_residual"] == pytest.approx(0.8**3)
    assert got["err@3"] == pytest.approx(stop1 + (1 - stop1) * stop2 / 3)
    assert set(full["never-judged"].values()) == {None}
    zeros = {m.name: 0.0 for m in NEW} | {"rbp@0.8_residual": 1.0, "rbp@0.5_residual": 1.0}
    assert full["empty-judgement"] == pytest.approx(zeros)


DOC_POOL = [f"d{i}" for i in range(12)]
integer_cases = st.lists(
    st.tuples(
        st.lists(st.sampled_from(DOC_POOL), max_size=15),  # may repeat ids
        st.dictionaries(st.sampled_from(DOC_POOL), st.integers(0, 3), max_size=9),
    ),
    min_size=1,
    max_size=8,
)
TREC_NAMES = ["rprec", "bpref", "precision@3", "ndcg@5", "map", "mrr"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(integer_cases, st.sampled_from([1, 2]), st.booleans())
def test_sql_rprec_and_bpref_equal_trec_eval(
    cases: list[tuple[list[str], dict[str, int]]], relevance_level: int, judged_only: bool
) -> None:
    records = [trace(f"t{i}", ranked, dict(labels)) for i, (ranked, labels) in enumerate(cases)]
    ours = sql_scores(
        records,
        parse_metrics(TREC_NAMES),
        gain="linear",  # trec_eval's nDCG gain
        relevance_level=relevance_level,
        judged_only=judged_only,
    )
    oracle = trec_eval_scores(
        {f"t{i}": case for i, case in enumerate(cases)}, TREC_NAMES, relevance_level, judged_only
    )
    for trace_id, expected in oracle.items():
        for name, value in expected.items():
            assert ours[trace_id][name] == pytest.approx(value, abs=1e-9), (trace_id, name, cases)


mixed_cases = st.lists(
    st.tuples(
        st.lists(st.sampled_from(DOC_POOL), max_size=15),
        st.dictionaries(
            st.sampled_from(DOC_POOL),
            st.one_of(st.integers(0, 4), st.sampled_from([0.5, 1.5, 2.25, 3.75])),
            max_size=9,
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mixed_cases,
    st.sampled_from(["exponential", "linear"]),
    st.sampled_from([1, 2]),
    st.sampled_from([3.0, 1.0, 2.5]),
    st.booleans(),
)
def test_sql_equals_the_python_scorer(
    cases: list[tuple[list[str], dict[str, float]]],
    gain: Gain,
    relevance_level: int,
    gmax: float,
    judged_only: bool,
) -> None:
    metrics = (*OLD, *NEW)
    records = [trace(f"t{i}", ranked, dict(labels)) for i, (ranked, labels) in enumerate(cases)]
    ours = sql_scores(records, metrics, gain, relevance_level, gmax, judged_only)
    for i, (ranked, labels) in enumerate(cases):
        expected = score_trace(
            ranked,
            {doc: float(grade) for doc, grade in labels.items()},
            metrics,
            gain,
            relevance_level,
            gmax=gmax,
            judged_only=judged_only,
            judged=True,  # every trace here carries relevance_scores, perhaps empty
        )
        assert expected is not None
        for name, value in expected.items():
            assert ours[f"t{i}"][name] == pytest.approx(value, abs=1e-9), (name, ranked, labels)
