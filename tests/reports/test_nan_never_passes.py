"""A NaN or missing mean never passes a threshold in the report, the check verdict or the gate
that reads it: it is a miss, in words (issue 27). The warehouse's statuses already fail a NaN mean
(tests/warehouse/test_nan_means.py); these rows are what a warehouse written before that may still
hold (`pass` beside a NaN mean), and what it writes now (`fail` beside a NaN mean)."""

from __future__ import annotations

import json
import math
from datetime import date
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.gate import threshold_verdict
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import finite

DAY = date(2026, 11, 30)
NAN = float("nan")


def row(mean: float | None, status: str, segment: str = "multi_hop") -> dict[str, object]:
    value = NAN if mean is None else mean
    return {
        "partition_date": pd.Timestamp(DAY),
        "segment": segment,
        "variant": "candidate",
        "metric": "ndcg@10",
        "traces": 50,
        "annotated_traces": 40,
        "coverage": 40 / 50,
        "n": 0 if mean is None else 40,
        "mean": mean,
        "ci_low": NAN,
        "ci_high": NAN,
        "baseline": 0.85,
        "threshold": 0.65,
        "min_annotated": 20,
        "status": status,
        "margin": value - 0.65,
        "delta": value - 0.85,
        "baseline_n": 280,
        "baseline_days": 7,
    }


NOT_A_NUMBER = "multi_hop / candidate: ndcg@10 is not a number (NaN), threshold 0.650"
NO_MEAN = "multi_hop / candidate: ndcg@10 has no mean, threshold 0.650"


@pytest.mark.parametrize("status", ["pass", "fail"])
def test_a_nan_mean_fails_the_threshold_check_in_words(status: str) -> None:
    rows = pd.DataFrame([row(NAN, status), row(0.9, "pass", OVERALL_SEGMENT)])
    verdict = threshold_verdict(rows, DAY, DAY)
    assert not verdict.passed
    assert NOT_A_NUMBER in verdict.description
    assert verdict.metadata["misses"] == 1


def test_a_missing_mean_marked_pass_fails_the_threshold_check() -> None:
    verdict = threshold_verdict(pd.DataFrame([row(None, "pass")]), DAY, DAY)
    assert not verdict.passed
    assert NO_MEAN in verdict.description


@pytest.mark.parametrize("status", ["pass", "fail"])
def test_the_report_of_a_nan_mean_names_the_miss(status: str) -> None:
    report = build_report(pd.DataFrame([row(NAN, status)]), PipelineConfig(), DAY)
    data = json.loads(report.to_json())  # JSON has no NaN: the value is null, the words say why
    assert data["passed"] is False
    assert [m["words"] for m in data["misses"]] == [NOT_A_NUMBER]
    assert data["misses"][0]["value"] is None
    markdown = report.to_markdown()
    assert "No threshold misses" not in markdown
    assert "is not a number (NaN)" in markdown
    assert report.summary() == f"{DAY.isoformat()}: 1 threshold miss: {NOT_A_NUMBER}"


def test_a_finite_miss_reads_as_before() -> None:
    verdict = threshold_verdict(pd.DataFrame([row(0.449, "fail")]), DAY, DAY)
    assert not verdict.passed
    assert (
        "multi_hop / candidate: ndcg@10 = 0.449, 0.201 below the threshold 0.650"
        in verdict.description
    )


@pytest.mark.parametrize(
    ("value", "shown", "judged"),
    [
        (0.9, 0.9, 0.9),
        (1, 1.0, 1.0),
        (np.float64(0.5), 0.5, 0.5),
        ("0.9", 0.9, None),
        (np.int64(3), 3.0, None),
        (Decimal("0.5"), 0.5, None),
        (True, None, None),
        (None, None, None),
        (NAN, None, None),
        (-math.inf, None, None),
        (pd.NA, None, None),
        ("nan", None, None),
    ],
)
def test_finite_never_takes_a_missing_or_nan_value_and_numbers_only_takes_no_text(
    value: object, shown: float | None, judged: float | None
) -> None:
    # the one finite-number test: the gate and the reports judge with numbers_only
    assert finite(value) == shown
    assert finite(value, numbers_only=True) == judged
