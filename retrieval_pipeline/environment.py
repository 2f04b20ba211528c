"""The pipeline's environment variables, each read and validated in one place; pure.

Every variable has a reader that parses its text, checks its bounds and, on a bad value, raises
`EnvironmentValueError` naming the variable and the value (`RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT
='garbage': must be a size such as 512MB or 4GB ...`), so that a typo stops the command or the
Dagster definitions at load time in words, instead of a traceback, or a silent "no limit" (DuckDB
reads a memory limit of `-1GB` as none), later. An empty or blank value counts as unset (the
default), as it always has. Each reader takes the environment as an argument (default
`os.environ`), so tests pass a dict.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path

CONFIG = "RETRIEVAL_PIPELINE_CONFIG"
DB = "RETRIEVAL_PIPELINE_DB"
STORE = "RETRIEVAL_PIPELINE_STORE"
REPORTS = "RETRIEVAL_PIPELINE_REPORTS"
APPROVALS = "RETRIEVAL_PIPELINE_APPROVALS"
STORE_RETRIEVED_IDS = "RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS"
START_DATE = "RETRIEVAL_PIPELINE_START_DATE"
LIVE_INTERVAL = "RETRIEVAL_PIPELINE_LIVE_INTERVAL"
# Whether the nightly schedule (default yes) and the live sensor (default no) start running.
SCHEDULE = "RETRIEVAL_PIPELINE_SCHEDULE"
LIVE_SENSOR = "RETRIEVAL_PIPELINE_LIVE_SENSOR"
DUCKDB_MEMORY_LIMIT = "RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT"
DUCKDB_THREADS = "RETRIEVAL_PIPELINE_DUCKDB_THREADS"
VALIDATION_WORKERS = "RETRIEVAL_PIPELINE_VALIDATION_WORKERS"
MAX_LINE_BYTES = "RETRIEVAL_PIPELINE_MAX_LINE_BYTES"
PHOENIX_ENDPOINT = "RETRIEVAL_PIPELINE_PHOENIX_ENDPOINT"
PHOENIX_PROJECT = "RETRIEVAL_PIPELINE_PHOENIX_PROJECT"
# The folder of the nightly Prometheus textfile (reports.prometheus.metrics_path reads it).
METRICS_DIR = "RETRIEVAL_PIPELINE_METRICS_DIR"

DEFAULT_MEMORY_LIMIT = "512MB"
DEFAULT_LIVE_INTERVAL_SECONDS = 300

# A memory limit below this is a typo (1KB for 1GB): DuckDB cannot even open the warehouse in a
# few kilobytes, and fails later with "Out of Memory" naming no setting. 8MB was seen to run.
MIN_MEMORY_BYTES = 8 * 1000**2
# Partition start dates: Dagster's daily partitions overflow computing the day after 9999-12-31;
# a start outside these centuries is a typo, not a day traces were served.
EARLIEST_START_DATE, LATEST_START_DATE = date(1900, 1, 1), date(2999, 12, 31)
# The longest JSON line read (`ingest.lines`): far above real traces (10,000 ids are about
# 150 KB), and small enough that DuckDB validates such a line within its default memory limit
# (a line of 16 MiB alone in its piece peaked at 425 MB at 512MB; one of 30 MiB ran out of it).
DEFAULT_MAX_LINE_BYTES = 16 * 2**20
MIN_MAX_LINE_BYTES, MAX_MAX_LINE_BYTES = 2**10, 2**30
# The live sensor's interval, in seconds: at least one, at most a day.
MAX_LIVE_INTERVAL_SECONDS = 86_400

_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
# What DuckDB's memory_limit accepts, narrowed: a plain decimal number, then a unit or a percent
# of the machine's memory (DuckDB also takes `-1` and words such as `terabyte`; not here).
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+|%)")
_SIZE_WORDS = (
    "must be a size such as 512MB or 4GB: a number and a unit (B, KB, MB, GB, TB, KiB, MiB, "
    "GiB, TiB) or a percent of the machine's memory (1% to 100%)"
)
_YES, _NO = ("1", "true", "yes"), ("0", "false", "no")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class EnvironmentValueError(ValueError):
    """An environment variable whose value cannot be used; the message names both."""

    def __init__(self, name: str, value: str, problem: str) -> None:
        super().__init__(f"{name}={value!r}: {problem}")
        self.name = name
        self.value = value


def _text(name: str, environ: Mapping[str, str] | None) -> str | None:
    """The variable's value, stripped; None when unset, empty or blank."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def memory_limit(
    environ: Mapping[str, str] | None = None, default: str = DEFAULT_MEMORY_LIMIT
) -> str:
    """DuckDB's memory_limit for the warehouse and `evaluate` as given:
    $RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT (e.g. `4GB`, `2GiB`, `50%`), else `default` (the
    limit chosen with the threads, `resources_budget`, when it is empty)."""
    text = _text(DUCKDB_MEMORY_LIMIT, environ)
    if text is None:
        return default
    match = _SIZE.fullmatch(text)
    if match is None:
        raise EnvironmentValueError(DUCKDB_MEMORY_LIMIT, text, _SIZE_WORDS)
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        if not 1 <= number <= 100:
            raise EnvironmentValueError(DUCKDB_MEMORY_LIMIT, text, _SIZE_WORDS)
        return text
    if unit not in _UNITS:
        raise EnvironmentValueError(DUCKDB_MEMORY_LIMIT, text, _SIZE_WORDS)
    if number * _UNITS[unit] < MIN_MEMORY_BYTES:
        raise EnvironmentValueError(
            DUCKDB_MEMORY_LIMIT, text, "must be at least 8MB (DuckDB cannot run in less)"
        )
    return text


