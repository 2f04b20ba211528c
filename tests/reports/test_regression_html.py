"""The HTML regression report: written beside the Markdown and JSON, trace strings escaped, the
bars, trend and coverage charts embedded, and a page a headless browser renders.

A tiny hand-written trace store puts a hostile segment name through the whole pipeline; the
trend reader is checked on a DuckDB connection.
"""

from __future__ import annotations

import base64
import json
import math
import re
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.defs import ASSETS
from retrieval_pipeline.defs.ab.assets import variant_comparison, variant_comparison_flag
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.reports.regression_html import regression_html
from retrieval_pipeline.reports.trend_chart import trend_chart
from retrieval_pipeline.warehouse import trend
from tests.browser import render
from tests.dagster_runs import RunFolder, materialize

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
DAYS = [date(2026, 3, 1), date(2026, 3, 2)]
PIPELINE = [a for a in ASSETS if a.key.to_user_string() != "deploy_gate"]
# the candidate's hostile-segment nDCG@10: its one relevant document (grade 3) at rank 8
NDCG = (2**3 - 1) / math.log2(8 + 1) / ((2**3 - 1) / math.log2(1 + 1))


def svgs(page: str) -> list[str]:
    found = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)
    return [base64.b64decode(item).decode("utf-8") for item in found]


def alts(page: str) -> list[str]:
    return re.findall(r'<img alt="([^"]*)"', page)


