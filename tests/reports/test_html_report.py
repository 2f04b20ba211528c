"""The reports: trace strings escaped, self-contained HTML, charts, Markdown, JSON, a browser."""

from __future__ import annotations

import base64
import json
import re
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval_pipeline.ab.compare import Comparison, ComparisonSettings
from retrieval_pipeline.ab.pairing import compare_variants
from retrieval_pipeline.reports.comparison import (
    comparison_html,
    comparison_json,
    comparison_markdown,
    write_comparison_report,
)
from retrieval_pipeline.reports.html import render_table
from retrieval_pipeline.reports.trend_chart import trend_chart, trend_section
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import printable
from tests.browser import render

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
# TeX-like text (an unbalanced $...$ once made the plotting library's mathtext parser raise)
MATHTEXT = r"cost $\frac{1}{ $x"
CONTROL, CANDIDATE = 'ctl"><b>x', "<i>c&d"


def comparison(
    segment: str = HOSTILE,
    control: str = CONTROL,
    candidate: str = CANDIDATE,
    metrics: tuple[str, ...] = ("ndcg@10", "mrr"),
) -> Comparison:
    rng = np.random.default_rng(1)
    rows = []
    for name, shift in ((segment, -0.15), (MATHTEXT, 0.0)):
        for i in range(12):
            base = float(rng.uniform(0.5, 0.9))
            rows.append(
                {
                    "query_id": f"{name}{i}",
                    "segment": name,
                    "variant": control,
                    "ndcg@10": base,
                    "mrr": base,
                }
            )
            rows.append(
                {
                    "query_id": f"{name}{i}",
                    "segment": name,
                    "variant": candidate,
                    "ndcg@10": base + shift + float(rng.normal(0, 0.02)),
                    "mrr": base,
                }
            )
    settings = ComparisonSettings(
        guarded_metrics=("ndcg@10",),
        thresholds={"*": {"ndcg@10": 0.6}},
        n_resamples=499,
        min_annotated_traces=5,
    )
    return compare_variants(pd.DataFrame(rows), control, candidate, settings, list(metrics))


def esc_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svgs(page: str) -> list[str]:
    found = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)
    return [base64.b64decode(item).decode("utf-8") for item in found]


@pytest.fixture(scope="module")
def hostile() -> Comparison:
    return comparison()


@pytest.fixture(scope="module")
def page(hostile: Comparison) -> str:
    return comparison_html(hostile)


def test_html_escapes_a_hostile_segment_name(hostile: Comparison, page: str) -> None:
    assert hostile.flagged  # so the reasons (which name the segment) are on the page too
    assert HOSTILE not in page
    assert ESCAPED in page
    assert "<script" not in page.lower()


def test_hostile_variant_names_are_escaped_too(page: str) -> None:
    assert "<b>x" not in page and "<i>c" not in page
    assert "ctl&quot;&gt;&lt;b&gt;x" in page and "&lt;i&gt;c&amp;d" in page


def test_the_page_is_self_contained(page: str) -> None:
    images = svgs(page)
    assert len(images) == 3  # bars, forest plot, coverage
    outside = re.findall(r'(?:src|href)="(?!data:)', page)
    assert outside == []
    assert "<link" not in page and "@import" not in page
    assert "default-src 'none'" in page  # the CSP forbids scripts and fetches


def test_chart_svgs_hold_no_markup_from_trace_data(page: str) -> None:
    for svg in svgs(page):
        assert "<script" not in svg.lower()
        assert HOSTILE not in svg
    assert any("&lt;script&gt;alert(1)" in svg for svg in svgs(page))  # as escaped text


def test_tex_like_names_are_drawn_literally(page: str) -> None:
    assert esc_text(MATHTEXT) in page
    assert any(f">{esc_text(MATHTEXT)} · ndcg@10<" in svg for svg in svgs(page))  # forest label
    assert printable("a$b\x1b[31m", 40) == "a$b [31m"
    assert printable("x" * 50, 10) == "x" * 9 + "\u2026"


