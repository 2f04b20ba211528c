"""Reading what arrived: new complete lines of growing JSON-lines (and .gz) files, new Parquet
rows, and the trace store read day by day and file by file from a cursor.

Standard library only at start-up: a .gz file imports the gzip reader, and a Parquet file the
`ingest` readers and `warehouse.live`, when one is met. Progress is per file and plain JSON, so
nothing is consumed twice or skipped across restarts; a line is consumed only once its newline is
written.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.live.rules import MonitorConfigError
from retrieval_pipeline.store import TraceStoreError
from retrieval_pipeline.text import json_text

if TYPE_CHECKING:
    from retrieval_pipeline.store import TraceStore

CURSOR_VERSION = 1


@dataclass
class FileProgress:
    """How far a file has been consumed: bytes (decompressed for .gz) or Parquet rows, and the
    lines or rows read (for `file:line` in reports). `seen_size`/`seen_mtime_ns` describe the file
    when a read last reached its end, so an unchanged file is not read again."""

    offset: int = 0
    lines: int = 0
    seen_size: int = -1
    seen_mtime_ns: int = -1
    inode: int = -1  # the file read (-1: not known yet); another one is a rotated file


@dataclass(frozen=True)
class Arrival:
    """One complete line (or Parquet row as JSON) not consumed before, and where it was."""

    source: str
    line: int
    text: bytes


_CHUNK = 8 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"


def _unchanged(stat: os.stat_result, progress: FileProgress) -> bool:
    return (stat.st_size, stat.st_mtime_ns) == (progress.seen_size, progress.seen_mtime_ns)


def _complete_lines(
    data: bytes, start_line: int, limit: int | None, final: bool
) -> tuple[list[tuple[int, bytes]], int, int]:
    """Lines of `data` that end in a newline (and an unterminated last one when `final`), up to
    `limit` non-blank lines: `[(line number, text)]`, bytes consumed, lines consumed (blank
    lines are consumed and numbered but are not records)."""
    out: list[tuple[int, bytes]] = []
    position, number = 0, start_line
    while limit is None or len(out) < limit:
        newline = data.find(b"\n", position)
        if newline >= 0:
            piece, position = data[position:newline], newline + 1
        elif final and position < len(data):
            piece, position = data[position:], len(data)
        else:
            break
        number += 1
        text = piece.removesuffix(b"\r")
        if text.strip():
            out.append((number, text))
    return out, position, number - start_line


def _gunzip(raw: bytes) -> tuple[bytes, bool, str | None]:
    """What a (possibly still growing) gzip file decompresses to so far, member by member:
    the bytes, whether the stream ended cleanly, and a problem if it is corrupt."""
    # Imported here: only .gz files need the inflater, and `monitor` starts on the standard
    # library alone.
    from retrieval_pipeline.ingest.gzip import GzipStream

    stream = GzipStream()
    data = b"".join(stream.inflate(raw))
    return data, stream.ended, stream.error


def _read_from(path: Path, offset: int, limit: int | None) -> tuple[bytes, bool]:
    """Bytes from `offset`: to the end, or (with `limit`) enough chunks to hold `limit` lines.
    Also says whether the end of the file was reached."""
    parts: list[bytes] = []
    newlines = 0
    with path.open("rb") as handle:
        handle.seek(offset)
        while True:
            chunk = handle.read(_CHUNK)
            parts.append(chunk)
            newlines += chunk.count(b"\n")
            if len(chunk) < _CHUNK:
                return b"".join(parts), True
            if limit is not None and newlines >= limit:
                return b"".join(parts), False


def read_new_lines(
    path: Path,
    progress: FileProgress,
    source: str | None = None,
    limit: int | None = None,
    final: bool = False,
    restart: bool = False,
) -> tuple[list[Arrival], FileProgress, str | None]:
    """The complete JSON lines of `path` past `progress`, the new progress, and a problem.

    A last line without its newline is being written and is left for a later read, unless
    `final` says the file is complete (or a `.jsonl.gz` stream ended cleanly). A `.jsonl.gz`
    file is decompressed from its start (a gzip stream cannot be entered mid-way) and the
    `offset` bytes already read are skipped. A file that shrank is reported and not read again:
    the trace store is append-only, and reading it afresh could count records twice.

    With `restart` (a followed log, `monitor --follow`), a file that shrank (truncated) or is
    another file under the same name (rotated: another inode) is read again from its start, and
    the problem says so, once: the progress then describes the new file."""
    name = source or str(path)
    stat = path.stat()
    restarted: str | None = None
    if restart and progress.inode >= 0 and stat.st_ino != progress.inode:
        restarted = f"{name}: replaced by another file (rotated); reading it from its start"
    elif restart and stat.st_size < progress.offset and not path.name.lower().endswith(".gz"):
        restarted = (
            f"{name}: truncated to {stat.st_size} bytes, below the {progress.offset} read; "
            "reading it again from its start"
        )
    if restarted is not None:
        progress = FileProgress()
    elif _unchanged(stat, progress):
        return [], progress, None
    problem: str | None = restarted
    if path.name.lower().endswith(".gz"):
        data, ended, problem = _gunzip(path.read_bytes())
        if problem:
            problem = f"{name}: {problem}"
        if len(data) < progress.offset and restart:
            problem = f"{name}: decompresses to fewer bytes than already read; reading it again"
            progress = FileProgress()
        elif len(data) < progress.offset:
            return [], progress, f"{name}: decompresses to fewer bytes than already read"
        data, at_end, final = data[progress.offset :], True, final or ended
    else:
        if stat.st_size < progress.offset:
            shrank = f"{name}: shrank to {stat.st_size} bytes, below the {progress.offset} read"
            return [], progress, shrank + "; not read again"
        data, at_end = _read_from(path, progress.offset, limit)
    skip = len(_BOM) if progress.offset == 0 and data.startswith(_BOM) else 0
    lines, consumed, n_lines = _complete_lines(data[skip:], progress.lines, limit, final and at_end)
    rest = data[skip + consumed :]
    done = at_end and b"\n" not in rest and not (final and rest)
    new = FileProgress(
        offset=progress.offset + skip + consumed,
        lines=progress.lines + n_lines,
        seen_size=stat.st_size if done else -1,
        seen_mtime_ns=stat.st_mtime_ns if done else -1,
        inode=stat.st_ino,
    )
    return [Arrival(name, number, text) for number, text in lines], new, problem


def read_new_parquet_rows(
    path: Path, progress: FileProgress, source: str | None = None, limit: int | None = None
) -> tuple[list[Arrival], FileProgress, str | None]:
    """Rows of a Parquet file past `progress.offset`, each as the JSON text batch ingestion makes
    of it (`sql/stg_rows_as_json.sql`), so one validator judges both. A file that cannot be read
    yet (still being written, or damaged) is reported and read again once it changes."""
    name = source or str(path)
    stat = path.stat()
    if _unchanged(stat, progress):
        return [], progress, None
    # Imported here: only Parquet needs them, and `monitor` must start without them.
    from retrieval_pipeline.ingest.files import TraceFileError
    from retrieval_pipeline.ingest.parquet import parquet_table
    from retrieval_pipeline.ingest.pieces import numbered_rows
    from retrieval_pipeline.warehouse.live import rows_as_json

    try:
        table = parquet_table(path)
        start = min(progress.offset, table.num_rows)
        stop = table.num_rows if limit is None else min(table.num_rows, start + limit)
        numbered = numbered_rows(table.slice(start, stop - start), name, 0, start + 1)
    except TraceFileError as exc:
        waiting = replace(progress, seen_size=stat.st_size, seen_mtime_ns=stat.st_mtime_ns)
        return [], waiting, f"{exc}; read again when the file changes"
    rows = rows_as_json(numbered)
    done = stop == table.num_rows
    new = FileProgress(
        offset=stop,
        lines=stop,
        seen_size=stat.st_size if done else -1,
        seen_mtime_ns=stat.st_mtime_ns if done else -1,
    )
    return [Arrival(name, line, text.encode("utf-8")) for line, text in rows], new, None


@dataclass
class StoreCursor:
    """What the live sensor carries between ticks: how far each trace file of the store was read,
    the first day it watches, totals, and the monitor's state."""

    start_day: date | None = None
    files: dict[str, FileProgress] = field(default_factory=dict)  # "YYYY-MM-DD/name" -> progress
    monitor: dict[str, Any] | None = None
    records_read: int = 0
    bad_records: int = 0

    def to_json(self) -> str:
        return json_text(
            {
                "version": CURSOR_VERSION,
                "start_day": self.start_day.isoformat() if self.start_day else None,
                "files": {key: asdict(progress) for key, progress in sorted(self.files.items())},
                "monitor": self.monitor,
                "records_read": self.records_read,
                "bad_records": self.bad_records,
            },
            separators=(",", ":"),
            ensure_ascii=True,
        )

    @classmethod
    def from_json(cls, text: str) -> StoreCursor:
        try:
            data = json.loads(text)
        except ValueError:
            raise MonitorConfigError("the live sensor cursor is not JSON; reset it") from None
        version = data.get("version") if isinstance(data, dict) else None
        if version != CURSOR_VERSION:
            raise MonitorConfigError(
                f"the live sensor cursor has version {version!r}, this version reads "
                f"{CURSOR_VERSION}; reset the cursor to start afresh"
            )
        try:
            return cls(
                start_day=date.fromisoformat(data["start_day"]) if data["start_day"] else None,
                files={key: FileProgress(**value) for key, value in data["files"].items()},
                monitor=data["monitor"],
                records_read=data["records_read"],
                bad_records=data["bad_records"],
            )
        except KeyError as exc:
            raise MonitorConfigError(
                f"the live sensor cursor lacks the key {exc.args[0]!r}; reset the cursor"
            ) from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise MonitorConfigError(
                f"the live sensor cursor cannot be read ({exc}); reset it"
            ) from None


