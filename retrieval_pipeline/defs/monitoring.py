"""Live monitoring: a sensor scores sampled traces as they arrive in the trace store, records each
closed window in the warehouse and on the `live_retrieval_metrics` asset, and evaluates the
`live_sustained_drop` check, which fails while a sustained drop is open.

Thin wiring over `retrieval_pipeline.monitoring`. The sensor reports runless events
(`SensorResult(asset_events=...)`): a materialization per closed window, whose numeric metadata
the UI plots over time, and an evaluation of the check after each window. It launches no run, so
monitoring costs no run slot and never queues behind the nightly. Its cursor (JSON) holds the
per-file offsets and the monitor's state; the cursor advances only once the window rows are in
the warehouse, and when the DuckDB file is locked (a nightly run is writing) the tick is skipped
with a message and the same traces are read again on the next tick.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import dagster as dg
import duckdb
from pydantic import Field

from retrieval_pipeline import monitoring
from retrieval_pipeline.defs.nightly.assets import POOL
from retrieval_pipeline.defs.resources import TraceStoreResource, WarehouseResource
from retrieval_pipeline.store import TraceStoreError

INTERVAL_ENV = "RETRIEVAL_PIPELINE_LIVE_INTERVAL"
DEFAULT_INTERVAL_SECONDS = 300
GROUP = "live_monitoring"
LIVE_ASSET_KEY = dg.AssetKey("live_retrieval_metrics")
CHECK_NAME = "live_sustained_drop"
_LOGGED_BAD_RECORDS = 20

live_retrieval_metrics = dg.AssetSpec(
    LIVE_ASSET_KEY,
    description=(
        "Retrieval quality on sampled live traces, one materialization per closed window "
        "(reported by the live sensor): mean per metric overall and per segment, coverage, "
        "sampled and labelled counts. Rows in the warehouse tables live_window_metrics and "
        "live_alerts."
    ),
    kinds={"duckdb"},
    group_name=GROUP,
)


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
    thresholds: dict[str, float] = Field(default_factory=lambda: {monitoring.COVERAGE: 0.3})
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

    def monitor_config(self) -> monitoring.MonitorConfig:
        return monitoring.MonitorConfig(
            metrics=tuple(self.metrics),
            sample_rate=self.sample_rate,
            window_seconds=self.window_seconds,
            lateness_seconds=self.lateness_seconds,
            rules=monitoring.rules_from_assignments(self.thresholds, self.margins),
            consecutive=self.consecutive,
            min_labels=self.min_labels,
            baseline_windows=self.baseline_windows,
            gain=self.gain,
            relevance_level=self.relevance_level,
        )


@dg.asset_check(
    asset=LIVE_ASSET_KEY,
    name=CHECK_NAME,
    blocking=False,
    pool=POOL,
    description="Fails while a live alert (a sustained drop of a metric or of coverage on a "
    "segment) is open. The live sensor evaluates it after every window; run on its own it "
    "reads the open alerts from the warehouse.",
)
def live_sustained_drop(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    """Fails while the warehouse holds a live alert that no recovery closed."""
    with warehouse.get_connection() as conn:
        rows = monitoring.open_alert_reasons(conn)
    passed, description = monitoring.drop_verdict([reason for _, _, reason in rows])
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=description,
        metadata={"open_alerts": len(rows)},
    )


def _open_warehouse(database: str) -> duckdb.DuckDBPyConnection:
    """One connection attempt, no retries: a tick must not wait ~100 s on a locked file (the
    resource's back-off) when skipping it costs nothing."""
    if database != ":memory:":
        # a missing folder fails like a lock: create it first
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return duckdb.connect(database)


def _window_metadata(
    window: monitoring.WindowSummary, open_alerts: int
) -> dict[str, dg.MetadataValue]:
    """Counts as ints and means as floats, so the UI plots each over the windows."""
    as_int, as_float = dg.MetadataValue.int, dg.MetadataValue.float
    metadata: dict[str, dg.MetadataValue] = {
        "window_index": as_int(window.index),
        "window_start": dg.MetadataValue.text(window.start.isoformat()),
        "window_end": dg.MetadataValue.text(window.end.isoformat()),
        "records": as_int(window.records),
        "sampled": as_int(window.sampled),
        "labelled": as_int(window.labelled),
        "late": as_int(window.late),
        "open_alerts": as_int(open_alerts),
    }
    # A mean without labels is left out rather than shown as 0: the plot has a gap there.
    for segment, stats in window.segments.items():
        prefix = "" if segment == monitoring.OVERALL else f"{segment}/"
        if prefix:
            metadata[f"{prefix}labelled"] = as_int(stats.labelled)
        if stats.coverage is not None:
            metadata[f"{prefix}{monitoring.COVERAGE}"] = as_float(stats.coverage)
        for metric, value in stats.means.items():
            if value is not None:
                metadata[f"{prefix}{metric}"] = as_float(value)
    return metadata


def _asset_events(
    events: Sequence[monitoring.Event], already_open: Sequence[monitoring.Alert]
) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """A materialization and a check evaluation per closed window, in order; the evaluation sees
    the alerts as they stand once that window has been judged."""
    open_now = {(a.segment, a.metric): a.reason for a in already_open}
    grouped: list[tuple[monitoring.WindowSummary, list[monitoring.Event]]] = []
    for event in events:
        if isinstance(event, monitoring.WindowSummary):
            grouped.append((event, []))
        else:
            grouped[-1][1].append(event)
    out: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    for window, judged in grouped:
        for event in judged:
            if isinstance(event, monitoring.Alert):
                open_now[(event.segment, event.metric)] = event.reason
            elif isinstance(event, monitoring.Recovery):
                open_now.pop((event.segment, event.metric), None)
        out.append(
            dg.AssetMaterialization(
                asset_key=LIVE_ASSET_KEY,
                description=monitoring.window_line(window),
                metadata=_window_metadata(window, len(open_now)),
            )
        )
        passed, description = monitoring.drop_verdict(list(open_now.values()))
        changes = [
            event.reason
            for event in judged
            if isinstance(event, monitoring.Alert | monitoring.Recovery)
        ]
        out.append(
            dg.AssetCheckEvaluation(
                asset_key=LIVE_ASSET_KEY,
                check_name=CHECK_NAME,
                passed=passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=description,
                metadata={
                    "open_alerts": len(open_now),
                    "window_index": window.index,
                    "window_end": window.end.isoformat(),
                    "changes_this_window": "\n".join(changes) or "none",
                },
            )
        )
    return out


def live_monitor_tick(
    context: dg.SensorEvaluationContext,
    trace_store: TraceStoreResource,
    warehouse: WarehouseResource,
    live_monitor: LiveMonitorResource,
) -> dg.SensorResult | dg.SkipReason:
    """One tick: read what arrived, score the sample, record closed windows, report events."""
    config = live_monitor.monitor_config()
    cursor = (
        monitoring.StoreCursor.from_json(context.cursor)
        if context.cursor
        else monitoring.StoreCursor()
    )
    try:
        step = monitoring.advance(
            trace_store.get_store(),
            cursor,
            config,
            limit=live_monitor.max_records_per_tick,
            backfill_days=live_monitor.backfill_days,
        )
    except (TraceStoreError, OSError) as exc:
        return dg.SkipReason(f"cannot read the trace store ({exc}); the cursor is unchanged")
    for problem in step.problems:
        context.log.warning(problem)
    for line in step.bad[:_LOGGED_BAD_RECORDS]:
        context.log.warning(f"bad record {line}")
    if len(step.bad) > _LOGGED_BAD_RECORDS:
        context.log.warning(f"... and {len(step.bad) - _LOGGED_BAD_RECORDS} more bad records")

    new_cursor = step.cursor.to_json()
    if not step.lines:
        # File progress may still move (a day started, a damaged file noted), never records.
        message = "no new traces since the last tick"
        if context.cursor == new_cursor:
            return dg.SkipReason(message)
        return dg.SensorResult(skip_reason=message, cursor=new_cursor)

    if step.events:
        database = warehouse.database
        try:
            conn = _open_warehouse(database)
        except duckdb.IOException as exc:
            locked = "lock" in str(exc).lower()
            why = "is locked by another process (a nightly run?)" if locked else "cannot be opened"
            return dg.SkipReason(
                f"the warehouse {database} {why}; nothing recorded and the cursor is unchanged, "
                f"so the next tick reads these {step.lines} traces again ({exc})"
            )
        try:
            monitoring.record_events(conn, step.events, config.metrics)
        finally:
            conn.close()

    windows = [e for e in step.events if isinstance(e, monitoring.WindowSummary)]
    alerts = [e for e in step.events if isinstance(e, monitoring.Alert)]
    recoveries = [e for e in step.events if isinstance(e, monitoring.Recovery)]
    for alert in alerts:
        context.log.error(f"live alert: {alert.reason}")
    for recovery in recoveries:
        context.log.info(f"live recovery: {recovery.reason}")
    summary = (
        f"read {step.lines} new lines: {step.lines - len(step.bad)} records, "
        f"{len(step.bad)} bad; closed {len(windows)} window(s); {len(alerts)} alert(s) fired, "
        f"{len(recoveries)} recovered, {len(step.open_after)} open"
    )
    return dg.SensorResult(
        skip_reason=summary,
        cursor=new_cursor,
        asset_events=_asset_events(step.events, step.open_before),
    )


def _interval_from_env() -> int:
    text = os.environ.get(INTERVAL_ENV) or str(DEFAULT_INTERVAL_SECONDS)
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ValueError(f"{INTERVAL_ENV} must be a whole number of seconds >= 1, got {text!r}")
    return seconds


def build_live_monitoring_sensor(
    name: str = "live_retrieval_monitor",
    minimum_interval_seconds: int | None = None,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """The live sensor, ticking at most every `minimum_interval_seconds` (default:
    $RETRIEVAL_PIPELINE_LIVE_INTERVAL, else 300). Needs the resources `trace_store`,
    `warehouse` and `live_monitor`."""
    interval = minimum_interval_seconds or _interval_from_env()

    @dg.sensor(
        name=name,
        minimum_interval_seconds=interval,
        default_status=default_status,
        description=(
            "Scores sampled traces arriving in the trace store, records each closed window in "
            "the warehouse and on live_retrieval_metrics, and evaluates live_sustained_drop."
        ),
    )
    def _live_sensor(
        context: dg.SensorEvaluationContext,
        trace_store: TraceStoreResource,
        warehouse: WarehouseResource,
        live_monitor: LiveMonitorResource,
    ) -> dg.SensorResult | dg.SkipReason:
        return live_monitor_tick(context, trace_store, warehouse, live_monitor)

    return _live_sensor


live_monitoring_sensor = build_live_monitoring_sensor()
