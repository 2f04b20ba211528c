"""The regression report's numbers for the Dagster Plots view (issue 34, item 8): the UI sorts
plots by label, so the labels put the misses and the headline metrics first, and each threshold
is a series named after its metric, sorted right beside it."""

from __future__ import annotations

import pandas as pd

from retrieval_pipeline.defs.nightly.history import plot_values, report_metadata
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.segments import OVERALL_SEGMENT
from tests.reports.test_report import CONFIG, DAY, NAN, row


def rows() -> pd.DataFrame:
    return pd.DataFrame(
        [
            row(OVERALL_SEGMENT, "control", "ndcg@10", 0.81, 0.7, "pass"),
            row(OVERALL_SEGMENT, "candidate", "ndcg@10", 0.75, 0.7, "pass"),
            row("aa_short", "candidate", "ndcg@10", 0.9, 0.7, "pass"),
            row("zz_multi_hop", "candidate", "ndcg@10", 0.41, 0.7, "fail"),
            row("zz_multi_hop", "candidate", "recall@100", 0.5, 0.6, "fail"),  # not a headline
            row("aa_short", "candidate", "recall@100", 0.9, 0.6, "pass"),  # neither: not plotted
            row("aa_short", "control", "ndcg@10", NAN, 0.7, "no_data"),
            row("aa_short", "candidate", "mrr", 0.6, None, "no_threshold"),
        ]
    )


def test_misses_and_headline_metrics_come_first_each_threshold_beside_its_metric() -> None:
    report = build_report(rows(), CONFIG, DAY)
    assert set(CONFIG.headline_metrics) >= {"ndcg@10", "mrr"}
    values = plot_values(report)
    assert values == {
        # overall rows first, in the rows' order of variant then metric
        "Overall ndcg@10 (candidate)": 0.75,
        "Overall ndcg@10 (candidate) threshold": 0.7,
        "Overall ndcg@10 (control)": 0.81,
        "Overall ndcg@10 (control) threshold": 0.7,
        # then the day's misses, a metric that is not a headline one included
        "Segment zz_multi_hop: ndcg@10 (candidate)": 0.41,
        "Segment zz_multi_hop: ndcg@10 (candidate) threshold": 0.7,
        "Segment zz_multi_hop: recall@100 (candidate)": 0.5,
        "Segment zz_multi_hop: recall@100 (candidate) threshold": 0.6,
        # then every other segment's headline metrics; no mean: its threshold alone
        "Segment aa_short: mrr (candidate)": 0.6,
        "Segment aa_short: ndcg@10 (candidate)": 0.9,
        "Segment aa_short: ndcg@10 (candidate) threshold": 0.7,
        "Segment aa_short: ndcg@10 (control) threshold": 0.7,
    }
    assert list(values) == [
        *list(values)[:8],
        "Segment aa_short: mrr (candidate)",
        "Segment aa_short: ndcg@10 (candidate)",
        "Segment aa_short: ndcg@10 (candidate) threshold",
        "Segment aa_short: ndcg@10 (control) threshold",
    ]
    metadata = report_metadata(report, "/reports/regression_report_2026-11-30")
    numeric = [k for k, v in metadata.items() if isinstance(v, int | float)]
    # what the UI shows, sorted by label: the count of misses, the overall means, each
    # threshold right after its mean, the segments, the watch list last
    shown = sorted(numeric)
    assert shown[0] == "Misses" and metadata["Misses"] == 2
    assert shown[1:5] == [
        "Overall ndcg@10 (candidate)",
        "Overall ndcg@10 (candidate) threshold",
        "Overall ndcg@10 (control)",
        "Overall ndcg@10 (control) threshold",
    ]
    assert shown[-1] == "Watch list"
    for label in numeric:
        if label.endswith(" threshold"):
            mean = label.removesuffix(" threshold")
            if mean in metadata:
                assert shown.index(label) == shown.index(mean) + 1, label
    # the order the UI caps at 100 labels: misses, overall and the day's misses first
    assert numeric[:10] == ["Misses", *list(values)[:8], "Segment aa_short: mrr (candidate)"]


def test_a_day_without_rows_plots_only_its_counts() -> None:
    report = build_report(pd.DataFrame(), CONFIG, DAY)
    assert plot_values(report) == {}
    metadata = report_metadata(report, "/r")
    assert (metadata["Misses"], metadata["Watch list"]) == (0, 0)
