"""Daily partitions (UTC) and the date range a run covers.

The first partition is, in order: $RETRIEVAL_PIPELINE_START_DATE, the configuration's
`start_date`, the trace store's earliest day, or yesterday (UTC) when the store holds no day yet;
so the UI counts the days there are, not the days since an arbitrary date. With a Phoenix store
it is the day of the project's earliest span (asked of the server when the definitions load,
waiting at most PHOENIX_WAIT_S), else PHOENIX_DAYS days ago when the server cannot say.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta

import dagster as dg

from retrieval_pipeline import environment
from retrieval_pipeline.config import load_config
from retrieval_pipeline.defs.resources import DEFAULT_STORE
from retrieval_pipeline.ingest.filesystems import is_url
from retrieval_pipeline.ingest.phoenix import PhoenixError, PhoenixStore
from retrieval_pipeline.ingest.phoenix_annotations import earliest_day
from retrieval_pipeline.store import LocalTraceStore, TraceStoreError

START_DATE_ENV = environment.START_DATE
# With a Phoenix store that cannot tell its earliest span: the last 30 days (UTC) before today.
PHOENIX_DAYS = 30
PHOENIX_WAIT_S = 10  # how long loading the definitions waits for the Phoenix server
LOG = logging.getLogger(__name__)


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
    endpoint, project = environment.phoenix_endpoint(), environment.phoenix_project()
    if endpoint and project:
        first = phoenix_first_day(PhoenixStore(endpoint, project, timeout_s=PHOENIX_WAIT_S))
        return (first or today - timedelta(days=PHOENIX_DAYS)).isoformat()
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


def phoenix_first_day(store: PhoenixStore) -> date | None:
    """The day of the project's earliest span; None, with a warning, when the server cannot
    say (down, not Phoenix) or the project holds no span yet."""
    import httpx

    try:
        first = earliest_day(store)
    except (PhoenixError, httpx.HTTPError, OSError, ValueError) as exc:
        LOG.warning(
            "retrieval_pipeline: cannot read the first span of %s (%s): the partitions start "
            "%d days ago; set %s to choose",
            store.describe(),
            exc,
            PHOENIX_DAYS,
            START_DATE_ENV,
        )
        return None
    return first


daily_partitions = dg.DailyPartitionsDefinition(start_date=start_date(), timezone="UTC")


def partition_days(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext,
) -> tuple[date, date]:
    """First and last day (inclusive) of the run's partition or partition range."""
    window = context.partition_time_window
    return window.start.date(), (window.end - timedelta(days=1)).date()
