"""Daily partitions (UTC) and the date range a run covers.

The first partition is, in order: $RETRIEVAL_PIPELINE_START_DATE, the configuration's
`start_date`, the trace store's earliest day, or yesterday (UTC) when the store holds no day yet;
so the UI counts the days there are, not the days since an arbitrary date. A Phoenix project lists
no days (its spans are queried a day at a time), so with a Phoenix store the first partition is
PHOENIX_DAYS days ago unless a start date is given.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from types import TracebackType

import dagster as dg

from retrieval_pipeline import environment
from retrieval_pipeline.config import load_config
from retrieval_pipeline.defs.resources import DEFAULT_STORE
from retrieval_pipeline.ingest.filesystems import is_url
from retrieval_pipeline.store import LocalTraceStore, TraceStoreError

START_DATE_ENV = environment.START_DATE
# With a Phoenix store and no start date: the last 30 days (UTC) before today are partitions.
PHOENIX_DAYS = 30


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
    if environment.phoenix_endpoint() and environment.phoenix_project():
        first = today - timedelta(days=PHOENIX_DAYS)
        return first.isoformat(), f"{PHOENIX_DAYS} days before today (a Phoenix store)"
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
