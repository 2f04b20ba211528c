"""The nightly metrics file: every series and value, what is left out, promtool's lint, and the
file's rules (atomic, the newest day kept, the last success carried over a failed run)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from retrieval_pipeline.reports.prometheus import (
    FILE_NAME,
    METRICS_DIR_ENV,
    MetricsFileError,
    exposition,
    metrics_path,
    record_success,
    write_metrics_file,
)
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse.nightly import QualityCounts
from tests.prometheus_server import check_metrics

DAY = date(2026, 11, 30)
RUN_AT = datetime(2026, 12, 1, 2, 17, 5, tzinfo=UTC)
QUALITY = QualityCounts(
    records_read=110,
    valid_records=100,
    quarantined_records=10,
    labels=900,
    stale_labels=30,
    corpus_documents=5000,
    corpus_deleted=40,
)


def row(segment: str, variant: str, metric: str, **fields: Any) -> dict[str, Any]:
    """One row as sql/agg_segment_metrics.sql returns it."""
    base: dict[str, Any] = {
        "partition_date": DAY,
        "segment": segment,
        "variant": variant,
        "metric": metric,
        "traces": 100,
        "annotated_traces": 90,
        "n": 90,
        "mean": 0.7,
        "threshold": None,
        "min_annotated": 0,
        "coverage": 0.9,
        "ci_low": 0.6,
        "ci_high": 0.8,
        "status": "no_threshold",
        "margin": None,
    }
    return base | fields


ROWS = [
    row(OVERALL_SEGMENT, "control", "mrr", mean=0.75, ci_low=0.7, ci_high=0.79, threshold=0.7,
        status="pass", margin=0.05),
    row("multi_hop", "candidate", "mrr", traces=40, annotated_traces=30, n=30, mean=0.55,
        ci_low=0.45, ci_high=0.65, coverage=0.75, threshold=0.6, status="fail", margin=-0.05),
    row("multi_hop", "candidate", "ndcg@10", traces=40, annotated_traces=30, n=30, mean=0.61,
        coverage=0.75),
    row("code", "control", "mrr", traces=3, annotated_traces=0, n=0, mean=None, ci_low=None,
        ci_high=None, coverage=0.0, threshold=0.6, status="insufficient"),
]  # fmt: skip


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (f"retrieval_eval_{name}", tuple(sorted(labels.items())))


def test_every_series_and_value() -> None:
    got = samples(exposition(ROWS, QUALITY, RUN_AT, RUN_AT - timedelta(days=1)))
    midnight = (DAY - date(1970, 1, 1)).days * 86400
    assert got[key("partition_timestamp_seconds")] == midnight
    assert got[key("last_run_timestamp_seconds")] == RUN_AT.timestamp()
    assert got[key("last_success_timestamp_seconds")] == RUN_AT.timestamp() - 86400
    failing = {"segment": "multi_hop", "variant": "candidate", "metric": "mrr"}
    assert got[key("metric_mean_ratio", **failing)] == 0.55
    assert got[key("metric_ci_lower_ratio", **failing)] == 0.45
    assert got[key("metric_ci_upper_ratio", **failing)] == 0.65
    assert got[key("metric_threshold_ratio", **failing)] == 0.6
    assert got[key("metric_scored_traces", **failing)] == 30
    assert {
        state: got[key("metric_status", **failing, status=state)]
        for state in ("pass", "fail", "insufficient", "no_threshold")
    } == {"pass": 0, "fail": 1, "insufficient": 0, "no_threshold": 0}
    group = {"segment": "multi_hop", "variant": "candidate"}
    assert got[key("traces", **group)] == 40
    assert got[key("annotated_traces", **group)] == 30
    assert got[key("annotation_coverage_ratio", **group)] == 0.75
    assert got[key("records_read")] == 110
    assert got[key("quarantined_records")] == 10
    assert got[key("quarantine_ratio")] == pytest.approx(10 / 110)
    assert got[key("labels")] == 900
    assert got[key("stale_labels")] == 30
    assert got[key("stale_label_ratio")] == pytest.approx(30 / 900)
    overall = {"segment": OVERALL_SEGMENT, "variant": "control", "metric": "mrr"}
    assert got[key("metric_mean_ratio", **overall)] == 0.75


def test_missing_values_are_left_out_not_written_as_nan() -> None:
    text = exposition(ROWS, QUALITY, RUN_AT, None)
    got = samples(text)
    assert not any(math.isnan(value) for value in got.values())
    empty = {"segment": "code", "variant": "control", "metric": "mrr"}
    for name in ("metric_mean_ratio", "metric_ci_lower_ratio", "metric_ci_upper_ratio"):
        assert key(name, **empty) not in got
    assert got[key("metric_scored_traces", **empty)] == 0
    assert got[key("metric_status", **empty, status="insufficient")] == 1
    no_threshold = {"segment": "multi_hop", "variant": "candidate", "metric": "ndcg@10"}
    assert key("metric_threshold_ratio", **no_threshold) not in got
    assert key("last_success_timestamp_seconds") not in got  # no run has succeeded
    assert "judged" not in text  # the rows carry no judged share
    nothing_read = samples(exposition(ROWS, QualityCounts(0, 0, 0, 0, 0, 0, 0), RUN_AT, None))
    assert key("records_read") in nothing_read
    assert key("quarantine_ratio") not in nothing_read
    assert key("stale_label_ratio") not in nothing_read


def test_judged_share_when_the_rows_carry_it() -> None:
    rows = [r | {"judged_share": 0.4 if r["segment"] == "multi_hop" else 0.8} for r in ROWS]
    got = samples(exposition(rows, QUALITY, RUN_AT, None))
    assert got[key("judged_ratio", segment="multi_hop", variant="candidate")] == 0.4
    assert got[key("judged_ratio", segment=OVERALL_SEGMENT, variant="control")] == 0.8


def test_labels_are_segment_variant_metric_and_status_only() -> None:
    names = {
        label
        for family in text_string_to_metric_families(exposition(ROWS, QUALITY, RUN_AT, RUN_AT))
        for sample in family.samples
        for label in sample.labels
    }
    assert names == {"segment", "variant", "metric", "status"}


def test_promtool_accepts_the_file(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    rows = [r | {"judged_share": 0.5} for r in ROWS]
    assert write_metrics_file(path, rows, QUALITY, RUN_AT, succeeded=True).written
    check_metrics(path.read_text(encoding="utf-8"))


def test_a_failed_run_keeps_the_last_success(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    assert write_metrics_file(path, ROWS, QUALITY, RUN_AT, succeeded=True).written
    later = RUN_AT + timedelta(days=1)
    next_day = [r | {"partition_date": DAY + timedelta(days=1)} for r in ROWS]
    assert write_metrics_file(path, next_day, QUALITY, later, succeeded=False).written
    got = samples(path.read_text(encoding="utf-8"))
    assert got[key("last_run_timestamp_seconds")] == later.timestamp()
    assert got[key("last_success_timestamp_seconds")] == RUN_AT.timestamp()
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no partial file left


def test_a_failed_first_run_has_no_last_success(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    assert write_metrics_file(path, ROWS, QUALITY, RUN_AT, succeeded=False).written
    assert key("last_success_timestamp_seconds") not in samples(path.read_text(encoding="utf-8"))


def test_an_older_day_leaves_a_newer_file_alone(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    write_metrics_file(path, ROWS, QUALITY, RUN_AT, succeeded=True)
    before = path.read_text(encoding="utf-8")
    older = [r | {"partition_date": "2026-11-20", "mean": 0.1} for r in ROWS]
    outcome = write_metrics_file(path, older, QUALITY, RUN_AT + timedelta(hours=1), True)
    assert not outcome.written
    assert outcome.reason == "kept: it holds 2026-11-30, later than 2026-11-20"
    assert path.read_text(encoding="utf-8") == before
    # The same day again (a rerun) replaces it.
    rerun = [r | {"mean": 0.5} if r["mean"] is not None else r for r in ROWS]
    assert write_metrics_file(path, rerun, QUALITY, RUN_AT + timedelta(hours=2), True).written
    assert path.read_text(encoding="utf-8") != before


def test_metrics_path_from_the_environment(tmp_path: Path) -> None:
    assert metrics_path({}) is None
    assert metrics_path({METRICS_DIR_ENV: " "}) is None
    assert metrics_path({METRICS_DIR_ENV: str(tmp_path)}) == tmp_path / FILE_NAME
    missing = tmp_path / "absent"
    with pytest.raises(MetricsFileError, match=f"^{METRICS_DIR_ENV}={missing}: not an existing"):
        metrics_path({METRICS_DIR_ENV: str(missing)})


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"segment": "a"}], "segment-metric row 0: missing partition_date, variant, metric"),
        ([row("a", "b", "mrr", status="ok")], r"row 0 \(a, b, mrr\): status 'ok' is not one of"),
        (
            [row("a", "b", "mrr"), row("a", "b", "map", partition_date="2026-12-01")],
            "describes one day; the rows hold: 2026-11-30, 2026-12-01",
        ),
        ([], "the rows hold: none"),
        (
            [row("a", "b", "mrr"), row("a", "b", "mrr")],
            r"row 1 \(a, b, mrr\): the same series as row 0",
        ),
        ([row("a", "b", "mrr", partition_date="yesterday")], "partition_date 'yesterday'"),
    ],
)
def test_bad_rows_are_named(rows: list[Mapping[str, Any]], message: str) -> None:
    with pytest.raises(MetricsFileError, match=message):
        exposition(rows, QUALITY, RUN_AT, None)


def test_times_must_carry_a_zone() -> None:
    with pytest.raises(MetricsFileError, match="must carry a time zone"):
        exposition(ROWS, QUALITY, datetime(2026, 12, 1, 2, 0), None)


def test_the_gate_records_the_day_s_success(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    assert not record_success(path, DAY, RUN_AT).written  # no file yet
    write_metrics_file(path, ROWS, QUALITY, RUN_AT, succeeded=False)
    before = samples(path.read_text(encoding="utf-8"))
    approved = RUN_AT + timedelta(minutes=3)
    other = record_success(path, DAY - timedelta(days=1), approved)
    assert (other.written, other.reason) == (False, "kept: it holds 2026-11-30, not 2026-11-29")
    assert record_success(path, DAY, approved).written
    after = samples(path.read_text(encoding="utf-8"))
    assert after.pop(key("last_success_timestamp_seconds")) == approved.timestamp()
    assert after == before  # every other series as it was
    recorded = path.read_text(encoding="utf-8")
    again = approved + timedelta(hours=1)
    assert record_success(path, DAY, again).written  # replaced, not repeated
    assert samples(path.read_text(encoding="utf-8"))[key("last_success_timestamp_seconds")] == (
        again.timestamp()
    )
    check_metrics(recorded)  # last: a skip without promtool comes after every other check


def test_the_reranker_stage_series() -> None:
    means = [
        {"stage": s, "segment": OVERALL_SEGMENT, "variant": "control", "metric": "mrr", "mean": m}
        for s, m in (("reranker_input", 0.5), ("reranker", 0.625))
    ]
    means.append(means[0] | {"segment": "faq", "mean": math.nan})  # missing: left out
    gains = [
        {
            "segment": OVERALL_SEGMENT,
            "metric": "mrr",
            "gain": 0.625 - 0.5,
            "ci_low": 0.0625,
            "ci_high": 0.1875,
            "pairs": 8,
        }
    ]
    got = samples(exposition(ROWS, QUALITY, RUN_AT, None, (means, gains)))
    cell = {"segment": OVERALL_SEGMENT, "metric": "mrr"}
    assert got[key("reranker_stage")] == 1.0
    assert got[key("stage_metric_mean_ratio", stage="reranker", variant="control", **cell)] == 0.625
    assert got[key("reranker_gain", **cell)] == 0.625 - 0.5
    assert got[key("reranker_gain_ci_lower", **cell)] == 0.0625
    assert got[key("reranker_gain_ci_upper", **cell)] == 0.1875
    assert got[key("reranker_gain_pairs", **cell)] == 8
    assert not [
        labels for name, labels in got if "stage_metric" in name and ("segment", "faq") in labels
    ]
    none = samples(exposition(ROWS, QUALITY, RUN_AT, None, ([], [])))
    assert none[key("reranker_stage")] == 0.0
    assert not [name for name, _ in none if "gain" in name or "stage_metric" in name]
    assert key("reranker_stage") not in samples(exposition(ROWS, QUALITY, RUN_AT, None))
