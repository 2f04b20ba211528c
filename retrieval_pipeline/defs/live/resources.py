"""The `live_monitor` resource: what the live sensor samples, how it windows, and what counts as
a sustained drop."""

from __future__ import annotations

from typing import Literal

import dagster as dg
from pydantic import Field

from retrieval_pipeline.live.rules import COVERAGE, MonitorConfig, rules_from_assignments


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
