"""Daily partitions (UTC) and the date range a run covers.

The first partition is, in order: $RETRIEVAL_PIPELINE_START_DATE, the configuration's
`start_date`, the trace store's earliest day, or yesterday (UTC) when the store holds no day yet;
so the UI counts the days there are, not the days since an arbitrary date. With a Phoenix store
it is the day of the project's earliest span (asked of the server when the definitions load,
waiting at most PHOENIX_WAIT_S), else PHOENIX_DAYS days ago when the server cannot say.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from types import TracebackType

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


def first_day() -> tuple[str, str]:
    """The first partition, YYYY-MM-DD (see the module's docstring), and where it comes from, in
    words; a bad variable or key is an error naming it."""
    given = environment.start_date()
    if given is not None:
        return given.isoformat(), f"${START_DATE_ENV}"
    configured = load_config().start_date
    if configured is not None:
        return configured.isoformat(), "the configuration's start_date"
    today = datetime.now(UTC).date()
    endpoint, project = environment.phoenix_endpoint(), environment.phoenix_project()
    if endpoint and project:
        first = phoenix_first_day(PhoenixStore(endpoint, project, timeout_s=PHOENIX_WAIT_S))
        if first is not None:
            return first.isoformat(), "the day of the Phoenix project's earliest span"
        earlier = today - timedelta(days=PHOENIX_DAYS)
        return earlier.isoformat(), f"{PHOENIX_DAYS} days before today (a Phoenix store)"
    root = environment.path(environment.STORE) or DEFAULT_STORE
    days: list[date] = []
    if not is_url(str(root)):  # an object store is not listed when the definitions load
        try:
            days = LocalTraceStore(root).days()
        except (TraceStoreError, OSError):
            days = []
    if days:
        return days[0].isoformat(), f"the earliest day in the trace store {root}"
    yesterday = (today - timedelta(days=1)).isoformat()
    return yesterday, f"yesterday: the trace store {root} holds no day"


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


def start_date() -> str:
    """The first partition, YYYY-MM-DD (`first_day`)."""
    return first_day()[0]


FIRST_DAY, FIRST_DAY_SOURCE = first_day()
daily_partitions = dg.DailyPartitionsDefinition(start_date=FIRST_DAY, timezone="UTC")


def partition_days(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext,
) -> tuple[date, date]:
    """First and last day (inclusive) of the run's partition or partition range."""
    window = context.partition_time_window
    return window.start.date(), (window.end - timedelta(days=1)).date()


def outside_days_words(keys: Sequence[str]) -> str | None:
    """One line for the partition keys among `keys` that are not days of this pipeline (before
    its first day, after its last, or not a date), naming the range, where its first day comes
    from, and the variable that moves it; None when every key is a day."""
    first = daily_partitions.get_first_partition_key()
    last = daily_partitions.get_last_partition_key()
    outside = [key for key in keys if not _is_day(key) or not (first or "") <= key <= (last or "")]
    if not outside or first is None or last is None:
        return None
    words = (
        f"{' and '.join(outside)}: not {'a day' if len(outside) == 1 else 'days'} of this "
        f"pipeline, whose days run from {first} ({FIRST_DAY_SOURCE}) to {last}, yesterday (UTC)."
    )
    if any(not _is_day(key) for key in outside):
        words += " A day is written YYYY-MM-DD."
    if any(_is_day(key) and key < first for key in outside):
        words += (
            f" For earlier days, set {START_DATE_ENV}=YYYY-MM-DD (the store must hold their "
            "traces)."
        )
    if any(_is_day(key) and key > last for key in outside):
        words += " A day becomes a partition once it has ended (UTC)."
    return words


def _is_day(key: str) -> bool:
    try:
        return date.fromisoformat(key).isoformat() == key
    except ValueError:
        return False


def _asked_keys(argv: Sequence[str]) -> list[str]:
    """The partition keys of a `dagster asset materialize` command line."""
    keys: list[str] = []
    for i, word in enumerate(argv):
        option, _, value = word.partition("=")
        if option in ("--partition", "--partition-range"):
            value = value or (argv[i + 1] if i + 1 < len(argv) else "")
            keys += value.split("...") if option == "--partition-range" else [value]
    return keys


def tell_outside_days() -> None:
    """Make Dagster's CLI say a partition outside the range in one line instead of a traceback:
    `dagster asset materialize --partition-range` before the first day raises
    DagsterInvalidSubsetError from the CLI itself, before any of this project's code runs, so
    the words are given where Python reports an uncaught error (other errors go on as before)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        words = None
        if isinstance(error, dg.DagsterInvalidSubsetError) and "partition key" in str(error):
            words = outside_days_words(_asked_keys(sys.argv))
        if words is None:
            previous(kind, error, trace)
        else:
            print(f"Error: {words}", file=sys.stderr)

    sys.excepthook = hook
