"""After `./scripts/quickstart` (14 days of sample traces, 13 backfilled in one run, then the
nightly run of the last), the Dagster UI has a history: the schedule is running, Dagster's GraphQL
API returns 14 plotted points per headline series and per segment series, every partition is
materialized, and the asset page's Plots view draws them (a screenshot in headless Chromium).
Then an older day is rerun as the README does it, and the latest day's check verdict stays as it
was (issue 34's first-week test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.processes import (
    answers,
    default_signals,
    free_port,
    require_tool,
    stop_group,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
DAYS = 14

pytestmark = pytest.mark.slow


def graphql(url: str, query: str) -> Any:
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.load(response)
    assert "errors" not in body, body
    return body["data"]


MATERIALIZATIONS = """
{ assetOrError(assetKey: {path: ["regression_report"]}) { ... on Asset {
    assetMaterializations(limit: 1000) {
      partition timestamp
      metadataEntries { label ... on FloatMetadataEntry { floatValue }
        ... on IntMetadataEntry { intValue } } } } } }
"""
SCHEDULE_STATE = """
{ scheduleOrError(scheduleSelector: {repositoryLocationName: "retrieval_pipeline.defs",
    repositoryName: "__repository__", scheduleName: "nightly_schedule"}) {
    ... on Schedule { scheduleState { status } } } }
"""
PARTITION_STATS = """
{ assetNodeOrError(assetKey: {path: ["%s"]}) { ... on AssetNode {
    partitionStats { numMaterialized numPartitions numFailed } } } }