@dataclass(frozen=True)
class StoreBatch:
    """What one read of the store found: new lines in store order and the advanced progress."""

    arrivals: list[Arrival]
    files: dict[str, FileProgress]
    start_day: date | None
    problems: list[str]


def read_store_arrivals(
    store: TraceStore,
    cursor: StoreCursor,
    limit: int | None = None,
    backfill_days: int = 0,
) -> StoreBatch:
    """Lines (and Parquet rows) that arrived in the store since `cursor`, day by day and file by
    file in name order, at most `limit` of them. Nothing is consumed twice or skipped: progress
    is per file, and a line is consumed only once its newline is written.

    Without a start day (a first read), watching starts `backfill_days` before the store's
    latest day; days before the start day are never read."""
    days = store.days()
    # what the store left out, named (a folder `date=2026-13-45`), on every tick that meets it
    problems: list[str] = list(getattr(store, "ignored", []))
    start_day = cursor.start_day
    if start_day is None and days:
        start_day = days[-1] - timedelta(days=backfill_days)
    held = {day.isoformat() for day in days}
    # Progress of files whose day folder was removed (retention) is dropped; within a day that
    # still exists it is kept, so a file that reappears is not read twice.
    files = {key: p for key, p in cursor.files.items() if key.split("/", 1)[0] in held}
    arrivals: list[Arrival] = []
    for day in days:
        if start_day is None or day < start_day:
            continue
        try:
            paths = store.trace_files(day)
        except TraceStoreError as exc:  # this day waits, named; the others are read
            problems.append(str(exc))
            continue
        for path in paths:
            room = None if limit is None else limit - len(arrivals)
            if room is not None and room <= 0:
                return StoreBatch(arrivals, files, start_day, problems)
            key = f"{day.isoformat()}/{path.name}"
            progress = files.get(key, FileProgress())
            if path.name.lower().endswith(".parquet"):
                found, progress, problem = read_new_parquet_rows(path, progress, str(path), room)
            else:
                found, progress, problem = read_new_lines(path, progress, str(path), room)
            files[key] = progress
            arrivals.extend(found)
            if problem:
                problems.append(problem)
    return StoreBatch(arrivals, files, start_day, problems)
