"""Which files are trace files: discovery by name, and the error for a file that cannot be read.

Only I/O-level problems are handled in `ingest` (gzip, UTF-8, a BOM, blank lines, a file that is
not JSON lines or Parquet); what a record means is validated in DuckDB
(`warehouse.validation.stage_records`). A damaged line becomes a raw record with a `read_error`, so
it is quarantined with its file and line like any other bad record; a file that cannot be read at
all raises `TraceFileError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
PARQUET_SUFFIXES = (".parquet",)
REQUIRED_FIELDS = ("trace_id", "query_id", "timestamp", "retrieved_ids")


class TraceFileError(ValueError):
    """A trace file (or path) that cannot be read at all."""


@dataclass(frozen=True)
class TraceFile:
    path: Path
    kind: str  # "jsonl" or "parquet"


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def discover(paths: Iterable[Path | str]) -> list[TraceFile]:
    """Expand files and directories (recursively) into trace files, in a stable order."""
    found: list[TraceFile] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                kind = _kind(child)
                if kind is not None:
                    found.append(TraceFile(child, kind))
        elif path.is_file():
            kind = _kind(path)
            if kind is None:
                raise TraceFileError(
                    f"{path}: not a trace file; expected one of "
                    f"{', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}"
                )
            found.append(TraceFile(path, kind))
        else:
            raise TraceFileError(f"{path}: no such file or directory")
    return found
