"""The live sensor's `/metrics`: with `metrics_port` set, the resource serves the counters of
every trace its ticks scored, counted once even when a tick is read again, and the port can come
from $RETRIEVAL_PIPELINE_LIVE_METRICS_PORT."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from retrieval_pipeline.defs.live.resources import (
    METRICS_PORT_ENV,
    metrics_port_from_env,
    served_live_metrics,
    stop_serving_live_metrics,
)
from retrieval_pipeline.live.rules import SAMPLE_KEY
from tests.defs.test_live_sensor import RATE, day_streams, resources, tick, write_all
from tests.processes import default_signals


@pytest.fixture(autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    stop_serving_live_metrics()


def scraped(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def expected_mrr() -> tuple[int, float]:
    """Sampled traces and their reciprocal ranks, from the stream itself: (count, sum)."""
    count, total = 0, 0.0
    for _, _, lines in day_streams():
        for line in lines:
            if "broken" in line:
                continue
            record = json.loads(line)
            digest = hashlib.blake2b(record["trace_id"].encode(), digest_size=8, key=SAMPLE_KEY)
            if int.from_bytes(digest.digest(), "big") < RATE * 2**64:
                count += 1
                total += 1 / int(record["relevant_ids"][0].removeprefix("d"))
    return count, total


def test_the_sensor_serves_what_its_ticks_scored(tmp_path: Path) -> None:
    write_all(tmp_path)
    res = resources(tmp_path, metrics_port=0)
    first = tick(None, res)
    tick(None, res)  # the same tick again (the cursor was lost): counted once
    assert first.cursor is not None
    got = scraped(served_port())
    count, total = expected_mrr()
    counts = [
        v
        for (name, labels), v in got.items()
        if name == "retrieval_live_metric_ratio_count" and ("metric", "mrr") in labels
    ]
    sums = [
        v
        for (name, labels), v in got.items()
        if name == "retrieval_live_metric_ratio_sum" and ("metric", "mrr") in labels
    ]
    assert sum(counts) == count
    assert sum(sums) == pytest.approx(total)
    segments = {
        dict(labels)["segment"]
        for (name, labels), _ in got.items()
        if name == "retrieval_live_traces_total"
    }
    assert segments == {"multi_hop", "single"}


def served_port() -> int:
    from retrieval_pipeline.defs.live import resources as module

    (metrics_server,) = [server for _, server in module._SERVED.values()]
    assert metrics_server.port is not None
    return metrics_server.port


def test_the_port_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(METRICS_PORT_ENV, raising=False)
    assert metrics_port_from_env() is None
    monkeypatch.setenv(METRICS_PORT_ENV, "9464")
    assert metrics_port_from_env() == 9464
    monkeypatch.setenv(METRICS_PORT_ENV, "http")
    with pytest.raises(ValueError, match=f"{METRICS_PORT_ENV} must be a port number"):
        metrics_port_from_env()


def test_one_server_per_port_and_process() -> None:
    assert served_live_metrics(0) is served_live_metrics(0)
    assert scraped(served_port())  # serving


def test_definitions_load_without_serving() -> None:
    """Loading the definitions starts no server: the counters start with the first tick."""
    script = (
        "from retrieval_pipeline.defs import defs\n"
        "from retrieval_pipeline.defs.live import resources\n"
        "print(len(resources._SERVED))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, METRICS_PORT_ENV: "0"},
        preexec_fn=default_signals,
    )
    assert done.stdout.strip().splitlines()[-1] == "0"