def memory_limit_bytes(limit: str) -> int | None:
    """The bytes of a memory limit `memory_limit` returned; None for a percent."""
    match = _SIZE.fullmatch(limit)
    if match is None or match.group(2) == "%":
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def max_line_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The longest JSON line read, in bytes: $RETRIEVAL_PIPELINE_MAX_LINE_BYTES (a size, e.g.
    `64MiB`), else 32 MiB; a longer line is quarantined with its size."""
    text = _text(MAX_LINE_BYTES, environ)
    if text is None:
        return DEFAULT_MAX_LINE_BYTES
    match = _SIZE.fullmatch(text)
    words = "must be a size from 1KiB to 1GiB, such as 32MiB or 64MB"
    if match is None or match.group(2).lower() not in _UNITS:
        raise EnvironmentValueError(MAX_LINE_BYTES, text, words)
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if not MIN_MAX_LINE_BYTES <= size <= MAX_MAX_LINE_BYTES:
        raise EnvironmentValueError(MAX_LINE_BYTES, text, words)
    return size


def _yes_no(name: str, default: bool, environ: Mapping[str, str] | None) -> bool:
    text = _text(name, environ)
    if text is None:
        return default
    if text.lower() in _YES:
        return True
    if text.lower() in _NO:
        return False
    raise EnvironmentValueError(name, text, "must be 1, true, yes, 0, false or no")


def store_retrieved_ids(environ: Mapping[str, str] | None = None) -> bool:
    """$RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS as a yes or no (unset: yes)."""
    return _yes_no(STORE_RETRIEVED_IDS, True, environ)


def schedule_running(environ: Mapping[str, str] | None = None) -> bool:
    """$RETRIEVAL_PIPELINE_SCHEDULE as a yes or no (unset: yes): the nightly schedule's default
    status. A toggle in the Dagster UI is stored in the instance and overrides it."""
    return _yes_no(SCHEDULE, True, environ)


def live_sensor_running(environ: Mapping[str, str] | None = None) -> bool:
    """$RETRIEVAL_PIPELINE_LIVE_SENSOR as a yes or no (unset: no): the live sensor's default
    status (docs/operations.md says why it is off)."""
    return _yes_no(LIVE_SENSOR, False, environ)


def start_date(environ: Mapping[str, str] | None = None) -> date | None:
    """The first daily partition as given: $RETRIEVAL_PIPELINE_START_DATE (YYYY-MM-DD); None when
    unset (the configuration's, else the store's earliest day: `defs.partitions`)."""
    text = _text(START_DATE, environ)
    if text is None:
        return None
    words = (
        f"must be a date YYYY-MM-DD from {EARLIEST_START_DATE.isoformat()} to "
        f"{LATEST_START_DATE.isoformat()}"
    )
    try:
        day = date.fromisoformat(text) if _DATE.fullmatch(text) else None
    except ValueError:  # 2026-02-30
        day = None
    if day is None or not EARLIEST_START_DATE <= day <= LATEST_START_DATE:
        raise EnvironmentValueError(START_DATE, text, words)
    return day


def live_interval_seconds(environ: Mapping[str, str] | None = None) -> int:
    """The live sensor's minimum interval: $RETRIEVAL_PIPELINE_LIVE_INTERVAL, else 300 s."""
    text = _text(LIVE_INTERVAL, environ)
    if text is None:
        return DEFAULT_LIVE_INTERVAL_SECONDS
    words = f"must be a whole number of seconds from 1 to {MAX_LIVE_INTERVAL_SECONDS}"
    if not re.fullmatch(r"[0-9]+", text):
        raise EnvironmentValueError(LIVE_INTERVAL, text, words)
    seconds = int(text)
    if not 1 <= seconds <= MAX_LIVE_INTERVAL_SECONDS:
        raise EnvironmentValueError(LIVE_INTERVAL, text, words)
    return seconds


