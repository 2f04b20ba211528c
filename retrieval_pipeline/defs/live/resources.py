"""The `live_monitor` resource: what the live sensor samples, how it windows, and what counts as
a sustained drop."""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import dagster as dg
from pydantic import Field

from retrieval_pipeline.live.rules import COVERAGE, MonitorConfig, rules_from_assignments

if TYPE_CHECKING:
    from retrieval_pipeline.live.prometheus import LiveMetrics, MetricsServer
    from retrieval_pipeline.records import TraceRecord

METRICS_PORT_ENV = "RETRIEVAL_PIPELINE_LIVE_METRICS_PORT"
# The counters and /metrics server of this process, by requested port: a sensor's ticks run in
# the same long-lived code-server process, so the counters add up across ticks.
_SERVED: dict[int, tuple[LiveMetrics, MetricsServer]] = {}
# Digests of the cursors whose ticks were counted (the most recent ones): a tick evaluated again
# from the same cursor (its result was lost) reads the same traces and is not counted twice.
_COUNTED: deque[str] = deque(maxlen=64)
Scored = tuple["TraceRecord", bool, dict[str, float] | None]


def metrics_port_from_env() -> int | None:
    """$RETRIEVAL_PIPELINE_LIVE_METRICS_PORT as a port (0: a free one); None when unset."""
    text = os.environ.get(METRICS_PORT_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise ValueError(f"{METRICS_PORT_ENV} must be a port number 0..65535, got {text!r}")
    return int(text)


def served_live_metrics(port: int) -> LiveMetrics:
    """The process's live counters, served on 127.0.0.1:`port` from the first call on."""
    if port not in _SERVED:
        from retrieval_pipeline.live.prometheus import LiveMetrics, MetricsServer

        metrics = LiveMetrics()
        server = MetricsServer(metrics.registry, port)
        server.start()
        _SERVED[port] = (metrics, server)
    return _SERVED[port][0]


def stop_serving_live_metrics() -> None:
    """Stop every /metrics server this process started (tests, shutdown)."""
    while _SERVED:
        _, (_, server) = _SERVED.popitem()
        server.stop()
    _COUNTED.clear()


class LiveMonitorResource(dg.ConfigurableResource):
    """What the live sensor samples, how it windows, and what counts as a sustained drop.

    `thresholds` and `margins` are keyed `[SEGMENT:]METRIC` (no segment: every segment and the
    overall row `__all__`; metric `coverage` for the share of sampled traces with labels). By
    default each metric alerts when it stays more than 0.1 below its trailing baseline, and
    coverage when it stays below 0.3 (the nightly's default `min_coverage`)."""

    metrics: list[str] = Field(default_factory=lambda: ["mrr", "precision@5"])
    sample_rate: float = 1.0
    window_seconds: int = 300
    lateness_seconds: int = 60
    thresholds: dict[str, float] = Field(default_factory=lambda: {COVERAGE: 0.3})
    margins: dict[str, float] = Field(default_factory=lambda: {"mrr": 0.1, "precision@5": 0.1})
    consecutive: int = 3
    min_labels: int = 20
    baseline_windows: int = 6
    gain: Literal["exponential", "linear"] = "exponential"
    relevance_level: float = 1.0
    # On the first tick (no cursor) watching starts this many days before the store's latest.
    backfill_days: int = 0
    # Keeps one tick well inside the sensor's time limit; the rest is read on the next ticks.
    max_records_per_tick: int = 50_000
    # Serve Prometheus counters of the scored traces on 127.0.0.1:PORT/metrics (None: do not;
    # default $RETRIEVAL_PIPELINE_LIVE_METRICS_PORT); needs the prometheus extra.
    metrics_port: int | None = Field(default_factory=metrics_port_from_env)

    def live_metrics(self) -> LiveMetrics | None:
        """The served counters, or None when `metrics_port` is unset."""
        return None if self.metrics_port is None else served_live_metrics(self.metrics_port)

    def count_tick(self, cursor: str | None, scored: Sequence[Scored]) -> None:
        """Add a kept tick's scored traces to the served counters (nothing when `metrics_port`
        is unset), once per starting cursor."""
        metrics = self.live_metrics()
        if metrics is None:
            return
        digest = hashlib.blake2b((cursor or "").encode("utf-8"), digest_size=16).hexdigest()
        if digest in _COUNTED:
            return
        _COUNTED.append(digest)
        for record, in_sample, scores in scored:
            metrics.observe_trace(record, in_sample, scores)

    def monitor_config(self) -> MonitorConfig:
        return MonitorConfig(
            metrics=tuple(self.metrics),
            sample_rate=self.sample_rate,
            window_seconds=self.window_seconds,
            lateness_seconds=self.lateness_seconds,
            rules=rules_from_assignments(self.thresholds, self.margins),
            consecutive=self.consecutive,
            min_labels=self.min_labels,
            baseline_windows=self.baseline_windows,
            gain=self.gain,
            relevance_level=self.relevance_level,
        )
