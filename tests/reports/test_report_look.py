"""One look across the reports: each variant one colour everywhere, the failing row marked, a
watch list of significant drops that still pass, and the comparison's word on a raw p-value that
Holm's adjustment takes above alpha."""

from __future__ import annotations

import dataclasses
import functools
import html
import http.server
import json
import re
import threading
from pathlib import Path

import pandas as pd
import pytest

from retrieval_pipeline.ab.compare import Comparison
from retrieval_pipeline.reports.charts import variant_colours
from retrieval_pipeline.reports.comparison import comparison_html, comparison_markdown, holm_notes
from retrieval_pipeline.reports.comparison_charts import arm_colours, segment_bars_chart
from retrieval_pipeline.reports.regression import build_report, watch_of
from retrieval_pipeline.reports.regression_html import regression_bars_chart, regression_html
from retrieval_pipeline.text import escape_markdown
from tests.reports.test_html_report import comparison
from tests.reports.test_report import CONFIG, DAY, row

BLUE, ORANGE = "#1F77B4", "#FF7F0E"  # tab10's first two


def test_the_control_is_blue_and_the_candidate_orange_everywhere() -> None:
    # sorted, candidate < control: by name alone the regression report swapped them
    assert variant_colours(["control", "candidate"]) == {"candidate": BLUE, "control": ORANGE}
    leading = ("control", "candidate")
    assert variant_colours(["candidate", "x", "control"], leading) == {
        "control": BLUE,
        "candidate": ORANGE,
        "x": "#2CA02C",
    }
    assert arm_colours("control", "candidate") == {"control": BLUE, "candidate": ORANGE}
    rows = pd.DataFrame(
        [
            row("factual", variant, "ndcg@10", mean, 0.6, "pass", baseline=0.8)
            for variant, mean in (("candidate", 0.7), ("control", 0.75))
        ]
    )
    bars = regression_bars_chart(rows, ["ndcg@10"], leading)
    assert bars is not None
    drawn = {s.label: s.colour for p in bars.panels for s in p.series if s.kind == "bar"}
    assert drawn == {"control": BLUE, "candidate": ORANGE}
    arms = segment_bars_chart(
        comparison(segment="factual", control="control", candidate="candidate")
    )
    drawn = {s.label: s.colour for p in arms.panels for s in p.series if s.kind == "bar"}
    assert drawn == {"control": BLUE, "candidate": ORANGE}


@pytest.fixture
def rows() -> pd.DataFrame:
    watched = row("multi_hop", "candidate", "map", 0.612, 0.5, "pass", baseline=0.800)
    watched |= {"ci_low": 0.55, "ci_high": 0.67}
    unthresholded = row("multi_hop", "candidate", "precision@5", 0.40, None, "no_threshold")
    unthresholded |= {"baseline": 0.577, "delta": 0.40 - 0.577, "ci_low": 0.35, "ci_high": 0.45}
    return pd.DataFrame(
        [
            watched,
            unthresholded,
            # a drop within the day's interval: noise, not watched
            row("factual", "candidate", "map", 0.78, 0.5, "pass", baseline=0.80),
            # a miss is a miss, not a watch
            row("code", "control", "mrr", 0.55, 0.65, "fail", baseline=0.9),
        ]
    )


def test_the_watch_list_names_significant_drops_that_pass(rows: pd.DataFrame) -> None:
    watch = watch_of(rows)
    assert [w.words() for w in watch] == [
        "multi_hop / candidate: map = 0.612, -0.188 against its baseline 0.800 (95% CI "
        "0.550..0.670, all below it); still passes its threshold 0.500",
        "multi_hop / candidate: precision@5 = 0.400, -0.177 against its baseline 0.577 (95% CI "
        "0.350..0.450, all below it); has no threshold",
    ]
    report = build_report(rows, CONFIG, DAY)
    markdown = report.to_markdown()
    assert "**Watch: 2 significant drops against the baseline that still pass:**" in markdown
    assert f"- {watch[0].words()}" in markdown
    data = json.loads(report.to_json())
    assert [(w["metric"], round(w["delta"], 3)) for w in data["watch"]] == [
        ("map", -0.188),
        ("precision@5", -0.177),
    ]


def test_the_failing_row_and_the_watched_rows_are_marked(rows: pd.DataFrame) -> None:
    page = regression_html(build_report(rows, CONFIG, DAY))
    marked = re.findall(
        r'<tr class="(\w+)"><td class="text">([^<]*)</td><td class="text">([^<]*)</td>'
        r'<td class="text">([^<]*)</td>',
        page,
    )
    assert sorted(marked) == [
        ("watch", "multi_hop", "candidate", "map"),
        ("watch", "multi_hop", "candidate", "precision@5"),
        ("worse", "code", "control", "mrr"),
    ]
    assert "tr.worse td{background:#FFEBEE}" in page
    assert "Watch: 2 significant drops against the baseline that still pass:" in page


def with_ps(result: Comparison, raw: float, adjusted: float) -> Comparison:
    first = result.cells[0]
    cells = (
        dataclasses.replace(first, p_randomization=raw, p_randomization_holm=adjusted),
        *result.cells[1:],
    )
    return dataclasses.replace(result, cells=cells)


def test_a_small_raw_p_that_holm_lifts_is_explained_in_one_sentence() -> None:
    result = comparison(segment="multi_hop", control="control", candidate="candidate")
    tested = sum(1 for cell in result.cells if cell.p_randomization_holm is not None)
    cell = result.cells[0]
    changed = with_ps(result, 0.007, 0.225)
    (note,) = holm_notes(changed)
    label = "all segments" if cell.segment == "__all__" else cell.segment
    assert note == (
        f"{label} / {cell.metric}: the raw p-value 0.0070 is below 0.05, but adjusted (Holm) for"
        f" the {tested} segment x metric cells tested together it is 0.2250, so this difference"
        " alone is not significant."
    )
    assert escape_markdown(note) in comparison_markdown(changed)
    assert html.escape(note) in comparison_html(changed)
    assert holm_notes(with_ps(result, 0.007, 0.03)) == []  # significant either way
    assert holm_notes(with_ps(result, 0.2, 0.9)) == []  # not small to begin with


def test_the_comparison_tables_fit_a_1400_pixel_window(tmp_path: Path) -> None:
    from tests.devtools import chromium_page

    page_text = comparison_html(comparison(segment="multi_hop", control="control", candidate="c"))
    (tmp_path / "comparison.html").write_text(page_text, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium_page(tmp_path) as page:
            page.open(f"http://127.0.0.1:{server.server_port}/comparison.html", 1400, 1000)
            page.wait_for(
                "document.readyState === 'complete' && !!document.querySelector('table')",
                "the page",
            )
            widths = page.js(
                "[...document.querySelectorAll('.scroll')].map(s => [s.scrollWidth, s.clientWidth])"
            )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert len(widths) >= 3
    assert all(content <= box for content, box in widths), widths  # no table scrolls sideways