def path(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """A path variable ($RETRIEVAL_PIPELINE_DB, _STORE, _CONFIG, _REPORTS, _APPROVALS); None when
    unset. A NUL byte cannot be part of a path."""
    if name not in (CONFIG, DB, STORE, REPORTS, APPROVALS):
        raise ValueError(f"{name} is not a path variable of the pipeline")
    if _text(name, environ) is None:
        return None
    text = (os.environ if environ is None else environ)[name]  # as given: spaces may be meant
    if "\x00" in text:
        raise EnvironmentValueError(name, text, "must be a path, and a path holds no NUL byte")
    return Path(text)


def phoenix_endpoint(environ: Mapping[str, str] | None = None) -> str | None:
    """The Phoenix server that serves as the trace store: $RETRIEVAL_PIPELINE_PHOENIX_ENDPOINT, an
    http(s) URL; None when unset (the store is a folder)."""
    text = _text(PHOENIX_ENDPOINT, environ)
    if text is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise EnvironmentValueError(
            PHOENIX_ENDPOINT, text, "must be an http(s) URL such as http://127.0.0.1:6006"
        )
    return text


def phoenix_project(environ: Mapping[str, str] | None = None) -> str | None:
    """The Phoenix project whose spans are the traces: $RETRIEVAL_PIPELINE_PHOENIX_PROJECT; None
    when unset."""
    return _text(PHOENIX_PROJECT, environ)


# More DuckDB threads than this is a typo: no machine the pipeline runs on has that many cores.
MAX_DUCKDB_THREADS = 4096


def duckdb_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """DuckDB's threads as given: $RETRIEVAL_PIPELINE_DUCKDB_THREADS, a whole number from 1; None
    when unset (chosen with the memory limit, `resources_budget`)."""
    return _whole_number(DUCKDB_THREADS, "threads", MAX_DUCKDB_THREADS, environ)


def _whole_number(
    name: str, unit: str, highest: int, environ: Mapping[str, str] | None
) -> int | None:
    """Variable `name` as a whole number of `unit` from 1 to `highest`; None when unset."""
    text = _text(name, environ)
    if text is None:
        return None
    if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) <= highest:
        raise EnvironmentValueError(
            name, text, f"must be a whole number of {unit} from 1 to {highest}"
        )
    return int(text)


# More validation workers than this holds more pieces in memory than any gain pays for.
MAX_VALIDATION_WORKERS = 64


def validation_workers(environ: Mapping[str, str] | None = None) -> int | None:
    """The pieces an ingestion validates at once as given: $RETRIEVAL_PIPELINE_VALIDATION_WORKERS,
    a whole number from 1; None when unset (chosen from DuckDB's threads,
    `resources_budget.validation_workers`)."""
    return _whole_number(VALIDATION_WORKERS, "pieces", MAX_VALIDATION_WORKERS, environ)
