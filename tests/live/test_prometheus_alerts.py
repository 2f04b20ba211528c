"""The shipped rules in a real Prometheus: a sustained drop fed to two replicas of
`retrieval-pipeline monitor --metrics-port` fires `RetrievalLiveMetricDrop` for the dropped series
only, the nightly file's failing row and old last success fire the nightly alerts, and every query
of the Grafana dashboard runs.

Prometheus (Debian's package) runs on 127.0.0.1 in a temporary folder, scraping every second.
The rules are the shipped ones with only their durations shortened (the test asserts that the
expressions are otherwise the shipped text), so that a day's baseline and half an hour's `for:`
take seconds. Nothing reads this machine's clock: the nightly file's times are set from the
Prometheus server's own `time()`, and each step waits on what Prometheus has recorded, within
DEADLINE_S, not for a fixed time.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from retrieval_pipeline.reports.prometheus import FILE_NAME, write_metrics_file
from retrieval_pipeline.warehouse.nightly import QualityCounts
from tests.processes import default_signals, require_tool
from tests.prometheus_server import (
    Prometheus,
    promtool,
    running_prometheus,
    stop_group,
)

ROOT = Path(__file__).resolve().parents[2]
MONITOR = Path(sys.executable).with_name("retrieval-pipeline")
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "retrieval_pipeline.json"
DURATION = re.compile(r"\b\d+[smhdwy]\b")
# Every duration the shipped rules use, and what it becomes here (scrapes are 1 s apart).
SHORTER = {"5m": "5s", "1d": "30s", "1h": "8s", "30m": "4s"}
DROPPED = {"metric": "mrr", "segment": "multi_hop", "variant": "candidate"}
# Good values before the drop: the baseline (a 30 s window ending 8 s back, evaluated every
# second) recorded this many times, so over at least 8 + 6 = 14 s of them.
BASELINE_EVALUATIONS = 6
# The traces' own time: the monitor scores a trace whatever its time, and the rules never see it.
TRACE_TIME = "2026-11-30T12:00:00+00:00"
DEADLINE_S = 90  # for each wait on Prometheus


def shorten(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        assert match.group(0) in SHORTER, f"no short form for the duration {match.group(0)}"
        return SHORTER[match.group(0)]

    return DURATION.sub(replace, text)


def masked(text: str) -> str:
    return DURATION.sub("<duration>", text)


def test_promtool_checks_the_shipped_rules() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


def short_rules(folder: Path) -> Path:
    shipped = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    short = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group, short_group in zip(shipped["groups"], short["groups"], strict=True):
        for rule, short_rule in zip(group["rules"], short_group["rules"], strict=True):
            for field in ("expr", "for"):
                if field in rule:
                    short_rule[field] = shorten(rule[field])
                    assert masked(short_rule[field]) == masked(rule[field])
    path = folder / "rules.yml"
    path.write_text(yaml.safe_dump(short), encoding="utf-8")
    return path


class _FileHandler(http.server.BaseHTTPRequestHandler):
    """Serves one file at /metrics, as node-exporter's textfile collector would."""

    path_to_serve: Path

    def do_GET(self) -> None:
        if not self.path_to_serve.is_file():  # not written yet: a failed scrape, as in production
            self.send_error(404)
            return
        body = self.path_to_serve.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving_file(path: Path) -> Iterator[int]:
    handler = type("Handler", (_FileHandler,), {"path_to_serve": path})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def nightly_file(path: Path, now: datetime) -> Path:
    """A day whose multi_hop candidate MRR fails, written at `now` after a failed run: the last
    success (three days back) is carried over from the file before."""
    day = (now - timedelta(days=1)).date()
    rows = [
        {
            "partition_date": day,
            "segment": segment,
            "variant": "candidate",
            "metric": "mrr",
            "traces": 40,
            "annotated_traces": 30,
            "n": 30,
            "mean": mean,
            "ci_low": mean - 0.1,
            "ci_high": mean + 0.1,
            "threshold": 0.6,
            "coverage": 0.75,
            "status": "fail" if mean < 0.6 else "pass",
            "judged_share": 0.9,
        }
        for segment, mean in (("multi_hop", 0.5), ("factual", 0.8))
    ]
    quality = QualityCounts(100, 96, 4, 400, 12, 5000, 40)
    earlier = [row | {"partition_date": day - timedelta(days=3)} for row in rows]
    assert write_metrics_file(path, earlier, quality, now - timedelta(days=3), True).written
    assert write_metrics_file(path, rows, quality, now, succeeded=False).written
    return path


