"""Where traces come from: a narrow trace-store interface and its local-directory default.

Knows nothing of Dagster. The pipeline asks a store for three things only: the days it holds, the
trace files of one day, and the current corpus snapshot; and, where the store has them, its
judgments (`judgment_sources`). Another store (object storage, a database, an observability
export) plugs in by implementing `TraceStore`; one whose day is not local files also implements
`day_source(day)`, returning URLs or record batches (`DaySource`): `ingest.stores` holds the
object-store and Delta Lake stores. No asset changes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

# As `evaluate` reads them (ingest.files: JSONL_SUFFIXES + PARQUET_SUFFIXES, held equal by a
# test), in any case: `x.ndjson` and `UPPER.JSONL` are trace files too; `.json`: OTLP/JSON span
# exports, which ingestion tells from other files by their content.
TRACE_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".parquet", ".json", ".json.gz")
CLICK_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".parquet")
CORPUS_SUFFIXES = (".parquet", ".csv")


def is_hidden(name: str) -> bool:
    """A file or folder name starting with `.` or `_` (a partial upload, Spark's `_SUCCESS` and
    `_temporary/`, Delta's `_delta_log/`) holds no data: every store's listing leaves it out."""
    return name.startswith((".", "_"))


_DAY_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")


class TraceStoreError(ValueError):
    """The store cannot serve what was asked; the message names the path."""


class MissingDayError(TraceStoreError, FileNotFoundError):
    """The store holds no directory for the requested day."""


@runtime_checkable
class TraceStore(Protocol):
    """What the pipeline needs from a trace store."""

    def days(self) -> list[date]:
        """Days the store holds traces for, oldest first."""
        ...

    def trace_files(self, day: date) -> list[Path]:
        """The day's trace files (JSON lines, gzipped JSON lines, Parquet), in name order.

        An existing but empty day gives []; a day the store does not hold raises
        `MissingDayError`."""
        ...

    def corpus_file(self) -> Path | None:
        """The current corpus snapshot (Parquet or CSV), or None when the store has none."""
        ...

    def describe(self) -> str:
        """Where the store is, for logs and metadata."""
        ...


@runtime_checkable
class ClickLogStore(Protocol):
    """A store that also holds click logs (impression records, docs/click-labels.md), which the
    optional `click_labels` asset reads; a `TraceStore` need not be one."""

    def click_files(self, day: date) -> list[Path]:
        """The day's impression files, in name order; [] for a day without click logs."""
        ...


def _has_suffix(path: Path, suffixes: tuple[str, ...]) -> bool:
    return path.name.lower().endswith(suffixes)


def _unreadable(what: Path, exc: OSError) -> TraceStoreError:
    return TraceStoreError(f"cannot read {what}: {exc.strerror or exc}")


class LocalTraceStore:
    """A folder: `traces/date=YYYY-MM-DD/*.jsonl|*.jsonl.gz|*.parquet|*.json|*.json.gz`,
    `corpus/*.parquet|*.csv`, and optionally click logs in `clicks/date=YYYY-MM-DD/` (JSON lines
    or Parquet).

    Nothing outside `root` is ever read: a relative part with `..`, an absolute part, or a symlink
    that resolves outside the root is refused. Hidden names (`.name`, `_name`: `is_hidden`) and
    files with other suffixes are ignored, and so are subdirectories of a day.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().absolute()
        # folders under traces/ named like days that are not days (`date=2026-13-45`), with why
        # they are ignored, as of the last `days()`
        self.ignored: list[str] = []

    def describe(self) -> str:
        return f"local trace store at {self.root}"

    def _real_root(self) -> Path:
        if not self.root.is_dir():
            raise TraceStoreError(f"trace store root {self.root} does not exist or is not a folder")
        return self.root.resolve()

    def path(self, *parts: str) -> Path:
        """`root/parts...`, refusing any part that would leave the root."""
        for part in parts:
            pieces = Path(part).parts
            if Path(part).is_absolute() or ".." in pieces or not pieces:
                raise TraceStoreError(
                    f"refusing path {part!r} in trace store {self.root}: "
                    "only plain relative names inside the store are allowed"
                )
        candidate = self.root.joinpath(*parts)
        self._check_inside(candidate)
        return candidate

    def _check_inside(self, candidate: Path) -> None:
        real_root = self._real_root()
        if candidate.exists() or candidate.is_symlink():
            try:
                resolved = candidate.resolve(strict=True)
            except (OSError, RuntimeError) as exc:  # a symlink loop, a link to nothing
                words = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise TraceStoreError(
                    f"refusing {candidate}: it cannot be resolved ({words})"
                ) from None
            if not resolved.is_relative_to(real_root):
                raise TraceStoreError(
                    f"refusing {candidate}: it resolves to {resolved}, outside the trace store "
                    f"root {real_root}"
                )

    def _listing(self, folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
        found: list[Path] = []
        try:
            entries = sorted(folder.iterdir())
        except OSError as exc:  # a folder that cannot be listed (permissions, I/O)
            raise _unreadable(folder, exc) from None
        for entry in entries:
            if is_hidden(entry.name) or not _has_suffix(entry, suffixes):
                continue
            try:
                entry.name.encode("utf-8")
            except UnicodeEncodeError:
                name = os.fsencode(entry.name)
                raise TraceStoreError(
                    f"{folder}: the file name {name!r} is not UTF-8, so it cannot be recorded "
                    "with its records; rename it"
                ) from None
            self._check_inside(entry)
            if entry.is_file():
                found.append(entry)
        return found

    def day_dir(self, day: date) -> Path:
        return self.path("traces", f"date={day.isoformat()}")

    def days(self) -> list[date]:
        traces = self.path("traces")
        if not traces.is_dir():
            return []
        found: list[date] = []
        self.ignored = []
        try:
            entries = sorted(traces.iterdir())
        except OSError as exc:
            raise _unreadable(traces, exc) from None
        for entry in entries:
            match = _DAY_DIR.match(entry.name)
            if match and entry.is_dir():
                self._check_inside(entry)
                try:
                    found.append(date.fromisoformat(match.group(1)))
                except ValueError as exc:  # date=2026-13-45
                    self.ignored.append(f"ignoring {entry}: {match.group(1)} is not a date ({exc})")
        return found

    def trace_files(self, day: date) -> list[Path]:
        folder = self.day_dir(day)
        if not folder.is_dir():
            raise MissingDayError(f"no traces for {day.isoformat()} under {folder}")
        return self._listing(folder, TRACE_SUFFIXES)

    def click_files(self, day: date) -> list[Path]:
        folder = self.path("clicks", f"date={day.isoformat()}")
        return self._listing(folder, CLICK_SUFFIXES) if folder.is_dir() else []

    def corpus_file(self) -> Path | None:
        folder = self.path("corpus")
        if not folder.is_dir():
            return None
        files = self._listing(folder, CORPUS_SUFFIXES)
        if not files:
            return None
        # newest snapshot wins; the name breaks ties (snapshots are usually named by date)
        return max(files, key=lambda path: (path.stat().st_mtime_ns, path.name))

    def judgment_sources(self) -> list[Path]:
        """The store's `judgments/` folder (issue 23), or nothing when it has none."""
        folder = self.path("judgments")
        return [folder] if folder.is_dir() else []


@dataclass(frozen=True)
class DayBatches:
    """A day's traces as Arrow record batches, from a table format (a Delta Lake table's day
    partition, `ingest.stores`) rather than from files; read when `batches()` is called."""

    description: str
    batches: Callable[[], Iterator[pa.RecordBatch]]


# What a day's ingestion reads: local files, object-store URLs, or record batches.
DaySource: TypeAlias = Sequence[Path | str] | DayBatches


def day_source(store: TraceStore, day: date) -> DaySource:
    """What the pipeline ingests for `day`: the store's own `day_source(day)` where it has one
    (an object store's URLs, a table's record batches), else its trace files."""
    own = getattr(store, "day_source", None)
    return own(day) if callable(own) else store.trace_files(day)


def judgment_sources(store: TraceStore) -> Sequence[Path | str]:
    """The store's judgments (files, folders or URLs), or none where it keeps none."""
    own = getattr(store, "judgment_sources", None)
    return own() if callable(own) else []
