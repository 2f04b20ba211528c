"""Impression records: one search result page as shown to a user, and what was clicked on it.

A record holds `impression_id`, `query_id`, `timestamp` (ISO 8601; no offset means UTC),
`variant` (optional, `default` when absent), `shown_ids` (the documents in rank order) and
`clicked_ids` (the shown documents that were clicked; may be empty). Ids follow the trace
contract: non-empty strings or integers, read as their decimal text. The files are JSON lines
(`.jsonl`, `.ndjson`, gzipped or not) or Parquet; a folder stands for the files in it with those
names, in path order.

Every record read is used, quarantined with its file, line (Parquet: row), field and reason, or
skipped and counted: a blank line, or a page that showed nothing (a search without results, which
says nothing about any document). Quarantined: malformed JSON or UTF-8, a missing or mistyped
field, a document shown twice on one page (which of its ranks was clicked cannot be told), a
clicked document that was not shown. A document clicked twice on one page counts as one click.
Repeated `impression_id`s are not detected: the ids are not kept, so that memory does not grow
with the number of impressions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.gzip import GZIP_MAGIC, GzipStream

# The trace contract's id and timestamp rules, one definition for both kinds of record.
from retrieval_pipeline.records import RecordError, _id_list, _required_id, _timestamp, _words
from retrieval_pipeline.store import is_hidden

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
PARQUET_SUFFIXES = (".parquet",)
REQUIRED_COLUMNS = ("impression_id", "query_id", "timestamp", "shown_ids", "clicked_ids")
# Bytes read at a time; a line longer than MAX_LINE_BYTES is quarantined without being held.
READ_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
# Rows of a Parquet file validated at a time.
PARQUET_BATCH_ROWS = 8192
# How much of a quarantined record is kept with its reason.
RAW_CHARS = 2000


class ImpressionFileError(ValueError):
    """A file that cannot be read at all (missing, an unknown kind, a Parquet file without a
    required column); records that cannot be used are quarantined instead."""


@dataclass(frozen=True)
class Impression:
    """One valid impression: the shown documents in rank order and the clicked ones."""

    impression_id: str
    query_id: str
    served_at: datetime  # timezone-aware, UTC
    variant: str
    shown_ids: tuple[str, ...]
    clicked_ids: frozenset[str]


@dataclass(frozen=True)
class QuarantinedImpression:
    """A record that could not be used, with where it was and why."""

    source_file: str
    source_line: int  # JSON lines: the line (from 1); Parquet: the row (from 1)
    impression_id: str | None
    field: str | None  # None: the whole record
    reason: str
    raw_record: str  # the record's text, cut at RAW_CHARS characters

    def describe(self) -> str:
        """`file:line: reason`, as an error message names a record."""
        return f"{self.source_file}:{self.source_line}: {self.reason}"


@dataclass
class ImpressionCounts:
    """What reading gave: `read == used + quarantined + skipped_empty` (blank lines are not
    records and are counted apart)."""

    files: int = 0
    read: int = 0
    used: int = 0
    quarantined: int = 0
    skipped_empty: int = 0  # pages that showed nothing
    blank_lines: int = 0
    quarantine_reasons: dict[str, int] = field(default_factory=dict)


def parse_impression(obj: object) -> Impression:
    """Validate one decoded record (a dict) into an `Impression`; raise `RecordError` naming the
    field. Rules are checked in field order and the first failure is reported."""
    if not isinstance(obj, dict):
        raise RecordError(f"not a JSON object (got {_words(obj)})")
    impression_id = _required_id(obj, "impression_id")
    query_id = _required_id(obj, "query_id")
    served_at = _served_at(obj.get("timestamp"))
    variant = obj.get("variant")
    if variant is None:
        variant = "default"
    elif not isinstance(variant, str):
        raise RecordError(f"variant must be a string (got {_words(variant)})", "variant")
    for name in ("shown_ids", "clicked_ids"):
        if obj.get(name) is None:
            raise RecordError(f"missing required field {name}", name)
    shown = _id_list(obj["shown_ids"], "shown_ids")
    first_rank: dict[str, int] = {}
    for rank, doc in enumerate(shown, start=1):
        if doc in first_rank:
            raise RecordError(
                f"shown_ids[{rank - 1}] shows {_quoted(doc)} again (first at rank "
                f"{first_rank[doc]}); a page shows a document once",
                "shown_ids",
            )
        first_rank[doc] = rank
    clicked = _id_list(obj["clicked_ids"], "clicked_ids")
    for position, doc in enumerate(clicked):
        if doc not in first_rank:
            raise RecordError(
                f"clicked_ids[{position}] {_quoted(doc)} was not shown on this page",
                "clicked_ids",
            )
    return Impression(impression_id, query_id, served_at, variant, tuple(shown), frozenset(clicked))


def _served_at(value: object) -> datetime:
    """The trace contract's timestamp rule; Parquet may also hold a timestamp column."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return _timestamp(value)


def _quoted(doc: str) -> str:
    return json.dumps(doc[:80], ensure_ascii=False)


