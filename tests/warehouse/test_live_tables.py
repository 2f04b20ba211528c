"""The live monitor's warehouse tables (`retrieval_pipeline.warehouse.live`): recorded windows and
alerts, written again without duplicates, and the open alerts the check reads."""

from __future__ import annotations

import duckdb

from retrieval_pipeline.live.monitor import LiveMonitor
from retrieval_pipeline.live.rows import event_rows
from retrieval_pipeline.warehouse.live import open_alert_reasons, record_events
from tests.live.traces import alerts, config, feed, uniform


def test_recorded_windows_and_alerts_are_idempotent_and_open_alerts_close() -> None:
    monitor = LiveMonitor(config(consecutive=1))
    opened = feed(monitor, uniform(1) + uniform(4))
    closed = feed(monitor, uniform(1))
    conn = duckdb.connect()
    record_events(conn, *event_rows(opened, ("mrr",)))
    record_events(conn, *event_rows(opened, ("mrr",)))  # a replayed tick adds nothing
    rows = conn.execute(
        "select window_index, segment, metric, value, sampled, labelled from live_window_metrics"
        " order by all"
    ).fetchall()
    assert rows == [
        (1, "__all__", "coverage", 1.0, 20, 20),
        (1, "__all__", "mrr", 1.0, 20, 20),
        (1, "multi_hop", "coverage", 1.0, 20, 20),
        (1, "multi_hop", "mrr", 1.0, 20, 20),
        (2, "__all__", "coverage", 1.0, 20, 20),
        (2, "__all__", "mrr", 0.25, 20, 20),
        (2, "multi_hop", "coverage", 1.0, 20, 20),
        (2, "multi_hop", "mrr", 0.25, 20, 20),
    ]
    (alert,) = alerts(opened)
    assert open_alert_reasons(conn) == [("multi_hop", "mrr", alert.reason)]
    record_events(conn, *event_rows(closed, ("mrr",)))
    assert open_alert_reasons(conn) == []
    events = conn.execute("select event from live_alerts order by window_index").fetchall()
    assert events == [("alert",), ("recovery",)]
