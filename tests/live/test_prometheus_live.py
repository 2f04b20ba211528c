"""The live counters: sums and counts per metric, segment and variant, what `/metrics` serves
(and promtool's lint of it), the bound on label values, and a server that starts and stops."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from retrieval_pipeline.cli import main
from retrieval_pipeline.live.prometheus import OTHER, LiveMetrics, MetricsServer
from tests.processes import default_signals
from tests.prometheus_server import check_metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (f"retrieval_live_{name}", tuple(sorted(labels.items())))


def fed() -> LiveMetrics:
    live = LiveMetrics()
    live.observe("factual", "control", True, {"mrr": 1.0, "precision@5": 0.4})
    live.observe("factual", "control", True, {"mrr": 0.5, "precision@5": 0.2})
    live.observe("factual", "control", True, None)  # sampled, no labels
    live.observe("factual", "control", False, None)  # outside the sample
    live.observe("multi_hop", "candidate", True, {"mrr": 1 / 3, "precision@5": 0.0})
    return live


def test_sums_and_counts_per_metric_segment_and_variant() -> None:
    got = samples(fed().exposition())
    factual = {"segment": "factual", "variant": "control"}
    assert got[key("metric_ratio_sum", metric="mrr", **factual)] == 1.0 + 0.5
    assert got[key("metric_ratio_count", metric="mrr", **factual)] == 2
    assert got[key("metric_ratio_sum", metric="precision@5", **factual)] == pytest.approx(0.4 + 0.2)
    multi = {"segment": "multi_hop", "variant": "candidate"}
    assert got[key("metric_ratio_sum", metric="mrr", **multi)] == pytest.approx(1 / 3)
    assert got[key("metric_ratio_count", metric="mrr", **multi)] == 1
    assert got[key("traces_total", **factual)] == 4
    assert got[key("sampled_traces_total", **factual)] == 3
    assert got[key("labelled_traces_total", **factual)] == 2
    assert got[key("labelled_traces_total", **multi)] == 1
    assert got[key("label_overflow_total")] == 0


def test_no_pooled_row_and_no_per_trace_label() -> None:
    text = fed().exposition()
    labels = {
        name
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        for name in sample.labels
    }
    assert labels == {"metric", "segment", "variant"}
    assert "__all__" not in text
    # The mean over every segment is the ratio of the summed counters: (1 + 0.5 + 1/3) / 3.
    got = samples(text)
    sums = [
        v for (name, lab), v in got.items() if name.endswith("_sum") and ("metric", "mrr") in lab
    ]
    counts = [
        v for (name, lab), v in got.items() if name.endswith("_count") and ("metric", "mrr") in lab
    ]
    assert sum(sums) / sum(counts) == pytest.approx((1 + 0.5 + 1 / 3) / 3)


def test_label_values_are_bounded() -> None:
    live = LiveMetrics(max_segments=2, max_variants=1)
    for segment in ("a", "b", "c", "d"):
        live.observe(segment, "control", True, {"mrr": 1.0})
    live.observe("a", "candidate", True, {"mrr": 0.0})
    got = samples(live.exposition())
    assert got[key("traces_total", segment="a", variant="control")] == 1
    assert got[key("traces_total", segment="b", variant="control")] == 1
    assert got[key("traces_total", segment=OTHER, variant="control")] == 2  # c and d
    assert got[key("traces_total", segment="a", variant=OTHER)] == 1
    assert got[key("label_overflow_total")] == 3


@pytest.mark.parametrize("value", [float("nan"), 1.5, -0.1, True, "0.5"])
def test_a_value_outside_the_scale_is_refused_and_nothing_counted(value: object) -> None:
    live = LiveMetrics()
    with pytest.raises(ValueError, match=r"^mrr: value .* is not a number in \[0, 1\]$"):
        live.observe("a", "control", True, {"mrr": value})  # type: ignore[dict-item]
    assert key("traces_total", segment="a", variant="control") not in samples(live.exposition())


def test_scores_outside_the_sample_are_refused() -> None:
    with pytest.raises(ValueError, match="outside the sample"):
        LiveMetrics().observe("a", "control", False, {"mrr": 1.0})


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return response.read().decode("utf-8")


def test_the_server_serves_metrics_and_stops() -> None:
    live = fed()
    server = MetricsServer(live.registry, port=0)
    with pytest.raises(ValueError, match="not started"):
        _ = server.url
    with server:
        assert server.host == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        first = samples(fetch(server.url))
        live.observe("factual", "control", True, {"mrr": 0.25, "precision@5": 0.2})
        second = samples(fetch(server.url))
        mrr = key("metric_ratio_sum", metric="mrr", segment="factual", variant="control")
        assert (first[mrr], second[mrr]) == (1.5, 1.75)
        assert server.port is not None
        with pytest.raises(OSError, match=f"cannot serve /metrics on 127.0.0.1:{server.port}"):
            MetricsServer(live.registry, port=server.port).start()
        url = server.url
    with pytest.raises(urllib.error.URLError):
        fetch(url)


def test_a_port_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"metrics port must be in 0\.\.65535, got 70000"):
        MetricsServer(LiveMetrics().registry, port=70000)


def test_promtool_accepts_what_metrics_serves() -> None:
    with MetricsServer(fed().registry, port=0) as server:
        check_metrics(fetch(server.url))


def test_the_monitor_command_loads_prometheus_client_only_to_serve() -> None:
    script = (
        "import sys\n"
        "from retrieval_pipeline.cli import main\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=default_signals,
    )
    assert done.stdout.strip() == "False"


def test_a_busy_metrics_port_is_one_line_before_any_work(tmp_path: Path) -> None:
    source = tmp_path / "traces.jsonl"
    source.write_text("", encoding="utf-8")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(
            main, ["monitor", "--follow", str(source), "--once", "--metrics-port", str(port)]
        )
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"Error: cannot serve /metrics on 127.0.0.1:{port}: Address already in use"
    ]
