"""The live tables' rows, built from events: plain values that `warehouse.live` binds to
`sql/stg_live_window_metrics.sql` and `sql/stg_live_alerts.sql`. Pure: nothing here runs SQL."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from retrieval_pipeline.live.events import Alert, Event, Recovery, WindowSummary
from retrieval_pipeline.live.rules import COVERAGE


def window_rows(window: WindowSummary, metrics: Sequence[str]) -> dict[str, Any]:
    """The bound parameters of `sql/stg_live_window_metrics.sql` for one window: one row per
    segment and metric (coverage included), as parallel lists."""
    rows: dict[str, list[Any]] = {
        key: [] for key in ("segment", "metric", "value", "records", "sampled", "labelled")
    }
    for segment, stats in window.segments.items():
        for metric in (*metrics, COVERAGE):
            value = stats.coverage if metric == COVERAGE else stats.means.get(metric)
            rows["segment"].append(segment)
            rows["metric"].append(metric)
            rows["value"].append(value)
            rows["records"].append(stats.records)
            rows["sampled"].append(stats.sampled)
            rows["labelled"].append(stats.labelled)
    return {
        "window_index": window.index,
        "window_start": window.start,
        "window_end": window.end,
        "late": window.late,
        "partial": window.partial,
        **{f"{key}_list": values for key, values in rows.items()},
    }


def alert_rows(events: Iterable[Alert | Recovery]) -> dict[str, list[Any]]:
    """The bound parameters of `sql/stg_live_alerts.sql`: one row per alert or recovery."""
    rows: dict[str, list[Any]] = {
        key: []
        for key in (
            "event",
            "segment",
            "metric",
            "window_index",
            "window_start",
            "window_end",
            "value",
            "threshold",
            "baseline",
            "margin",
            "alert_window_start",
            "reason",
        )
    }
    for event in events:
        alert = event if isinstance(event, Alert) else event.alert
        row = {
            "event": "alert" if isinstance(event, Alert) else "recovery",
            "segment": event.segment,
            "metric": event.metric,
            "window_index": event.window_index,
            "window_start": event.window_start,
            "window_end": event.window_end,
            "value": event.value,
            "threshold": event.threshold,
            "baseline": event.baseline,
            "margin": event.margin,
            "alert_window_start": alert.window_start,
            "reason": event.reason,
        }
        for key, value in row.items():
            rows[key].append(value)
    return {f"{key}_list": values for key, values in rows.items()}


def event_rows(
    events: Sequence[Event], metrics: Sequence[str]
) -> tuple[list[dict[str, Any]], dict[str, list[Any]] | None]:
    """The rows `warehouse.live.record_events` writes for `events`: each closed window's, in
    order, and the alerts' and recoveries' (None when there are none)."""
    windows = [window_rows(e, metrics) for e in events if isinstance(e, WindowSummary)]
    alerts = [e for e in events if isinstance(e, Alert | Recovery)]
    return windows, alert_rows(alerts) if alerts else None
