"""Daily partitions (UTC) and the date range a run covers.

The first partition is, in order: $RETRIEVAL_PIPELINE_START_DATE, the configuration's
`start_date`, the trace store's earliest day, or yesterday (UTC) when the store holds no day yet;
so the UI counts the days there are, not the days since an arbitrary date. A Phoenix project lists
no days (its spans are queried a day at a time), so with a Phoenix store the first partition is
PHOENIX_DAYS days ago unless a start date is given.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg

from retrieval_pipeline import environment
from retrieval_pipeline.config import load_config
from retrieval_pipeline.defs.resources import DEFAULT_STORE
from retrieval_pipeline.ingest.filesystems import is_url
from retrieval_pipeline.store import LocalTraceStore, TraceStoreError

START_DATE_ENV = environment.START_DATE
# With a Phoenix store and no start date: the last 30 days (UTC) before today are partitions.
PHOENIX_DAYS = 30


def start_date() -> str:
    """The first partition, YYYY-MM-DD (see the module's docstring); a bad variable or key is
    an error naming it."""
    given = environment.start_date()
    if given is not None:
        return given.isoformat()
    configured = load_config().start_date
    if configured is not None:
        return configured.isoformat()
    today = datetime.now(UTC).date()
    if environment.phoenix_endpoint() and environment.phoenix_project():
        return (today - timedelta(days=PHOENIX_DAYS)).isoformat()
    root = environment.path(environment.STORE) or DEFAULT_STORE
    days: list[date] = []
    if not is_url(str(root)):  # an object store is not listed when the definitions load
        try:
            days = LocalTraceStore(root).days()
        except (TraceStoreError, OSError):
            days = []
    if days:
        return days[0].isoformat()
    return (today - timedelta(days=1)).isoformat()


daily_partitions = dg.DailyPartitionsDefinition(start_date=start_date(), timezone="UTC")


def partition_days(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext,
) -> tuple[date, date]:
    """First and last day (inclusive) of the run's partition or partition range."""
    window = context.partition_time_window
    return window.start.date(), (window.end - timedelta(days=1)).date()
