"""The live sensor: scores sampled traces as they arrive in the trace store, records each closed
window in the warehouse and on the `live_retrieval_metrics` asset, and evaluates the
`live_sustained_drop` check, which fails while a sustained drop is open.

Thin wiring over `retrieval_pipeline.live`. The sensor reports runless events
(`SensorResult(asset_events=...)`): a materialization per closed window, whose numeric metadata
the UI plots over time, and an evaluation of the check after each window. It launches no run, so
monitoring costs no run slot and never queues behind the nightly. Its cursor (JSON) holds the
per-file offsets and the monitor's state; the cursor advances only once the window rows are in
the warehouse, and when the DuckDB file is locked (a nightly run is writing) the tick is skipped
with a message and the same traces are read again on the next tick.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
import duckdb

from retrieval_pipeline import environment
from retrieval_pipeline.defs.live.assets import CHECK_NAME, LIVE_ASSET_KEY
from retrieval_pipeline.defs.live.resources import LiveMonitorResource
from retrieval_pipeline.defs.resources import TraceStoreResource, WarehouseResource
from retrieval_pipeline.live.advance import advance
from retrieval_pipeline.live.events import (
    Alert,
    Event,
    Recovery,
    WindowSummary,
    drop_verdict,
    window_line,
)
from retrieval_pipeline.live.rows import event_rows
from retrieval_pipeline.live.rules import COVERAGE
from retrieval_pipeline.live.tailing import StoreCursor
from retrieval_pipeline.records import TraceRecord
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.store import TraceStoreError
from retrieval_pipeline.warehouse.live import open_warehouse, record_events

INTERVAL_ENV = "RETRIEVAL_PIPELINE_LIVE_INTERVAL"
DEFAULT_INTERVAL_SECONDS = 300
_LOGGED_BAD_RECORDS = 20


def _window_metadata(window: WindowSummary, open_alerts: int) -> dict[str, dg.MetadataValue]:
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
        prefix = "" if segment == OVERALL_SEGMENT else f"{segment}/"
        if prefix:
            metadata[f"{prefix}labelled"] = as_int(stats.labelled)
        if stats.coverage is not None:
            metadata[f"{prefix}{COVERAGE}"] = as_float(stats.coverage)
        for metric, value in stats.means.items():
            if value is not None:
                metadata[f"{prefix}{metric}"] = as_float(value)
    return metadata


def _asset_events(
    events: Sequence[Event], already_open: Sequence[Alert]
) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """A materialization and a check evaluation per closed window, in order; the evaluation sees
    the alerts as they stand once that window has been judged."""
    open_now = {(a.segment, a.metric): a.reason for a in already_open}
    grouped: list[tuple[WindowSummary, list[Event]]] = []
    for event in events:
        if isinstance(event, WindowSummary):
            grouped.append((event, []))
        else:
            grouped[-1][1].append(event)
    out: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    for window, judged in grouped:
        for event in judged:
            if isinstance(event, Alert):
                open_now[(event.segment, event.metric)] = event.reason
            elif isinstance(event, Recovery):
                open_now.pop((event.segment, event.metric), None)
        out.append(
            dg.AssetMaterialization(
                asset_key=LIVE_ASSET_KEY,
                description=window_line(window),
                metadata=_window_metadata(window, len(open_now)),
            )
        )
        passed, description = drop_verdict(list(open_now.values()))
        changes = [event.reason for event in judged if isinstance(event, Alert | Recovery)]
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
    cursor = StoreCursor.from_json(context.cursor) if context.cursor else StoreCursor()
    # the traces scored, counted for Prometheus only once this tick's cursor is kept
    scored: list[tuple[TraceRecord, bool, dict[str, float] | None]] = []
    try:
        step = advance(
            trace_store.get_store(),
            cursor,
            config,
            limit=live_monitor.max_records_per_tick,
            backfill_days=live_monitor.backfill_days,
            on_trace=lambda *trace: scored.append(trace),
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
            conn = open_warehouse(database)
        except duckdb.IOException as exc:
            locked = "lock" in str(exc).lower()
            why = "is locked by another process (a nightly run?)" if locked else "cannot be opened"
            return dg.SkipReason(
                f"the warehouse {database} {why}; nothing recorded and the cursor is unchanged, "
                f"so the next tick reads these {step.lines} traces again ({exc})"
            )
        try:
            record_events(conn, *event_rows(step.events, config.metrics))
        finally:
            conn.close()

    live_monitor.count_tick(context.cursor, scored)
    windows = [e for e in step.events if isinstance(e, WindowSummary)]
    alerts = [e for e in step.events if isinstance(e, Alert)]
    recoveries = [e for e in step.events if isinstance(e, Recovery)]
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
    return environment.live_interval_seconds()


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


# Off by default ($RETRIEVAL_PIPELINE_LIVE_SENSOR=1 or the UI's toggle starts it): it is for a
# store that receives traces during the day, and every tick takes the warehouse's one writer lock,
# so on a store written once a night it would only skip ticks behind the nightly run.
live_monitoring_sensor = build_live_monitoring_sensor(
    default_status=dg.DefaultSensorStatus.RUNNING
    if environment.live_sensor_running()
    else dg.DefaultSensorStatus.STOPPED
)
