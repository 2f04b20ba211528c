"""Traces and monitors for the live tests: window means built from reciprocal ranks chosen by hand
(a relevant document at rank r scores 1/r), so each expected mean is visible arithmetic."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from retrieval_pipeline.live.events import Alert, Event, Recovery, WindowSummary
from retrieval_pipeline.live.monitor import LiveMonitor
from retrieval_pipeline.live.rules import SAMPLE_KEY, MonitorConfig, Rule
from retrieval_pipeline.records import TraceRecord, parse_record

T0 = datetime(2026, 3, 2, tzinfo=UTC)
DOCS = ["d1", "d2", "d3", "d4", "d5"]
_counter = iter(range(10**9))


def trace_fields(
    n: int,
    at: datetime,
    rank: int | None,
    segment: str = "multi_hop",
    judged: bool = True,
    trace_id: str | None = None,
) -> dict[str, Any]:
    """Trace `n` (trace_id `t<n>` unless given, query `q<n>`) served `at`, whose reciprocal rank
    is 1/rank (rank None: relevant document not retrieved, RR 0; judged False: no labels at all,
    so unannotated)."""
    fields: dict[str, Any] = {
        "trace_id": trace_id or f"t{n}",
        "query_id": f"q{n}",
        "timestamp": at.isoformat(),
        "retrieved_ids": DOCS,
    }
    if judged:
        fields["relevant_ids"] = [f"d{rank}" if rank is not None else "not-retrieved"]
    return fields | {"segment": segment}


def trace(
    rank: int | None,
    segment: str = "multi_hop",
    at: datetime | None = None,
    judged: bool = True,
    trace_id: str | None = None,
) -> TraceRecord:
    """`trace_fields` of the next trace, parsed; at T0 + n seconds unless `at` is given."""
    n = next(_counter)
    return parse_record(
        trace_fields(n, at or T0 + timedelta(seconds=n), rank, segment, judged, trace_id)
    )


def window_of(ranks: Sequence[int | None], segment: str = "multi_hop") -> list[TraceRecord]:
    return [trace(rank, segment) for rank in ranks]


def uniform(rank: int | None, n: int = 20, segment: str = "multi_hop") -> list[TraceRecord]:
    return window_of([rank] * n, segment)


def unlabelled(n: int, segment: str = "multi_hop") -> list[TraceRecord]:
    return [trace(None, segment, judged=False) for _ in range(n)]


def feed(monitor: LiveMonitor, records: Iterable[TraceRecord]) -> list[Event]:
    events: list[Event] = []
    for record in records:
        events.extend(monitor.observe(record))
    return events


def alerts(events: Iterable[Event]) -> list[Alert]:
    return [e for e in events if isinstance(e, Alert)]


def recoveries(events: Iterable[Event]) -> list[Recovery]:
    return [e for e in events if isinstance(e, Recovery)]


def windows(events: Iterable[Event]) -> list[WindowSummary]:
    return [e for e in events if isinstance(e, WindowSummary)]


def config(**overrides: Any) -> MonitorConfig:
    """20 sampled traces a window, mrr only, every trace sampled, M = 3, N = 20."""
    options: dict[str, Any] = {
        "metrics": ("mrr",),
        "window_records": 20,
        "rules": (Rule("mrr", "multi_hop", threshold=0.5),),
        "consecutive": 3,
        "min_labels": 20,
    }
    return MonitorConfig(**(options | overrides))


def independent_point(trace_id: str) -> float:
    """The sampling hash computed here from its definition, not by the module."""
    digest = hashlib.blake2b(trace_id.encode(), digest_size=8, key=SAMPLE_KEY).digest()
    return int.from_bytes(digest, "big") / 2**64
