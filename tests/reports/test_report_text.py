"""Trace strings in reports stay text (issue 27, class 7): a segment named like a Markdown image or
link renders as those characters, not as an image fetched or a link to click, and control and
bidirectional characters never reach a Markdown, HTML or SVG report. Rendered with markdown-it
(CommonMark), the parser's own verdict."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest
from markdown_it import MarkdownIt

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.reports.html import esc
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.reports.regression_html import regression_html
from retrieval_pipeline.text import escape_markdown, markdown_table, visible

IMAGE = "![px](http://127.0.0.1:9/pixel.png)"
LINK = "[approve deploy](http://127.0.0.1:9/approve)"
REFERENCE = "[approve][1]\n\n[1]: http://127.0.0.1:9/approve"
RLO = "multi\u202ehop"  # RIGHT-TO-LEFT OVERRIDE: shows as "multipoh"
INVISIBLE = ["\x00", "\x1b", "\x7f", "\x9b", "\u202e", "\u202d", "\u2066", "\u2069", "\u200f"]
DAY = date(2026, 11, 30)


def rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


@pytest.mark.parametrize("name", [IMAGE, LINK, REFERENCE, f"see {IMAGE} and {LINK}"])
def test_link_and_image_syntax_renders_as_text(name: str) -> None:
    assert "<img" in rendered(name) or "<a " in rendered(name)  # the raw name would act
    html = rendered(escape_markdown(name))
    assert "<img" not in html and "<a " not in html
    # the reader still sees the name itself (one line)
    shown = "".join(
        token.content
        for token in MarkdownIt("commonmark").parseInline(escape_markdown(name))[0].children or []
        if token.type == "text"
    )
    assert shown == name.replace("\n", " ")


def test_in_a_table_cell_too() -> None:
    html = rendered(markdown_table(["segment", "value"], [[IMAGE, "0.5"], [LINK, "0.6"]]))
    assert "<img" not in html and "<a " not in html
    assert html.count("<tr>") == 3


@pytest.mark.parametrize("character", INVISIBLE)
def test_control_and_bidirectional_characters_are_dropped(character: str) -> None:
    name = f"multi{character}hop"
    assert escape_markdown(name) == "multihop"
    assert esc(name) == "multihop"
    assert visible(name) == "multihop"


def test_tabs_and_line_breaks_become_spaces_in_markdown() -> None:
    assert escape_markdown("a\tb\r\nc\nd") == "a b c d"
    assert visible("a\tb\nc") == "a\tb\nc"  # kept where they are harmless (HTML text, SVG lines)


def row(segment: str) -> dict[str, object]:
    return {
        "partition_date": pd.Timestamp(DAY),
        "segment": segment,
        "variant": "candidate",
        "metric": "ndcg@10",
        "traces": 50,
        "annotated_traces": 40,
        "coverage": 0.8,
        "n": 40,
        "mean": 0.449,
        "ci_low": 0.4,
        "ci_high": 0.5,
        "baseline": 0.85,
        "threshold": 0.65,
        "min_annotated": 20,
        "status": "fail",
        "margin": 0.449 - 0.65,
        "delta": 0.449 - 0.85,
        "baseline_n": 280,
        "baseline_days": 7,
    }


def test_the_regression_report_keeps_hostile_segments_as_text() -> None:
    rows = pd.DataFrame([row(IMAGE), row(LINK), row(RLO + "\x00")])
    report = build_report(rows, PipelineConfig(), DAY)
    markdown = report.to_markdown()
    html = rendered(markdown)
    assert "<img" not in html and "<a " not in html
    assert "\u202e" not in markdown and "\x00" not in markdown
    page = regression_html(report)
    assert "\u202e" not in page and "\x00" not in page
    assert "http://127.0.0.1:9/pixel.png" in page  # as text, escaped, never as a source
    assert 'src="http' not in page and 'href="http' not in page
    # JSON keeps the data as it is
    assert {m["segment"] for m in report.to_dict()["misses"]} == {IMAGE, LINK, RLO + "\x00"}
