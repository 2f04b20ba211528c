"""Trace stores beyond a local folder: the same layout in an object store (`s3://bucket/prefix`),
and a day's traces as a Delta Lake table's partition.

`open_store(root)` picks the store for a root: an `s3://` URL is an `ObjectTraceStore`; a root
whose `traces/` holds a Delta table (`traces/_delta_log/`), local or in an object store, is a
`DeltaTraceStore`; anything else the local folder store (`store.LocalTraceStore`). The layout is
the local store's: `traces/date=YYYY-MM-DD/*.jsonl|*.jsonl.gz|*.parquet` (or the Delta table at
`traces/`, partitioned by `date`), `corpus/*.parquet|*.csv`, `judgments/`.

Files are streamed from the object store, not copied, except the corpus snapshot: its loader
keeps a snapshot that has not changed (it compares the file's size and times), so the newest
object is copied once into a local cache named by its URL, size and modification time, and
copied again only when one of them changes. A day's traces from an object store or a Delta
table are not local files, so live monitoring (which tails files as they grow) reads a local
store only.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from retrieval_pipeline.ingest.delta import delta_days, read_delta_day
from retrieval_pipeline.ingest.filesystems import (
    Location,
    S3Settings,
    StoreError,
    is_url,
    open_stream,
    resolve,
    store_errors,
)
from retrieval_pipeline.store import (
    CORPUS_SUFFIXES,
    TRACE_SUFFIXES,
    DayBatches,
    LocalTraceStore,
    MissingDayError,
    TraceStore,
    TraceStoreError,
    is_hidden,
)

_DAY = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "retrieval-pipeline-store-cache"


def open_store(root: str | Path, settings: S3Settings | None = None) -> TraceStore:
    """The trace store at `root` (module docstring)."""
    if is_url(root):
        objects = ObjectTraceStore(str(root), settings)
        return DeltaTraceStore(objects, settings) if objects.holds_delta_table() else objects
    local = LocalTraceStore(root)
    if (local.root / "traces" / "_delta_log").is_dir():
        return DeltaTraceStore(local, settings)
    return local


class ObjectTraceStore:
    """The local store's layout under an `s3://bucket/prefix` URL; the day's files are handed
    out as URLs (`day_source`) and read as streams."""

    def __init__(
        self, root: str, settings: S3Settings | None = None, cache: Path = DEFAULT_CACHE
    ) -> None:
        self.url = root.rstrip("/")
        self.settings = settings
        self.cache = cache
        try:
            self._root = resolve(self.url, settings)
        except StoreError as exc:
            raise TraceStoreError(str(exc)) from exc

    def describe(self) -> str:
        return f"object store trace store at {self.url}"

    def at(self, *parts: str) -> Location:
        path = "/".join([self._root.path.rstrip("/"), *parts])
        return self._root.child(path)

    def _entries(self, location: Location, recursive: bool) -> list[pafs.FileInfo]:
        """What is under `location` (nothing when it does not exist)."""
        selector = pafs.FileSelector(location.path, recursive=recursive, allow_not_found=True)
        try:
            with store_errors(location.url, location.endpoint):
                return list(location.filesystem.get_file_info(selector))
        except StoreError as exc:
            raise TraceStoreError(str(exc)) from exc

    def holds_delta_table(self) -> bool:
        log = self.at("traces", "_delta_log")
        return any(self._entries(log, recursive=False))

    def days(self) -> list[date]:
        found = []
        for entry in self._entries(self.at("traces"), recursive=False):
            match = _DAY.match(entry.base_name)
            if match and entry.type == pafs.FileType.Directory:
                found.append(date.fromisoformat(match.group(1)))
        return sorted(found)

    def trace_files(self, day: date) -> list[Path]:
        raise TraceStoreError(
            f"{self.url}: an object store's day is read as a stream (day_source), not as local "
            "files; live monitoring reads a local store only"
        )

    def day_source(self, day: date) -> list[str]:
        """The day's trace files as URLs, in name order (the day's folder only, as locally)."""
        folder = self.at("traces", f"date={day.isoformat()}")
        entries = self._entries(folder, recursive=False)
        if not entries:
            raise MissingDayError(f"no traces for {day.isoformat()} under {folder.url}")
        names = sorted(
            e.base_name
            for e in entries
            if e.type == pafs.FileType.File
            and not is_hidden(e.base_name)
            and e.base_name.lower().endswith(TRACE_SUFFIXES)
        )
        return [f"{folder.url}/{name}" for name in names]

    def corpus_file(self) -> Path | None:
        """The newest corpus snapshot, copied into the local cache (module docstring)."""
        folder = self.at("corpus")
        files = [
            e
            for e in self._entries(folder, recursive=False)
            if e.type == pafs.FileType.File
            and not is_hidden(e.base_name)
            and e.base_name.lower().endswith(CORPUS_SUFFIXES)
        ]
        if not files:
            return None
        newest = max(files, key=lambda e: (e.mtime_ns or 0, e.base_name))
        return self._cached(folder.child(newest.path), newest)

    def _cached(self, location: Location, info: pafs.FileInfo) -> Path:
        key = f"{location.url}|{info.size}|{info.mtime_ns}".encode()
        folder = self.cache / hashlib.sha256(key).hexdigest()[:24]
        target = folder / location.name
        if target.is_file():
            return target
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{location.name}.partial"
        try:
            with open_stream(location) as source, partial.open("wb") as out:
                shutil.copyfileobj(source, out)
        except StoreError as exc:
            raise TraceStoreError(str(exc)) from exc
        partial.replace(target)
        return target

    def judgment_sources(self) -> list[str]:
        folder = self.at("judgments")
        return [folder.url] if self._entries(folder, recursive=False) else []


class DeltaTraceStore:
    """A store whose `traces/` is a Delta Lake table partitioned by `date`: a day is the
    table's partition, read as record batches; corpus and judgments as in `base`."""

    def __init__(
        self,
        base: LocalTraceStore | ObjectTraceStore,
        settings: S3Settings | None = None,
        partition_column: str = "date",
    ) -> None:
        self.base = base
        self.settings = settings
        self.partition_column = partition_column
        if isinstance(base, ObjectTraceStore):
            self.table = f"{base.url}/traces"
        else:
            self.table = str(base.root / "traces")

    def describe(self) -> str:
        return f"Delta Lake table {self.table} (partitioned by {self.partition_column})"

    def days(self) -> list[date]:
        try:
            return delta_days(self.table, self.partition_column, self.settings)
        except (StoreError, ValueError) as exc:
            raise TraceStoreError(str(exc)) from exc

    def trace_files(self, day: date) -> list[Path]:
        raise TraceStoreError(
            f"{self.table}: a Delta table's day is read as record batches (day_source), not "
            "as files; live monitoring reads a local store only"
        )

    def day_source(self, day: date) -> DayBatches:
        if day not in self.days():
            raise MissingDayError(
                f"no traces for {day.isoformat()} in {self.table} "
                f"(no partition {self.partition_column}={day.isoformat()})"
            )

        def batches() -> Iterator[pa.RecordBatch]:
            return read_delta_day(self.table, day, self.partition_column, self.settings)

        where = f"{self.table} partition {self.partition_column}={day.isoformat()}"
        return DayBatches(where, batches)

    def corpus_file(self) -> Path | None:
        return self.base.corpus_file()

    def judgment_sources(self) -> list[Path] | list[str]:
        return self.base.judgment_sources()
