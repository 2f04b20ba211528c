"""The SVG charts: ticks, the data-to-pixel mapping (checked against arithmetic by hand), escaped
text in well-formed XML, and what each report chart draws."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from retrieval_pipeline.reports.regression_html import (
    regression_bars_chart,
    regression_coverage_chart,
)
from retrieval_pipeline.reports.svg import Chart, Series, nice_ticks, padded_range, tick_label

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<b>x</b> & $y$"  # at most 18 characters: segment labels are cut there


def parse(chart: Chart) -> ET.Element:
    return ET.fromstring(chart.svg())


def texts(chart: Chart) -> list[str]:
    return ["".join(element.itertext()) for element in parse(chart).iter(f"{SVG}text")]


def test_nice_ticks_are_round_and_inside_the_range() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0.0, 1.05) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    # span 0.16 / 5 = 0.032 -> step 0.05, from -0.15 up to 0.0
    assert nice_ticks(-0.163, 0.0077) == [-0.15, -0.1, -0.05, 0.0]
    assert nice_ticks(0.0, 25.2) == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert nice_ticks(0.5, 0.5) == [0.5]
    assert [tick_label(v, [0.0, 0.05]) for v in (-0.15, 0.0)] == ["-0.15", "0.00"]
    assert tick_label(20.0, [0.0, 5.0]) == "20"


def test_padded_range() -> None:
    assert padded_range([0.2, 0.6]) == pytest.approx((0.18, 0.62))
    assert padded_range([0.5]) == pytest.approx((0.45, 0.55))  # flat: 0.05 each side
    assert padded_range([]) == (0.0, 1.0)


def test_bars_lines_and_rules_land_where_the_arithmetic_says() -> None:
    chart = Chart(400, 300)
    # 200 x 100 pixels at (100, 50) over x -0.5..1.5 and y 0..1.05
    panel = chart.panel(100, 50, 200, 100, (-0.5, 1.5), (0.0, 1.05))
    panel.bars([0.0, 1.0], [0.5, 1.05], 0.5, "#123456", "arm")
    panel.hline(0.6, 0.75, 1.25)
    panel.line([0.0, 1.0], [0.0, 1.05], "#654321", "trend")
    root = parse(chart)
    bars = [r.attrib for r in root.iter(f"{SVG}rect") if r.get("fill") == "#123456"]
    # x = 100 + (0 - 0.25 + 0.5) / 2 * 200 = 125; width 0.5 / 2 * 200 = 50;
    # height 0.5 / 1.05 * 100 = 47.62; top 50 + 100 - 47.62 = 102.38
    assert bars[0] == {
        "x": "125",
        "y": "102.38",
        "width": "50",
        "height": "47.62",
        "fill": "#123456",
    }
    assert (bars[1]["x"], bars[1]["y"], bars[1]["height"]) == ("225", "50", "100")
    (rule,) = [e.attrib for e in root.iter(f"{SVG}line") if e.get("stroke-dasharray")]
    # y 150 - 0.6 / 1.05 * 100 = 92.86; x from 100 + 1.25 / 2 * 200 = 225 to 275
    assert (rule["x1"], rule["x2"], rule["y1"], rule["y2"]) == ("225", "275", "92.86", "92.86")
    (polyline,) = root.iter(f"{SVG}polyline")
    assert polyline.get("points") == "150,150 250,50"
    assert [(s.label, s.kind) for s in panel.series] == [("arm", "bar"), ("trend", "line")]


def test_text_is_escaped_and_a_newline_starts_a_line() -> None:
    chart = Chart(300, 100)
    chart.text(10, 20, HOSTILE)
    chart.text(10, 60, "Nov 30\n2026")
    svg = chart.svg()
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt; &amp; $y$" in svg
    assert texts(chart) == [HOSTILE, "Nov 302026"]
    assert svg.count("<tspan") == 1


def test_the_legend_wraps_at_the_chart_width() -> None:
    entries = [Series(f"variant number {i}", "#000000", "bar", [], []) for i in range(6)]
    narrow, wide = Chart(400, 100), Chart(2000, 100)
    # each entry: 21 + 16 characters x 11 x 0.62 + 14 = 144.1 pixels; 380 fit 2, 1980 fit 6 * 13
    assert narrow.legend_height(entries) == 3 * 20
    assert wide.legend_height(entries) == 20
    narrow.legend(entries, 0)
    assert texts(narrow) == [entry.label for entry in entries]


def regression_rows() -> pd.DataFrame:
    rows = []
    for segment in ("factual", HOSTILE, "__all__"):
        for variant, mean in (("control", 0.7), ("candidate", 0.5)):
            for metric in ("ndcg@10", "mrr"):
                rows.append(
                    {
                        "segment": segment,
                        "variant": variant,
                        "metric": metric,
                        "mean": mean,
                        "ci_low": mean - 0.05,
                        "ci_high": mean + 0.05,
                        "threshold": 0.6,
                        "status": "fail" if mean < 0.6 else "pass",
                        "traces": 10,
                        "annotated_traces": 8 if variant == "control" else 5,
                        "coverage": 0.8 if variant == "control" else 0.5,
                    }
                )
    return pd.DataFrame(rows)


def test_the_regression_bars_hatch_the_failing_bars() -> None:
    chart = regression_bars_chart(regression_rows(), ["ndcg@10", "mrr"])
    assert chart is not None
    assert len(chart.panels) == 2
    root = parse(chart)
    hatched = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == "url(#hatch)"]
    assert len(hatched) == 2 * 3  # candidate (0.5 < 0.6) in each panel and segment
    first = chart.panels[0]
    assert [(s.label, s.ys) for s in first.series] == [
        ("candidate", [0.5, 0.5, 0.5]),
        ("control", [0.7, 0.7, 0.7]),
    ]
    assert HOSTILE in texts(chart)  # the segment name under the panels, as text
    assert texts(chart)[-1] == "all segments"


def test_the_coverage_chart_draws_each_variants_share() -> None:
    chart = regression_coverage_chart(regression_rows(), min_coverage=0.6)
    (panel,) = chart.panels
    assert [(s.label, s.xs) for s in panel.series] == [
        ("candidate", [0.5, 0.5, 0.5]),
        ("control", [0.8, 0.8, 0.8]),
    ]
    assert [label for _, label in panel.y_ticks] == [HOSTILE, "factual", "all segments"]
    root = parse(chart)
    (minimum,) = [e for e in root.iter(f"{SVG}line") if e.get("stroke-dasharray")]
    # the panel spans 0..1 from its left edge
    expected = panel.left + 0.6 * panel.width
    assert (
        float(minimum.get("x1", ""))
        == float(minimum.get("x2", ""))
        == pytest.approx(expected, abs=0.005)
    )
    assert "share of traces annotated" in texts(chart)
