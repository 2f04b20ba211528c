"""One step of the live monitor over the trace store: read what arrived since a cursor, validate
it, feed the monitor and hand back the events and the cursor to carry forward. Nothing is stored
here: the live sensor records the events in the warehouse, then keeps the cursor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from retrieval_pipeline.live.events import Alert, Event
from retrieval_pipeline.live.monitor import LiveMonitor, TraceListener
from retrieval_pipeline.live.rules import MonitorConfig
from retrieval_pipeline.live.tailing import StoreCursor, read_store_arrivals
from retrieval_pipeline.records import RecordError, TraceRecord, parse_line

if TYPE_CHECKING:
    from retrieval_pipeline.store import TraceStore


@dataclass(frozen=True)
class Advance:
    """One step of the live monitor over the store: what it read and found, and the cursor to
    carry forward once the events are recorded."""

    lines: int  # lines (and Parquet rows) consumed
    bad: list[str]  # `file:line: reason` of those that are not valid records
    events: list[Event]
    problems: list[str]  # files that could not be read (yet)
    open_before: list[Alert]
    open_after: list[Alert]
    cursor: StoreCursor


def advance(
    store: TraceStore,
    cursor: StoreCursor,
    config: MonitorConfig,
    limit: int | None = None,
    backfill_days: int = 0,
    on_trace: TraceListener | None = None,
) -> Advance:
    """Read what arrived since `cursor`, validate it, and feed the valid records to the monitor
    resumed from the cursor's state, oldest trace first. Nothing is stored: the caller records
    the events, then keeps the returned cursor.

    Records are fed in timestamp order (ties in store order) because the store is read file by
    file: several writers' files growing side by side would otherwise have the first file's
    newest trace close windows the next file still has traces for. `on_trace` is told of every
    valid record fed (`LiveMonitor`)."""
    batch = read_store_arrivals(store, cursor, limit, backfill_days)
    live = LiveMonitor(config, cursor.monitor, on_trace=on_trace)
    open_before = live.open_alerts()
    records: list[TraceRecord] = []
    bad: list[str] = []
    for arrival in batch.arrivals:
        try:
            records.append(parse_line(arrival.text))
        except RecordError as exc:
            bad.append(f"{arrival.source}:{arrival.line}: {exc.reason}")
    events: list[Event] = []
    for record in sorted(records, key=lambda r: r.served_at):
        events.extend(live.observe(record))
    return Advance(
        lines=len(batch.arrivals),
        bad=bad,
        events=events,
        problems=batch.problems,
        open_before=open_before,
        open_after=live.open_alerts(),
        cursor=StoreCursor(
            start_day=batch.start_day,
            files=batch.files,
            monitor=live.state(),
            records_read=cursor.records_read + len(batch.arrivals),
            bad_records=cursor.bad_records + len(bad),
        ),
    )
