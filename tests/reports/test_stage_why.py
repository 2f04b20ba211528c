"""The reranker findings a day's stage rows hold, and a Why without baseline spans
(`reports.stage_why`, docs/why.md "The reranker's stages"), on rows written out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from retrieval_pipeline.reports.stage_why import (
    EVERY_VARIANT,
    explain_stages,
    stage_drops,
    stage_findings,
)


def test_findings_are_the_output_floors_and_gains_the_check_fails() -> None:
    means = pd.DataFrame(
        [
            # stage, segment, variant, metric, mean
            ("reranker", "faq", "a", "ndcg@10", 0.4),  # below 0.5: a finding
            ("reranker", "faq", "b", "ndcg@10", 0.6),  # passes
            ("reranker_input", "faq", "a", "ndcg@10", 0.1),  # the input: no stage split
            ("reranker", "faq", "c", "ndcg@10", math.nan),  # no number to explain
        ],
        columns=["stage", "segment", "variant", "metric", "mean"],
    )
    gains = pd.DataFrame(
        [("faq", "ndcg@10", -0.2), ("faq", "mrr", 0.1)], columns=["segment", "metric", "gain"]
    )
    floors = {"reranker": {"ndcg@10": 0.5}, "reranker_input": {"ndcg@10": 0.5}}
    found = stage_findings(means, gains, floors, {"ndcg@10": -0.1, "mrr": 0.0})
    assert found == [
        ("faq", "a", "ndcg@10", "floor"),
        ("faq", EVERY_VARIANT, "ndcg@10", "gain"),
    ]


def test_without_baseline_spans_the_demoted_queries_are_still_named() -> None:
    # two queries on the day only (new): q1 lost 0.5 on one span of three, q2 gained
    rows = pd.DataFrame(
        {
            "segment": "faq",
            "variant": EVERY_VARIANT,
            "metric": "ndcg@10",
            "query_id": ["q1", "q2"],
            "day_spans": [1, 2],
            "day_input": [1.0, 0.5],
            "day_output": [0.5, 1.0],
            "base_spans": [0, 0],
            "base_input": [math.nan, math.nan],
            "base_output": [math.nan, math.nan],
            "base_value": [math.nan, math.nan],
            "day_share": [1 / 3, 2 / 3],
            "first_stage": [0.0, 0.0],
            "reranking": [0.0, 0.0],
            "mix": [0.0, 0.0],
            "new_part": [math.nan, math.nan],
        }
    )
    (why,) = explain_stages([("faq", EVERY_VARIANT, "ndcg@10", "gain")], rows)
    assert why.causes == () and why.change is None and why.contributors == ()
    assert [q.query_id for q in why.demoted] == ["q1"] and why.demoted_queries == 1
    assert why.day_output == pytest.approx((0.5 + 2 * 1.0) / 3)
    assert why.day_input == pytest.approx((1.0 + 2 * 0.5) / 3)
    assert "no baseline spans" in why.lines()[0]
    assert why.lines()[1].startswith("The reranker demoted relevant documents in 1 query")


def test_a_drop_is_the_day_s_whole_interval_below_the_baseline() -> None:
    levels = pd.DataFrame(
        [
            # segment, variant, metric, day_n, day_mean, day_sd, base_mean
            ("faq", "a", "ndcg@10", 40, 0.5, 0.5, 0.9),  # far below, many spans: a drop
            ("faq", "b", "ndcg@10", 2, 0.8, 0.28, 0.9),  # two spans: the interval reaches 0.9
            ("faq", "c", "ndcg@10", 40, 0.5, 0.5, 0.9),  # a floor finding already
            ("faq", "d", "ndcg@10", 40, 0.5, 0.5, math.nan),  # no baseline
        ],
        columns=["segment", "variant", "metric", "day_n", "day_mean", "day_sd", "base_mean"],
    )
    # 40 values of mean 0.5 and sd 0.5: Wilson's upper bound on 40 / phi traces is below 0.7
    found = stage_drops(levels, [("faq", "c", "ndcg@10", "floor")])
    assert found == [("faq", "a", "ndcg@10", "drop")]