def write_tiny_store(root: Path) -> None:
    """Two days, segments `factual` and the hostile one, variants control and candidate on the
    same ten queries; the candidate ranks the hostile segment's relevant document 8th."""
    for day in DAYS:
        folder = root / "traces" / f"date={day.isoformat()}"
        folder.mkdir(parents=True)
        lines = []
        for segment in ("factual", HOSTILE):
            for variant in ("control", "candidate"):
                for i in range(12):
                    rank = 7 if (segment, variant) == (HOSTILE, "candidate") else 0
                    retrieved = [f"x{j}" for j in range(10)]
                    retrieved.insert(rank, "rel")
                    record: dict[str, object] = {
                        "trace_id": f"{day}-{segment}-{variant}-{i}",
                        "query_id": f"{segment}-q{i % 10}",
                        "timestamp": f"{day.isoformat()}T10:{i:02d}:00Z",
                        "retrieved_ids": retrieved,
                        "segment": segment,
                        "variant": variant,
                    }
                    if i < 10:  # two of twelve unannotated: coverage 10/12
                        record["relevance_scores"] = {"rel": 3}
                    lines.append(json.dumps(record))
        (folder / "traces.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipeline (and the comparison) over both days in one run; returns the reports folder."""
    folder = tmp_path_factory.mktemp("hostile")
    write_tiny_store(folder / "store")
    config = folder / "pipeline.toml"
    config.write_text(
        "[checks]\nmin_annotated_traces = 5\n[comparison]\nlookback_days = 2\nn_resamples = 199\n",
        encoding="utf-8",
    )
    run = RunFolder(folder)
    result = materialize(
        [*PIPELINE, variant_comparison, variant_comparison_flag],
        run.resources(folder / "store", config),
        days=DAYS,
    )
    assert result.success
    return run.reports


@pytest.fixture(scope="module")
def page(hostile_run: Path) -> str:
    return (hostile_run / f"regression_report_{DAYS[-1]}.html").read_text(encoding="utf-8")


def test_the_html_report_is_written_beside_markdown_and_json(hostile_run: Path) -> None:
    for day in DAYS:
        for suffix in (".html", ".md", ".json"):
            assert (hostile_run / f"regression_report_{day}{suffix}").is_file()


def test_a_hostile_segment_name_is_escaped(page: str) -> None:
    assert HOSTILE not in page
    assert "<script" not in page.lower()
    assert ESCAPED in page
    # the miss, in words, names the hostile segment as text
    words = (
        f"{ESCAPED} / candidate: ndcg@10 = {NDCG:.3f}, {0.65 - NDCG:.3f} below the threshold 0.650"
    )
    assert f"<li>{words}</li>" in page
    for svg in svgs(page):
        assert "<script" not in svg.lower()


def test_the_page_holds_the_bars_the_trend_and_the_coverage(page: str) -> None:
    assert alts(page) == [
        "headline metrics per segment and variant",
        "Trend of the headline metrics",
        "annotation coverage per segment and variant",
    ]
    bars, trend_chart, coverage = svgs(page)
    assert "ndcg@10" in bars and "mrr" in bars
    assert "&lt;script&gt;alert(1)" in trend_chart  # a panel per segment, titled as text
    assert "share of traces annotated" in coverage
    assert "0.833" in page  # coverage 10 of 12 traces, in the table
    assert re.findall(r'(?:src|href)="(?!data:)', page) == []
    assert "default-src 'none'" in page


def test_the_trend_shows_both_partitions(hostile_run: Path) -> None:
    with duckdb.connect(str(RunFolder(hostile_run.parent).database)) as conn:
        rows = trend.read_segment_trend(conn, DAYS[-1], ["ndcg@10", "mrr"])
        first = trend.read_segment_trend(conn, DAYS[0], ["ndcg@10"], last_n=30)
        last = trend.read_segment_trend(conn, DAYS[-1], ["ndcg@10"], last_n=1)
    assert sorted(set(rows["partition_date"].dt.date)) == DAYS
    assert set(rows["metric"]) == {"ndcg@10", "mrr"}
    assert set(rows["segment"]) == {"factual", HOSTILE, "__all__"}
    assert set(first["partition_date"].dt.date) == {DAYS[0]}  # nothing after the report's day
    assert set(last["partition_date"].dt.date) == {DAYS[-1]}
    chart = trend_chart(rows, ["ndcg@10", "mrr"], value_column="mean")
    assert chart is not None
    assert len(chart.panels) == 3 * 2  # segments (with the overall row) x metrics


def test_the_comparison_page_escapes_the_hostile_segment_too(hostile_run: Path) -> None:
    page = (hostile_run / f"variant_comparison_{DAYS[-1]}.html").read_text(encoding="utf-8")
    assert HOSTILE not in page and ESCAPED in page
    assert "Daily trend of the headline metrics" in alts(page)
    report = json.loads((hostile_run / f"variant_comparison_{DAYS[-1]}.json").read_text())
    assert report["flagged"]
    assert report["reasons"][0] == f"{HOSTILE}: ndcg@10 {NDCG:.3f} < 0.650 (control 1.000)"


def test_trend_reader_on_an_empty_warehouse() -> None:
    with duckdb.connect(":memory:") as conn:
        frame = trend.read_segment_trend(conn, DAYS[0], ["ndcg@10"])
    assert frame.empty and list(frame.columns) == list(trend.TREND_COLUMNS)
    with pytest.raises(ValueError, match="last_n must be >= 1"), duckdb.connect() as conn:
        trend.read_segment_trend(conn, DAYS[0], ["ndcg@10"], last_n=0)


def test_a_day_without_data_says_so() -> None:
    empty = build_report(pd.DataFrame(), PipelineConfig(), DAYS[0])
    page = regression_html(empty, trend=None)
    assert "No data:" in page and svgs(page) == []


def test_trend_ticks_are_days_not_hours() -> None:
    rows = pd.DataFrame(
        [
            {
                "partition_date": DAYS[0] + timedelta(days=d),
                "segment": "s",
                "variant": "v",
                "metric": "mrr",
                "mean": 0.5,
            }
            for d in range(2)
        ]
    )
    chart = trend_chart(rows, ["mrr"], value_column="mean")
    assert chart is not None
    labels = [label for _, label in chart.panels[0].x_ticks]
    assert labels == ["Mar 1\n2026", "Mar 2"], labels


@pytest.mark.slow
def test_the_report_renders_in_headless_chromium(page: str, tmp_path: Path) -> None:
    """The page as a browser parses it: drawn, no script element, the hostile name as text."""
    dom = render(page, tmp_path)
    assert ESCAPED in dom
    assert dom.count("<img") == 3
