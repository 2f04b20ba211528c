"""Reports that agree and explain themselves (issue 34, item 6): the comparison names the day's
own threshold misses, read from the table the regression report reads; each report states its
window and its test; adjusted and unadjusted numbers are labelled where they stand."""

from __future__ import annotations

import dataclasses
import html
import json
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd

from retrieval_pipeline.ab.day import DayComparison
from retrieval_pipeline.reports.comparison import (
    cells_markdown,
    comparison_html,
    comparison_markdown,
    holm_notes,
    write_reports,
)
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.warehouse.ab_window import read_day_misses
from tests.reports.test_html_report import comparison
from tests.reports.test_report import CONFIG

DAY = date(2026, 11, 30)


def _store_with_a_miss(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """`segment_metrics` of the day and the day before: on the day multi_hop / candidate's
    ndcg@10 is 0.408 against 0.650 (a miss), every other row passes; the day before misses too,
    but it is not the day."""
    conn = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    day_rows = pd.DataFrame(
        {
            "partition_date": [DAY, DAY, DAY, date(2026, 11, 29)],
            "segment": ["multi_hop", "multi_hop", "faq", "faq"],
            "variant": ["candidate", "control", "candidate", "candidate"],
            "metric": ["ndcg@10"] * 4,
            "n": [40, 40, 40, 40],
            "mean": [0.408, 0.700, 0.800, 0.100],
            "threshold": [0.650] * 4,
            "status": ["fail", "pass", "pass", "fail"],
        }
    )
    conn.register("day_rows", day_rows)
    conn.execute("create table segment_metrics as select * from day_rows")
    return conn


def test_the_comparison_names_the_days_regression_misses(tmp_path: Path) -> None:
    conn = _store_with_a_miss(tmp_path)
    misses = read_day_misses(conn, DAY)
    assert [(m.segment, m.variant, m.metric) for m in misses] == [
        ("multi_hop", "candidate", "ndcg@10")
    ]
    words = "multi_hop / candidate: ndcg@10 = 0.408, 0.242 below the threshold 0.650"  # .65-.408
    assert misses[0].words() == words
    result = DayComparison(
        day=DAY,
        window_start=date(2026, 11, 24),
        window_end=DAY,
        lookback_days=7,
        days_with_data=7,
        variants=("control", "candidate"),
        control="control",
        candidate="candidate",
        comparison=comparison(segment="multi_hop", control="control", candidate="candidate"),
        day_misses=misses,
    )
    (tmp_path / "reports").mkdir()
    html_path, md_path, json_path = write_reports(
        result,
        tmp_path / "reports",
        pd.DataFrame(
            {"partition_date": [], "segment": [], "variant": [], "metric": [], "mean": []}
        ),
        CONFIG,
    )
    heading = (
        "The regression report of 2026-11-30 (the day alone against its thresholds) has 1 "
        "threshold miss; this comparison pools the window 2026-11-24..2026-11-30, 7 of 7 day(s) "
        "with data, so its means can pass where the day's do not"
    )
    markdown = md_path.read_text(encoding="utf-8")
    assert f"**{heading}:**\n- {words}" in markdown
    # the headline: the window of days, then the test and its adjustment
    assert (
        "**Window: partition 2026-11-30 compares the traces of the window "
        "2026-11-24..2026-11-30, 7 of 7 day(s) with data, pooled;" in markdown
    )
    assert "Holm-adjusted for the" in markdown and "not adjusted.**" in markdown
    page = html_path.read_text(encoding="utf-8")
    assert (
        f'<div class="watch"><strong>{html.escape(heading)}:</strong><ul><li>{words}</li></ul>'
        in page
    )
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert [m["words"] for m in data["regression_misses"]] == [words]
    assert data["regression_misses"][0]["margin"] == (0.408 - 0.650)
    assert data["words"].endswith(
        f"; the day alone: 1 threshold miss in the regression report ({words})"
    )


def test_no_segment_metrics_means_no_misses(tmp_path: Path) -> None:
    conn = duckdb.connect(str(tmp_path / "empty.duckdb"))
    assert read_day_misses(conn, DAY) == ()


def test_adjusted_and_unadjusted_numbers_are_labelled() -> None:
    result = comparison(segment="multi_hop", control="control", candidate="candidate")
    first = result.cells[0]
    # an interval wholly below 0 beside a Holm-adjusted p above alpha
    odd = dataclasses.replace(
        first,
        ci_low=-0.30,
        ci_high=-0.10,
        p_randomization=0.20,
        p_randomization_holm=0.40,
        verdict="no significant difference",
    )
    changed = dataclasses.replace(result, cells=(odd, *result.cells[1:]))
    tested = len(changed.cells)
    markdown = comparison_markdown(changed)
    assert "| 95% CI (unadjusted) | verdict | p (Holm-adjusted) |" in markdown
    assert "| no significant difference \\* |" in markdown or (
        "| no significant difference * |" in markdown
    )
    footnote = (
        f"\\* Only the Holm-adjusted p (over {tested} cells) decides the verdict; the 95% CI is "
        "unadjusted, for its cell alone, so it may exclude 0 while the adjusted p stays above "
        "0.05 (no significant difference)."
    )
    assert footnote in markdown
    note = (
        f"{segment_label(odd.segment)} / {odd.metric}: the 95% interval -0.300 .. -0.100 "
        "excludes 0, but it is unadjusted (this cell alone); adjusted (Holm) for the "
        f"{tested} segment x metric cells tested together the randomization p is 0.4000, "
        "above 0.05, so the verdict is no significant difference."
    )
    assert note in holm_notes(changed)
    assert "95% CI (unadjusted)" in comparison_html(changed)
    assert "| 95% CI (unadjusted) | p (Holm-adjusted) | verdict |" in cells_markdown(changed)
    settings = changed.to_dict()["settings"]
    assert settings["holm_adjusted"] == ["p_randomization_holm", "p_t_holm"]
    assert settings["unadjusted"] == ["ci_low", "ci_high", "p_randomization", "p_t"]
