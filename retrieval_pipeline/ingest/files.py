"""Which files are trace files: discovery by name, and the error for a file that cannot be read.

Only I/O-level problems are handled in `ingest` (gzip, UTF-8, a BOM, blank lines, a file that is
not JSON lines or Parquet); what a record means is validated in DuckDB
(`warehouse.validation.stage_records`). A damaged line becomes a raw record with a `read_error`, so
it is quarantined with its file and line like any other bad record; a file that cannot be read at
all raises `TraceFileError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from retrieval_pipeline.ingest.filesystems import Location, is_url, list_files, resolve
from retrieval_pipeline.ingest.otlp import SpanFileError, sniff_file

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
PARQUET_SUFFIXES = (".parquet",)
# OTLP/JSON span exports (ingest.otlp) are found by content among the JSON-lines files; a `.json`
# file is a trace file only as one.
OTLP_ONLY_SUFFIXES = (".json", ".json.gz")
REQUIRED_FIELDS = ("trace_id", "query_id", "timestamp", "retrieved_ids")
# Every field of a trace record (other fields and columns are not read by the pipeline).
TRACE_FIELDS = (
    *REQUIRED_FIELDS,
    "relevant_ids",
    "relevance_scores",
    "segment",
    "variant",
    "label_source",
)
# ... and the fields a record made from a span has besides (ingest.spans): what a record may
# carry without being told of an unknown field.
RECORD_FIELDS = (*TRACE_FIELDS, "stage", "otel_trace_id", "span_id")


class TraceFileError(ValueError):
    """A trace file (or path) that cannot be read at all."""


@dataclass(frozen=True)
class TraceFile:
    path: Path | Location  # a local file, or one in an object store (`ingest.filesystems`)
    kind: str  # "jsonl", "parquet" or "otlp"

    @property
    def name(self) -> str:
        """The file as records name it (`source_file`): its path, or its URL."""
        return source_name(self.path)


def source_name(path: Path | Location) -> str:
    return path.url if isinstance(path, Location) else str(path)


def _kind(path: Path | Location) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES + OTLP_ONLY_SUFFIXES):
        # span exports are told by content, in local files (an object store's are read as JSON
        # lines; docs/spans.md)
        try:
            otlp = not isinstance(path, Location) and sniff_file(path)
        except SpanFileError:  # unreadable or not gzip: the JSON-lines reader says so
            otlp = False
        if otlp:
            return "otlp"
        return "jsonl" if name.endswith(JSONL_SUFFIXES) else None
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def discover(paths: Iterable[Path | str]) -> list[TraceFile]:
    """Expand files and directories (recursively) into trace files, in a stable order; an
    `s3://` URL names a file or a prefix in an object store (`ingest.filesystems`)."""
    return survey(paths)[0]


def survey(paths: Iterable[Path | str]) -> tuple[list[TraceFile], list[Path]]:
    """`discover`'s trace files, and the files inside the directories given that are not trace
    files by their name (skipped; sorted). A file named directly must be a trace file."""
    found: list[TraceFile] = []
    skipped: list[Path] = []
    for given in paths:
        if is_url(given):
            found += _in_store(str(given))
            continue
        path = Path(given)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                kind = _kind(child)
                if kind is not None:
                    found.append(TraceFile(_named(child), kind))
                else:
                    skipped.append(child)
        elif path.is_file():
            kind = _kind(path)
            if kind is None:
                raise TraceFileError(
                    f"{path}: not a trace file; expected one of "
                    f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}, or an OTLP/JSON span "
                    f"export ({', '.join(OTLP_ONLY_SUFFIXES)} too)"
                )
            found.append(TraceFile(_named(path), kind))
        elif path.is_symlink():
            raise TraceFileError(f"{path}: a symbolic link to nothing that can be read (or a loop)")
        else:
            raise TraceFileError(f"{path}: no such file or directory")
    return found, skipped


def _named(path: Path) -> Path:
    """`path`, when its name can be recorded with its records (UTF-8); else TraceFileError
    naming its bytes."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise TraceFileError(
            f"{os.fsencode(path)!r}: the file name is not UTF-8, so it cannot be recorded with "
            "its records; rename it"
        ) from None
    return path


def _in_store(url: str) -> list[TraceFile]:
    """The trace files at an object store's URL: the file, or those under the prefix, in name
    order (`filesystems.list_files`; a file named on its own must be a trace file)."""
    location = resolve(url)
    files = list_files(location)
    if len(files) == 1 and files[0].path == location.path:
        kind = _kind(location)
        if kind is None:
            raise TraceFileError(
                f"{url}: not a trace file; expected one of "
                f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}"
            )
        return [TraceFile(location, kind)]
    return [TraceFile(f, kind) for f in files if (kind := _kind(f)) is not None]
