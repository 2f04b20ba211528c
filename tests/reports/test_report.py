"""The regression report, the check verdicts and the gate's decision, from hand-made tables."""

from __future__ import annotations

import json
import math
from datetime import date

import pandas as pd
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.gate import (
    CheckOutcome,
    Miss,
    approval_record,
    coverage_verdict,
    gate_refusals,
    misses_of,
    rate_verdict,
    threshold_verdict,
)
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import escape_markdown

DAY = date(2026, 11, 30)
NAN = float("nan")
CONFIG = PipelineConfig()


def row(
    segment: str,
    variant: str,
    metric: str,
    mean: float,
    threshold: float | None,
    status: str,
    *,
    day: date = DAY,
    traces: int = 50,
    annotated: int = 40,
    baseline: float = NAN,
) -> dict[str, object]:
    return {
        "partition_date": pd.Timestamp(day),
        "segment": segment,
        "variant": variant,
        "metric": metric,
        "traces": traces,
        "annotated_traces": annotated,
        "coverage": annotated / traces,
        "n": annotated,
        "mean": mean,
        "ci_low": mean - 0.05,
        "ci_high": mean + 0.05,
        "baseline": baseline,
        "threshold": NAN if threshold is None else threshold,
        "min_annotated": 20,
        "status": status,
        "margin": NAN if threshold is None else mean - threshold,
        "delta": mean - baseline,
        "baseline_n": 0 if math.isnan(baseline) else 280,
        "baseline_days": 0 if math.isnan(baseline) else 7,
    }


@pytest.fixture
def rows() -> pd.DataFrame:
    return pd.DataFrame(
        [
            row(OVERALL_SEGMENT, "candidate", "ndcg@10", 0.81, 0.65, "pass", baseline=0.84),
            row("multi_hop", "candidate", "ndcg@10", 0.642, 0.7, "fail", baseline=0.85),
            row("multi_hop", "candidate", "mrr", 0.95, 0.65, "pass", baseline=0.95),
            row("factual", "control", "precision@5", 0.3, None, "no_threshold"),
            row("long_tail", "control", "ndcg@10", 0.5, 0.65, "insufficient", annotated=12),
            row("code|x", "control", "mrr", 0.6, 0.65, "fail"),
        ]
    )


def test_a_miss_in_words() -> None:
    miss = Miss("multi_hop", "candidate", "ndcg@10", 0.642, 0.700)
    assert miss.words() == "multi_hop / candidate: ndcg@10 = 0.642, 0.058 below the threshold 0.700"
    assert miss.margin == pytest.approx(0.642 - 0.700)


def test_the_overall_row_reads_all_segments() -> None:
    miss = Miss(OVERALL_SEGMENT, "control", "mrr", 0.5, 0.65, partition=DAY)
    assert miss.words(with_day=True) == (
        "2026-11-30 all segments / control: mrr = 0.500, 0.150 below the threshold 0.650"
    )


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("multi_hop", "multi_hop"),
        ("a|b", "a\\|b"),
        ("<script>", "&lt;script&gt;"),
        ("`code`", "\\`code\\`"),
        ("two\nlines\r\nthree\rfour", "two lines three four"),
        ("a & b", "a &amp; b"),
        ("back\\slash|", "back\\\\slash\\|"),
    ],
)
def test_escape_markdown(raw: str, safe: str) -> None:
    assert escape_markdown(raw) == safe


def test_misses_are_the_failing_rows_in_order(rows: pd.DataFrame) -> None:
    assert [m.words() for m in misses_of(rows)] == [
        "code|x / control: mrr = 0.600, 0.050 below the threshold 0.650",
        "multi_hop / candidate: ndcg@10 = 0.642, 0.058 below the threshold 0.700",
    ]


def test_report_markdown(rows: pd.DataFrame) -> None:
    report = build_report(rows, CONFIG, DAY)
    text = report.to_markdown()
    assert text.startswith("# Retrieval regression report: 2026-11-30\n")
    # the headline: the window (the day alone, beside its baseline) and the test
    minimums = sorted(set(rows["min_annotated"]))
    assert len(minimums) == 1
    assert text.split("\n\n")[1] == (
        "Window: the day 2026-11-30 alone, beside its baseline, the trailing 7 days "
        "(2026-11-23..2026-11-29), 7 day(s) with data. Test: each segment's mean over the day's "
        "annotated traces against its threshold, a miss when below it (no verdict with fewer "
        f"than {minimums[0]} annotated traces); change from baseline = the day's mean - the "
        "baseline's, not a test (a mean whose 95% interval lies wholly below its baseline is "
        "listed under Watch)."
    )
    assert report.to_dict()["window_and_test"] == text.split("\n\n")[1]
    assert "| change from baseline | threshold | status | value - threshold |" in text
    assert "**2 threshold misses:**" in text
    assert "- multi_hop / candidate: ndcg@10 = 0.642, 0.058 below the threshold 0.700" in text
    assert "- code\\|x / control: mrr = 0.600, 0.050 below the threshold 0.650" in text
    assert "Not enough annotated traces for a verdict: long_tail / control (12 < 20)." in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(rows)  # header + one line per row
    assert all(line.count(" | ") == 10 for line in table)  # escaped pipes do not split cells
    multi_hop = next(line for line in table if line.startswith("| multi_hop | candidate | ndcg"))
    assert "| 0.642 | 0.592..0.692 | 0.850 | -0.208 | 0.700 | **fail** | -0.058 | 40 / 50 |" in (
        multi_hop
    )
    assert table[-1].startswith("| all segments | candidate | ndcg@10 | 0.810 |")