def test_markdown_escapes_cell_breaks_code_and_tags() -> None:
    text = comparison_markdown(comparison(segment="a|b`c<d>"))
    assert "a\\|b\\`c&lt;d&gt;" in text
    assert "<d>" not in text
    header = next(line for line in text.splitlines() if line.startswith("| segment | metric"))
    row = next(line for line in text.splitlines() if line.startswith("| a\\|b"))
    cells = lambda line: len(re.split(r"(?<!\\)\|", line))  # noqa: E731
    assert cells(row) == cells(header)


def test_json_is_the_data_as_it_is(hostile: Comparison) -> None:
    data = json.loads(comparison_json(hostile))
    assert data["segments"] == [HOSTILE, MATHTEXT, OVERALL_SEGMENT]
    assert data["flagged"] is True and data["reasons"] == list(hostile.reasons)
    assert len(data["cells"]) == 6
    assert data["cells"][0]["segment"] == HOSTILE and data["cells"][0]["verdict"] == "worse"
    assert data["settings"]["verdict_rule"].startswith("Holm-adjusted")


def test_render_table_escapes_and_formats() -> None:
    frame = pd.DataFrame({"name": [HOSTILE, None], "value": [0.12345, float("nan")], "n": [3, 4]})
    table = render_table(frame, headers={"value": "<v>"})
    assert HOSTILE not in table and ESCAPED in table
    assert "&lt;v&gt;" in table
    assert "<td>0.123</td>" in table and "<td>-</td>" in table and "<td>3</td>" in table


def trend_rows(days: int) -> pd.DataFrame:
    start = date(2026, 1, 1)
    rows = [
        {
            "partition_date": start + timedelta(days=d),
            "segment": segment,
            "variant": variant,
            "metric": metric,
            "value": 0.7 + 0.001 * d,
        }
        for d in range(days)
        for segment in (HOSTILE, OVERALL_SEGMENT)
        for variant in ("control", "candidate")
        for metric in ("ndcg@10", "mrr")
    ]
    return pd.DataFrame(rows)


def test_trend_shows_the_last_n_partitions_per_segment_and_metric() -> None:
    chart = trend_chart(trend_rows(40), last_n=30, thresholds={"*": {"ndcg@10": 0.72}})
    assert chart is not None
    panels = chart.panels
    assert len(panels) == 4  # 2 segments x 2 metrics
    assert [(s.label, len(s.xs)) for s in panels[0].series] == [("candidate", 30), ("control", 30)]
    last_day = date(2026, 1, 1) + timedelta(days=39)
    assert panels[0].series[0].xs[-1] == last_day.toordinal()
    assert panels[0].title.endswith("ndcg@10")
    assert panels[-1].title == "all segments · mrr"
    # the threshold, 0.72, is inside the ndcg@10 panels' y range and drawn as a dashed line
    low, high = panels[0].y_range
    assert low < 0.72 < high
    assert 'stroke-dasharray="5 3"' in panels[0].svg()
    assert "stroke-dasharray" not in panels[1].svg()  # no threshold for mrr
    section = trend_section(trend_rows(3), metrics=["ndcg@10"], title=HOSTILE)
    assert HOSTILE not in section and ESCAPED in section and len(svgs(section)) == 1
    empty = trend_section(trend_rows(0).reindex(columns=trend_rows(1).columns))
    assert "No partitions" in empty


def test_reports_written_by_extension(hostile: Comparison, page: str, tmp_path: Path) -> None:
    for suffix in (".html", ".md", ".json"):
        write_comparison_report(hostile, tmp_path / f"report{suffix}")
    # the same bytes for the same comparison: no dates, fixed SVG ids
    assert (tmp_path / "report.html").read_text(encoding="utf-8") == page
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["flagged"]
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert markdown.startswith('# &lt;i&gt;c&amp;d vs ctl"&gt;&lt;b&gt;x\n')
    with pytest.raises(ValueError, match=r"unknown report format \.txt"):
        write_comparison_report(hostile, tmp_path / "report.txt")


@pytest.mark.slow
def test_the_page_renders_in_headless_chromium(page: str, tmp_path: Path) -> None:
    """The page as a browser parses it: drawn, no script element, the hostile name as text."""
    dom = render(page, tmp_path)
    assert ESCAPED in dom
