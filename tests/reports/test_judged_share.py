"""List-level coverage in the reports: each variant's judged share of its top K beside the
annotation coverage, and the warning when one trails another by more than 10 points."""

from __future__ import annotations

import json
from datetime import date

import pandas as pd
import pytest

from retrieval_pipeline.ab.compare import ComparisonSettings, judged_shares
from retrieval_pipeline.ab.pairing import compare_variants, with_judged_shares
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.reports.comparison import comparison_json, comparison_markdown
from retrieval_pipeline.reports.judged import gap_warnings, segment_gap_warnings
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.reports.regression_html import regression_html
from retrieval_pipeline.segments import OVERALL_SEGMENT
from tests.reports.test_report import row

DAY = date(2026, 11, 30)


def test_a_gap_of_more_than_ten_points_is_named() -> None:
    (warning,) = gap_warnings({"control": 0.81, "candidate": 0.52}, "judged@10", "all segments")
    assert warning == (
        "all segments: candidate has 52% of its top 10 documents judged (judged@10), against 81% "
        "for control: its lower scores may be unjudged documents, counted as non-relevant, not "
        "worse ones"
    )
    # exactly ten points, an unknown share, a single variant: no warning
    assert gap_warnings({"control": 0.8, "candidate": 0.7}, "judged@10") == []
    assert gap_warnings({"control": 0.8, "candidate": None}, "judged@10") == []
    assert gap_warnings({"control": 0.8}, "judged@10") == []
    # against the best-judged variant, each trailing one named
    three = gap_warnings({"a": 0.9, "b": 0.75, "c": 0.85}, "judged@5", escape=str.upper)
    assert three == [
        "B has 75% of its top 5 documents judged (judged@5), against 90% for A: its lower scores "
        "may be unjudged documents, counted as non-relevant, not worse ones"
    ]


def judged_rows(shares: dict[tuple[str, str], float]) -> pd.DataFrame:
    rows = [row(s, v, "judged@10", share, None, "no_threshold") for (s, v), share in shares.items()]
    rows += [row(s, v, "ndcg@10", 0.7, 0.65, "pass") for (s, v) in shares]
    return pd.DataFrame(rows)


SHARES = {
    (OVERALL_SEGMENT, "control"): 0.8,
    (OVERALL_SEGMENT, "candidate"): 0.65,
    ("factual", "control"): 0.9,
    ("factual", "candidate"): 0.85,
    ("a|b", "control"): 0.7,
    ("a|b", "candidate"): 0.4,
}


def test_regression_report_shows_the_shares_and_warns() -> None:
    report = build_report(judged_rows(SHARES), PipelineConfig(), DAY)
    assert report.coverage_metric == "judged@10"
    assert report.judged_overall() == {"candidate": 0.65, "control": 0.8}
    markdown = report.to_markdown()
    assert "Judged share of the top 10 (judged@10, mean over annotated traces), every segment: " \
        "candidate 65%, control 80%." in markdown  # fmt: skip
    # overall first, then the segments; trace strings escaped in Markdown
    assert "- **Warning:** all segments: candidate has 65% of its top 10" in markdown
    assert "- **Warning:** a\\|b: candidate has 40%" in markdown
    assert "factual: candidate" not in markdown  # five points apart
    document = json.loads(report.to_json())
    assert document["judged"]["overall"] == {"candidate": 0.65, "control": 0.8}
    assert len(document["judged"]["warnings"]) == 2
    page = regression_html(report)
    assert "judged share of top (judged@10)" in page and "Judged share:" in page


def test_a_day_scored_before_the_coverage_metric_says_nothing() -> None:
    rows = pd.DataFrame([row(OVERALL_SEGMENT, "control", "ndcg@10", 0.7, 0.65, "pass")])
    report = build_report(rows, PipelineConfig(), DAY)
    assert report.judged_overall() == {} and "Judged share" not in report.to_markdown()
    assert segment_gap_warnings(rows, "judged@10") == []


def test_arm_shares_are_pooled_by_annotated_traces() -> None:
    groups = [
        ("s1", "A", 10, 0.5),  # day 1
        ("s1", "A", 30, 0.9),  # day 2
        ("s2", "A", 20, 0.6),
        ("s1", "B", 5, 0.2),
        ("s2", "B", 0, None),  # no annotated trace
        ("s1", "C", 50, 0.1),  # not an arm
    ]
    shares = judged_shares(groups, "A", "B")
    assert shares["s1"].control == pytest.approx((10 * 0.5 + 30 * 0.9) / 40)
    assert shares["s2"].candidate is None
    assert shares[OVERALL_SEGMENT].control == pytest.approx((10 * 0.5 + 30 * 0.9 + 20 * 0.6) / 60)
    assert shares[OVERALL_SEGMENT].candidate == pytest.approx(0.2)


def test_comparison_reports_show_the_shares_and_warn() -> None:
    per_query = pd.DataFrame(
        [
            {"query_id": f"q{i}", "segment": "s", "variant": arm, "ndcg@10": 0.5 + 0.01 * i}
            for i in range(6)
            for arm in ("A", "B")
        ]
    )
    judged = pd.Series([0.9 if arm == "A" else 0.5 for arm in per_query["variant"]])
    judged.iloc[0] = float("nan")  # an unannotated trace of A: not in its mean
    comparison = compare_variants(per_query, "A", "B", ComparisonSettings(n_resamples=99))
    comparison = with_judged_shares(comparison, per_query, judged, "judged@10")
    assert [(j.segment, j.control, j.candidate) for j in comparison.judged] == [
        ("s", pytest.approx(0.9), pytest.approx(0.5)),
        (OVERALL_SEGMENT, pytest.approx(0.9), pytest.approx(0.5)),
    ]
    markdown = comparison_markdown(comparison)
    assert "**Judged share:**" in markdown
    assert "- all segments: B has 50% of its top 10 documents judged" in markdown
    assert "| control judged@10 | candidate judged@10 |" in markdown
    document = json.loads(comparison_json(comparison))
    assert document["judged_metric"] == "judged@10"
    assert document["judged"][-1] == {
        "segment": OVERALL_SEGMENT,
        "control": pytest.approx(0.9),
        "candidate": pytest.approx(0.5),
    }
    assert len(document["judged_warnings"]) == 2  # the segment and all segments


def test_label_sources_are_named_with_their_shares() -> None:
    sources = (("candidate", "clicks", 30), ("candidate", "human", 10), ("control", "a|b", 5))
    report = build_report(judged_rows(SHARES), PipelineConfig(), DAY, sources)
    assert report.label_sources_text() == (
        "Label sources of the annotated traces: candidate: clicks 75% (30), human 25% (10); "
        "control: a|b 100% (5)."
    )
    assert "control: a\\|b 100% (5)." in report.to_markdown()
    document = json.loads(report.to_json())
    assert document["label_sources"][0] == {
        "variant": "candidate",
        "label_source": "clicks",
        "annotated_traces": 30,
        "share": 30 / 40,
    }
    assert "Label sources of the annotated traces" in regression_html(report)