def start_monitor(folder: Path, name: str) -> tuple[subprocess.Popen[bytes], Path, int]:
    """`retrieval-pipeline monitor --follow FILE --metrics-port 0` in its own process group: the
    process, the file it follows and the port it printed."""
    source = folder / f"{name}.jsonl"
    source.touch()
    log = folder / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(MONITOR), "monitor", "--follow", str(source), "--metrics-port", "0",
             "--metrics", "mrr", "--poll-seconds", "0.1"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=default_signals,
        )  # fmt: skip
    deadline = time.monotonic() + DEADLINE_S
    while not (
        found := re.search(rb"serving metrics on http://127.0.0.1:(\d+)/", log.read_bytes())
    ):
        assert process.poll() is None, log.read_text(encoding="utf-8")
        assert time.monotonic() < deadline, log.read_text(encoding="utf-8")
        time.sleep(0.1)
    return process, source, int(found.group(1))


def trace_line(name: str, number: int, segment: str, variant: str, rank: int) -> str:
    """A labelled trace whose MRR is 1 / rank (its one relevant document at that rank)."""
    return json.dumps(
        {
            "trace_id": f"{name}-{number}",
            "query_id": f"q{number}",
            "timestamp": TRACE_TIME,
            "retrieved_ids": ["d1", "d2", "d3", "d4", "d5"],
            "relevant_ids": [f"d{rank}"],
            "segment": segment,
            "variant": variant,
        }
    )


class Feeder:
    """Appends traces to the replicas' files ten times a second: replica A's have their relevant
    document at rank `ranks[0]`, B's at `ranks[1]`, so a series' mean over both is the mean of
    the two reciprocal ranks: (1 + 1/2) / 2 before the drop, (1/4 + 1/5) / 2 on the dropped one."""

    GOOD, DROPPED = (1, 2), (4, 5)

    def __init__(self, sources: list[Path]) -> None:
        self.sources = sources
        self.dropped = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        number = 0
        while not self.stop.wait(0.1):
            lines: list[list[str]] = [[] for _ in self.sources]
            for segment in ("factual", "multi_hop"):
                for variant in ("control", "candidate"):
                    drop = self.dropped.is_set() and (segment, variant) == (
                        DROPPED["segment"],
                        DROPPED["variant"],
                    )
                    ranks = self.DROPPED if drop else self.GOOD
                    for index, rank in enumerate(ranks):
                        number += 1
                        lines[index].append(trace_line("t", number, segment, variant, rank))
            for source, chunk in zip(self.sources, lines, strict=True):
                with open(source, "a", encoding="utf-8") as out:
                    out.write("\n".join(chunk) + "\n")


def alerts(server: Prometheus, name: str, state: str) -> list[dict[str, Any]]:
    return [
        alert
        for alert in server.api("alerts")["alerts"]
        if alert["labels"]["alertname"] == name and alert["state"] == state
    ]


def server_time(server: Prometheus) -> datetime:
    """The Prometheus server's `time()`: what its rules compare timestamps with."""
    data = server.api("query", query="time()")
    assert data["resultType"] == "scalar", data
    return datetime.fromtimestamp(float(data["result"][1]), UTC)


def at_least(server: Prometheus, expr: str, count: int) -> list[dict[str, Any]]:
    """The series of `expr` whose value is at least `count` (none yet: an empty list)."""
    return [s for s in server.query(expr) if float(s["value"][1]) >= count]


def wait_for(what: str, server: Prometheus, found: Callable[[], list[Any]]) -> list[Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = found()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} not seen in {DEADLINE_S} s: {server.tail()}"
        time.sleep(0.5)


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    variables = {"$__rate_interval": "5s", "$metric": ".*", "$segment": ".*", "$variant": ".*"}
    for name, value in variables.items():
        exprs = [expr.replace(name, value) for expr in exprs]
    assert exprs and not any("$" in expr for expr in exprs)
    return exprs


