"""A window mean that is not a number breaches its threshold in the live monitor, in words,
instead of passing (`NaN < threshold` is false) and entering the baseline (issue 27). Grades are
bounded now, so the scorer cannot give NaN; the scorer is made to here, as a fault would."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from unittest import mock

from retrieval_pipeline.live.events import Alert
from retrieval_pipeline.live.monitor import LiveMonitor
from retrieval_pipeline.live.rules import MonitorConfig, Rule
from retrieval_pipeline.records import parse_record
from retrieval_pipeline.reference import EvaluationResult, RetrievalMetricsEvaluator

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def nan_result(self: RetrievalMetricsEvaluator, example: object) -> EvaluationResult:
    return EvaluationResult(True, math.nan, {"mrr": math.nan}, "", [], True)


def test_a_nan_window_mean_alerts_in_words() -> None:
    config = MonitorConfig(
        metrics=("mrr",),
        window_records=20,
        rules=(Rule("mrr", "multi_hop", threshold=0.5),),
        consecutive=1,
        min_labels=20,
    )
    monitor = LiveMonitor(config)
    records = [
        parse_record(
            {
                "trace_id": f"t{n}",
                "query_id": f"q{n}",
                "timestamp": (T0 + timedelta(seconds=n)).isoformat(),
                "retrieved_ids": ["d1"],
                "relevant_ids": ["d1"],
                "segment": "multi_hop",
            }
        )
        for n in range(20)
    ]
    with mock.patch.object(RetrievalMetricsEvaluator, "evaluate", nan_result):
        events = [event for record in records for event in monitor.observe(record)]
    alerts = [event for event in events if isinstance(event, Alert)]
    assert [alert.reason for alert in alerts] == [
        "multi_hop: mrr is not a number (NaN; threshold 0.50) for 1 consecutive windows "
        "(>= 20 labels each)"
    ]
    assert math.isnan(alerts[0].value)