"""


def plotted_points(url: str) -> dict[str, dict[str, float]]:
    """Series -> partition -> value, from each partition's latest materialization: what the
    Plots view draws."""
    events = graphql(url, MATERIALIZATIONS)["assetOrError"]["assetMaterializations"]
    latest: dict[str, dict[str, Any]] = {}
    for event in events:
        seen = latest.get(event["partition"])
        if seen is None or float(event["timestamp"]) > float(seen["timestamp"]):
            latest[event["partition"]] = event
    series: dict[str, dict[str, float]] = defaultdict(dict)
    for partition, event in latest.items():
        for entry in event["metadataEntries"]:
            for kind in ("floatValue", "intValue"):
                if kind in entry:
                    series[entry["label"]][partition] = entry[kind]
    return series


def test_the_ui_plots_every_day_after_the_quickstart(tmp_path: Path) -> None:
    require_tool("chromium")  # before the quickstart's minutes, not after
    webserver = require_tool("dagster-webserver")
    data = tmp_path / "quickstart"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRIEVAL_PIPELINE_")}
    env |= {"RETRIEVAL_PIPELINE_QUICKSTART_DIR": str(data)}
    env.pop("DAGSTER_HOME", None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "quickstart")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    # the check's words end the run, and the hint opens this very instance
    assert any(line.startswith("  multi_hop / candidate: ndcg@10 = ") for line in lines), lines
    home = data / "dagster_home"
    assert lines[-1].startswith(f"Browse the runs and each day's numbers: DAGSTER_HOME={home} ")
    assert "Traceback" not in done.stdout

    with open(home / "dagster.yaml", "a", encoding="utf-8") as config:
        config.write("\nnux:\n  enabled: false\n")  # no welcome dialog over the screenshot
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_env = env | {
        "DAGSTER_HOME": str(home),
        "RETRIEVAL_PIPELINE_STORE": str(data / "store"),
        "RETRIEVAL_PIPELINE_DB": str(data / "warehouse.duckdb"),
    }
    with open(tmp_path / "webserver.log", "wb") as log:
        server = subprocess.Popen(
            [webserver, "-m", "retrieval_pipeline.defs", "-h", "127.0.0.1", "-p", str(port)],
            cwd=ROOT,
            env=server_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_signals,
        )
    try:
        wait_until(
            lambda: answers(f"{url}/server_info", 5),
            server,
            "dagster-webserver",
            180,
            tmp_path / "webserver.log",
            poll_s=0.5,
        )
        check_history(url, data)
        check_screenshot(url, tmp_path)
    finally:
        stop_group(server)
    check_rerun_keeps_the_latest_verdict(home, server_env)


def check_rerun_keeps_the_latest_verdict(home: Path, env: dict[str, str]) -> None:
    """Rerunning an older day, as a user would with the README's command, leaves the latest
    day's check verdict as it was: failing (the sample's injected regression)."""
    import dagster as dg

    from tests.defs.test_check_partitions import THRESHOLDS, verdict

    today = datetime.now(UTC).date()
    latest, older = today - timedelta(days=1), today - timedelta(days=3)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert (verdict(instance, THRESHOLDS, latest), verdict(instance, THRESHOLDS, older)) == (
            False,
            True,
        )
    dagster = str(Path(sys.executable).with_name("dagster"))
    command = [dagster, "asset", "materialize", "-m", "retrieval_pipeline.defs", "--select", "*"]
    rerun = subprocess.run(
        [*command, "--partition", older.isoformat()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=default_signals,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        latest_of_check = instance.get_latest_asset_check_evaluation_record(THRESHOLDS)
        assert latest_of_check is not None and latest_of_check.partition == older.isoformat()
        assert verdict(instance, THRESHOLDS, latest) is False  # unchanged by the rerun


def check_history(url: str, data: Path) -> None:
    # the nightly runs from the first start, without a toggle in the UI (issue 34, item 1)
    schedule = graphql(url, SCHEDULE_STATE)["scheduleOrError"]
    assert schedule == {"scheduleState": {"status": "RUNNING"}}, schedule
    for asset in ("traces", "segment_metrics", "regression_report"):
        stats = graphql(url, PARTITION_STATS % asset)["assetNodeOrError"]["partitionStats"]
        assert stats == {"numMaterialized": DAYS, "numPartitions": DAYS, "numFailed": 0}, asset
    series = plotted_points(url)
    reports = {
        path.stem.removeprefix("regression_report_"): json.loads(path.read_text())
        for path in (data / "reports").glob("regression_report_*.json")
    }
    assert len(reports) == DAYS
    headline = {name for report in reports.values() for name in report["headline"]}
    assert headline == {f"{m} ({v})" for m in ("ndcg@10", "mrr") for v in ("control", "candidate")}
    for name in headline:
        assert series[f"Overall {name}"] == pytest.approx(
            {day: report["headline"][name] for day, report in reports.items()}
        ), name
    segment = series["Segment multi_hop: ndcg@10 (candidate)"]
    assert len(segment) == DAYS
    last = max(segment)
    assert segment[last] < min(v for day, v in segment.items() if day != last) - 0.1  # the drop
    # each threshold is a series beside its metric, one point a day, the report's threshold
    threshold = series["Segment multi_hop: ndcg@10 (candidate) threshold"]
    assert threshold == {
        day: next(
            r["threshold"]
            for r in report["rows"]
            if (r["segment"], r["variant"], r["metric"]) == ("multi_hop", "candidate", "ndcg@10")
        )
        for day, report in reports.items()
    }
    assert series["Misses"] == {day: len(report["misses"]) for day, report in reports.items()}


# True once at least four canvases hold drawn pixels and none changed since the last poll (the
# charts' animation has ended); each poll keeps what it saw in `window.__charts`.
CHARTS_DRAWN = """(() => {
  const drawn = [...document.querySelectorAll('canvas')].map(c => {
    const g = c.width && c.height && c.getContext('2d');
    if (!g) return '';
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0, h = 0;
    for (let i = 3; i < d.length; i += 4) {
      if (d[i]) { n += 1; h = (h * 31 + d[i - 3] + 7 * d[i - 2] + 13 * d[i - 1]) | 0; }
    }
    return n ? n + ':' + h : '';
  });
  const now = drawn.join('|');
  const still = drawn.filter(Boolean).length >= 4 && window.__charts === now;
  window.__charts = now;
  return still;
})()"""


PLOT_ORDER = [
    "Misses",
    "Overall mrr (candidate)",
    "Overall ndcg@10 (candidate)",
    "Overall ndcg@10 (candidate) threshold",
    "Overall ndcg@10 (control)",
    "Segment multi_hop: ndcg@10 (candidate)",
    "Segment multi_hop: ndcg@10 (candidate) threshold",
    "Watch list",
]


def check_screenshot(url: str, folder: Path) -> None:
    from PIL import Image

    from tests.devtools import chromium_page

    with chromium_page(folder) as page:
        page.open(f"{url}/assets/regression_report")
        button = (
            "[...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Plots')"
        )
        page.wait_for(f"!!{button}", "the metadata's Plots button")
        page.js(f"{button}.click()")
        page.wait_for("document.querySelectorAll('canvas').length >= 4", "the plots")
        page.wait_for(
            "document.body.innerText.includes('Segment multi_hop: ndcg@10 (candidate)')",
            "a segment plot",
        )
        # the UI sorts plots by label: the misses, the headline metrics, then the segments,
        # each threshold right after its metric
        order = page.js(
            "(() => { const t = document.body.innerText; return ["
            + ", ".join(f"t.indexOf({json.dumps(label)})" for label in PLOT_ORDER)
            + "]; })()"
        )
        assert -1 not in order and order == sorted(order), dict(zip(PLOT_ORDER, order, strict=True))
        page.wait_for(CHARTS_DRAWN, "the plots drawn and still", within_s=60)
        shot = page.screenshot(folder / "regression_report_plots.png")
    with Image.open(shot) as image:
        assert image.size == (1400, 2000)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50  # drawn charts, not a blank page