def dashboard_variables() -> list[tuple[str, str]]:
    """(series selector, label) of every `label_values(SELECTOR, LABEL)` variable."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable
        found.append((match.group(1), match.group(2)))
    assert [label for _, label in found] == ["metric", "segment", "variant"]
    return found


def test_real_prometheus_fires_the_shipped_alerts(tmp_path: Path) -> None:
    require_tool("prometheus")  # before the replicas start
    with contextlib.ExitStack() as stack:
        replicas = [start_monitor(tmp_path, name) for name in ("a", "b")]
        for process, _, _ in replicas:
            stack.callback(stop_group, process)
        live_ports = [port for _, _, port in replicas]
        feeder = Feeder([source for _, source, _ in replicas])
        nightly = tmp_path / FILE_NAME  # written once Prometheus tells the time
        file_port = stack.enter_context(serving_file(nightly))
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(short_rules(tmp_path))],
                    "scrape_configs": [
                        {
                            "job_name": "retrieval_live",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{port}" for port in live_ports]}
                            ],
                        },
                        {
                            "job_name": "node",
                            "static_configs": [{"targets": [f"127.0.0.1:{file_port}"]}],
                        },
                    ],
                }
            ),
            encoding="utf-8",
        )
        server = stack.enter_context(running_prometheus(config, tmp_path))
        nightly_file(nightly, server_time(server))
        feeder.thread.start()
        stack.callback(feeder.thread.join)
        stack.callback(feeder.stop.set)

        baseline = "metric_segment_variant:retrieval_live_metric_ratio:baseline1d"
        dropped = ", ".join(f'{name}="{value}"' for name, value in DROPPED.items())
        wait_for(
            f"the baseline recorded {BASELINE_EVALUATIONS} times",
            server,
            lambda: at_least(
                server, f"count_over_time({baseline}{{{dropped}}}[1m])", BASELINE_EVALUATIONS
            ),
        )
        # Two replicas' series, one mean per series over both: (1 + 1/2) / 2.
        mrr = 'metric="mrr", segment="factual"'
        assert len(server.query(f"retrieval_live_metric_ratio_count{{{mrr}}}")) == 2 * 2
        means = server.query(f"metric_segment_variant:retrieval_live_metric_ratio:mean5m{{{mrr}}}")
        assert len(means) == 2  # one per variant
        for sample in means:
            assert float(sample["value"][1]) == pytest.approx((1 + 1 / 2) / 2, abs=0.02)
        assert alerts(server, "RetrievalLiveMetricDrop", "firing") == []

        feeder.dropped.set()
        firing = wait_for(
            "RetrievalLiveMetricDrop firing",
            server,
            lambda: alerts(server, "RetrievalLiveMetricDrop", "firing"),
        )
        assert [{name: alert["labels"][name] for name in DROPPED} for alert in firing] == [DROPPED]
        assert firing[0]["labels"]["severity"] == "warning"
        assert (
            float(firing[0]["value"])
            < float(
                server.query(
                    f'{baseline}{{metric="mrr", segment="multi_hop", variant="candidate"}}'
                )[0]["value"][1]
            )
            - 0.05
        )
        assert "Live mrr on segment multi_hop, variant candidate" in " ".join(
            firing[0]["annotations"]["summary"].split()
        )

        failing = wait_for(
            "RetrievalNightlyMetricFailing firing",
            server,
            lambda: alerts(server, "RetrievalNightlyMetricFailing", "firing"),
        )
        assert [(a["labels"]["segment"], a["labels"]["metric"]) for a in failing] == [
            ("multi_hop", "mrr")
        ]
        wait_for(
            "RetrievalNightlyStale firing",
            server,
            lambda: alerts(server, "RetrievalNightlyStale", "firing"),
        )

        # Every dashboard query is valid PromQL and has data here, and so has every variable.
        for expr in dashboard_queries():
            assert server.query(expr), f"no data for the dashboard query {expr!r}"
        for selector, label in dashboard_variables():
            values = server.api(f"label/{label}/values", **{"match[]": selector})
            assert values, f"no values for the dashboard variable {label}"