def test_report_escapes_hostile_segment_names() -> None:
    hostile = "<img src=x>|`rm`\nnext"
    rows = pd.DataFrame([row(hostile, "v\n2", "mrr", 0.1, 0.65, "fail")])
    text = build_report(rows, CONFIG, DAY).to_markdown()
    assert "<img" not in text and "`rm`" not in text
    assert (
        "&lt;img src=x&gt;\\|\\`rm\\` next / v 2: mrr = 0.100, 0.550 below the threshold 0.650"
        in text
    )


def test_report_json(rows: pd.DataFrame) -> None:
    report = build_report(rows, CONFIG, DAY)
    data = json.loads(report.to_json())
    assert data["partition"] == "2026-11-30"
    assert data["passed"] is False and data["has_data"] is True
    assert data["baseline"] == {
        "policy": "trailing_days",
        "start": "2026-11-23",
        "end": "2026-11-29",
        "days_with_data": 7,
    }
    assert [m["words"] for m in data["misses"]] == [m.words() for m in report.misses]
    assert data["misses"][1] | {"margin": None, "words": None} == {
        "segment": "multi_hop",
        "variant": "candidate",
        "metric": "ndcg@10",
        "value": 0.642,
        "threshold": 0.7,
        "margin": None,
        "words": None,
    }
    assert data["insufficient"] == [
        {"segment": "long_tail", "variant": "control", "annotated_traces": 12, "min_annotated": 20}
    ]
    untracked = next(r for r in data["rows"] if r["metric"] == "precision@5")
    assert untracked["threshold"] is None and untracked["margin"] is None  # NaN -> null
    assert untracked["partition_date"] == "2026-11-30"
    assert data["headline"] == {"ndcg@10 (candidate)": 0.81}


def test_headline_values_are_overall_rows_of_headline_metrics(rows: pd.DataFrame) -> None:
    assert build_report(rows, CONFIG, DAY).headline_values() == {"ndcg@10 (candidate)": 0.81}


def test_a_report_without_data() -> None:
    report = build_report(pd.DataFrame(), CONFIG, DAY)
    assert not report.has_data
    assert "No data" in report.to_markdown()
    assert report.summary() == "no data for 2026-11-30: no traces in this partition"
    assert json.loads(report.to_json())["passed"] is False


def test_summary_lists_the_misses(rows: pd.DataFrame) -> None:
    assert build_report(rows, CONFIG, DAY).summary() == (
        "2026-11-30: 2 threshold misses: code|x / control: mrr = 0.600, 0.050 below the "
        "threshold 0.650; "
        "multi_hop / candidate: ndcg@10 = 0.642, 0.058 below the threshold 0.700"
    )


def test_baseline_text_per_policy() -> None:
    for policy, expected in [
        ({"policy": "previous_day"}, "the previous day (2026-11-29)"),
        ({"policy": "pinned", "pinned_date": date(2026, 11, 1)}, "the pinned day 2026-11-01"),
        ({"trailing_days": 3}, "the trailing 3 days (2026-11-27..2026-11-29)"),
    ]:
        config = PipelineConfig.model_validate({"baseline": policy})
        assert build_report(pd.DataFrame(), config, DAY).baseline_text == expected


# --- check verdicts --------------------------------------------------------------------------


def test_threshold_verdict(rows: pd.DataFrame) -> None:
    verdict = threshold_verdict(rows, DAY, DAY)
    assert not verdict.passed
    assert verdict.description.splitlines() == [m.words() for m in misses_of(rows)]
    assert verdict.metadata["misses"] == 2
    assert verdict.metadata["insufficient"] == 1
    assert verdict.metadata["partition_start"] == verdict.metadata["partition_end"] == "2026-11-30"
    passing = threshold_verdict(rows[rows["status"] != "fail"], DAY, DAY)
    assert passing.passed
    assert "every segment and variant meets its thresholds for 2026-11-30" in passing.description