def impression_files(paths: Iterable[Path | str]) -> list[Path]:
    """The files to read: each path given, a folder standing for its impression files (JSON
    lines and Parquet, hidden names left out) in path order."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = sorted(
                p for p in path.rglob("*") if p.is_file() and _kind(p) and not is_hidden(p.name)
            )
            files += inside
        elif path.is_file():
            if _kind(path) is None:
                raise ImpressionFileError(
                    f"{path}: not an impression file; name it .jsonl, .ndjson (optionally .gz) "
                    "or .parquet"
                )
            files.append(path)
        else:
            raise ImpressionFileError(f"{path}: no such file or folder")
    return files


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def read_impressions(
    paths: Iterable[Path | str],
    counts: ImpressionCounts,
    quarantine: Callable[[QuarantinedImpression], None],
) -> Iterator[Impression]:
    """Every usable impression of the files, in file then line order. Each quarantined record is
    handed to `quarantine` as it is met (nothing is kept here); `counts` is filled as reading
    goes."""
    files = impression_files(paths)
    counts.files += len(files)
    for path in files:
        records = _jsonl_records(path, counts) if _kind(path) == "jsonl" else _parquet_rows(path)
        for line, obj, raw in records:
            counts.read += 1
            try:
                if isinstance(obj, RecordError):
                    raise obj
                impression = parse_impression(obj)
            except RecordError as error:
                counts.quarantined += 1
                reasons = counts.quarantine_reasons
                key = error.field or "record"
                reasons[key] = reasons.get(key, 0) + 1
                quarantine(
                    QuarantinedImpression(
                        str(path), line, _id_of(obj), error.field, error.reason, raw[:RAW_CHARS]
                    )
                )
                continue
            if not impression.shown_ids:
                counts.skipped_empty += 1
                continue
            counts.used += 1
            yield impression


def _id_of(obj: object) -> str | None:
    value = obj.get("impression_id") if isinstance(obj, dict) else None
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None


def _jsonl_records(path: Path, counts: ImpressionCounts) -> Iterator[tuple[int, object, str]]:
    """(line number, decoded object or the RecordError saying why not, raw text) per record."""
    for number, data, problem in _numbered_lines(path):
        if problem is not None:
            yield number, RecordError(problem), data.decode("utf-8", "replace")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raw = data.decode("utf-8", "replace")
            yield number, RecordError(f"invalid UTF-8 at byte {exc.start} of the line"), raw
            continue
        if number == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark
        if not text.strip():
            counts.blank_lines += 1
            continue
        try:
            yield number, json.loads(text), text
        except ValueError:
            yield number, RecordError("malformed JSON"), text


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes, str | None]]:
    """(number from 1, bytes without the line end, problem or None) per line, a block at a time;
    a gzip file is inflated as it is read (a file named .gz must be gzip). An empty file holds
    no lines."""
    gzipped = path.name.lower().endswith(".gz")
    stream = GzipStream() if gzipped else None
    pending, too_long, number, fed = b"", False, 0, False
    with open(path, "rb") as handle:
        if gzipped and not GZIP_MAGIC.startswith(handle.read(2)):
            raise ImpressionFileError(f"{path}: not a gzip file (the name ends in .gz)")
        handle.seek(0)
        while block := handle.read(READ_BYTES):
            fed = True
            for chunk in stream.inflate(block) if stream is not None else (block,):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    number += 1
                    if too_long:
                        yield number, b"", f"the line is longer than {MAX_LINE_BYTES} bytes"
                        too_long = False
                    else:
                        yield number, line.removesuffix(b"\r"), None
                if len(pending) > MAX_LINE_BYTES:  # kept no longer: only its end is awaited
                    pending, too_long = b"", True
    if stream is not None and fed and not stream.ended:
        cut = stream.error or "the gzip stream is truncated; this record was cut off"
        yield number + 1, pending, cut
    elif pending or too_long:
        problem = f"the line is longer than {MAX_LINE_BYTES} bytes" if too_long else None
        yield number + 1, pending.removesuffix(b"\r"), problem


def _parquet_rows(path: Path) -> Iterator[tuple[int, object, str]]:
    """(row number from 1, the row as a dict, its JSON text) per row, a batch at a time."""
    try:
        parquet = pq.ParquetFile(path, pre_buffer=False)
    except (OSError, pa.ArrowException) as exc:
        raise ImpressionFileError(f"{path}: not a readable Parquet file ({exc})") from exc
    missing = [name for name in REQUIRED_COLUMNS if name not in parquet.schema_arrow.names]
    if missing:
        raise ImpressionFileError(
            f"{path}: Parquet file lacks required column(s) {', '.join(missing)}; an impression "
            f"needs {', '.join(REQUIRED_COLUMNS)}"
        )
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for obj in batch.to_pylist():
                row += 1
                yield row, obj, json.dumps(obj, default=str, ensure_ascii=False)
    except (OSError, pa.ArrowException) as exc:
        raise ImpressionFileError(f"{path}: not a readable Parquet file ({exc})") from exc