def test_threshold_verdict_fails_without_data() -> None:
    verdict = threshold_verdict(pd.DataFrame(), DAY, DAY)
    assert not verdict.passed and verdict.description.startswith("no data for 2026-11-30")


def test_threshold_verdict_names_days_missing_from_a_range(rows: pd.DataFrame) -> None:
    clean = rows[rows["status"] != "fail"]
    verdict = threshold_verdict(clean, date(2026, 11, 29), DAY)
    assert not verdict.passed
    assert verdict.description.startswith("no data for 2026-11-29")


def test_coverage_verdict() -> None:
    rows = pd.DataFrame(
        [
            row("factual", "control", "mrr", 0.9, 0.65, "pass", traces=50, annotated=40),
            row("factual", "control", "ndcg@10", 0.9, 0.65, "pass", traces=50, annotated=40),
            row("code", "candidate", "mrr", 0.9, 0.65, "pass", traces=57, annotated=12),
            row(OVERALL_SEGMENT, "candidate", "mrr", 0.9, 0.65, "pass", traces=57, annotated=1),
        ]
    )
    verdict = coverage_verdict(rows, 0.3, DAY, DAY)
    assert not verdict.passed
    assert verdict.description == (
        f"code / candidate: coverage {12 / 57:.3f} < 0.300 (12 of 57 traces annotated)"
    )
    assert verdict.metadata["below_minimum"] == 1
    assert verdict.metadata["lowest_coverage"] == pytest.approx(12 / 57)
    assert coverage_verdict(rows, 0.2, DAY, DAY).passed
    assert not coverage_verdict(pd.DataFrame(), 0.2, DAY, DAY).passed


def test_rate_verdict() -> None:
    ok = rate_verdict("quarantine rate", {DAY: (4, 800)}, 0.05, "records read", DAY, DAY)
    assert ok.passed
    assert ok.description == (
        "quarantine rate 0.50% (4 of 800 records read) <= limit 5.00% for 2026-11-30"
    )
    assert ok.metadata["rate"] == pytest.approx(4 / 800)
    high = rate_verdict("quarantine rate", {DAY: (90, 800)}, 0.05, "records read", DAY, DAY)
    assert not high.passed
    assert high.description == (
        "2026-11-30: quarantine rate 11.25% (90 of 800 records read) > limit 5.00%"
    )


def test_rate_verdict_fails_on_a_day_without_data() -> None:
    start = date(2026, 11, 29)
    verdict = rate_verdict("stale-label rate", {DAY: (1, 100)}, 0.1, "labels", start, DAY)
    assert not verdict.passed
    assert verdict.description == "no data for 2026-11-29: 0 labels"


# --- the deploy gate -------------------------------------------------------------------------


def outcome(name: str, passed: bool | None, start: str = "2026-11-30", end: str = "2026-11-30"):
    return CheckOutcome(name, passed, start, end, run_id="r1", description="why")


def test_gate_approves_when_every_check_passed_for_the_partition() -> None:
    outcomes = {n: outcome(n, True) for n in ("a", "b")}
    assert gate_refusals(["a", "b"], outcomes, DAY, DAY) == []


def test_gate_accepts_an_evaluation_covering_a_wider_range() -> None:
    outcomes = {"a": outcome("a", True, "2026-11-01", "2026-11-30")}
    assert gate_refusals(["a"], outcomes, DAY, DAY) == []


def test_gate_refusals_in_words() -> None:
    outcomes = {
        "failed": outcome("failed", False),
        "planned": outcome("planned", None),
        "other_day": outcome("other_day", True, "2026-11-29", "2026-11-29"),
    }
    reasons = gate_refusals(["failed", "planned", "other_day", "missing"], outcomes, DAY, DAY)
    assert reasons == [
        "failed failed in run r1: why",
        "planned: planned in run r1 but never evaluated",
        "other_day: the latest evaluation (run r1) covers 2026-11-29..2026-11-29, not "
        "2026-11-30; run the checks for 2026-11-30 first",
        "missing: no evaluation recorded; run the checks for 2026-11-30 first",
    ]


def test_approval_record() -> None:
    record = approval_record(DAY, [outcome("a", True)], "run-9", "2026-12-01T02:00:05+00:00")
    assert record["approved"] is True and record["partition"] == "2026-11-30"
    assert record["run_id"] == "run-9"
    assert record["checks"][0] | {"evaluated_at": None} == {
        "name": "a",
        "passed": True,
        "partition_start": "2026-11-30",
        "partition_end": "2026-11-30",
        "run_id": "r1",
        "evaluated_at": None,
        "description": "why",
    }
    json.dumps(record)
