"""Records and verdicts for the hostile-input tests: a good record changed a field at a time, what
each validator says of a file, and the accounting every run must satisfy.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pandas as pd

from retrieval_pipeline.records import RecordError, parse_line
from retrieval_pipeline.warehouse.evaluation import EvaluationRun

DAY = date(2026, 11, 30)
Verdicts = dict[int, tuple[str | None, str]]
ID_RULE = "ids must be non-empty strings or integers"
OUT_OF_RANGE = "is out of range (0001-01-01 to 9999-12-31 in UTC)"


def finite(field: str, key: str, got: str) -> tuple[str, str]:
    return field, f'{field}["{key}"] must be a finite number >= 0 (got {got})'


def good(trace_id: str, **changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "trace_id": trace_id,
        "query_id": "q",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["a", "b"],
        "relevant_ids": ["b"],
    }
    return record | changes


def good_line(trace_id: str, **changes: object) -> bytes:
    return json.dumps(good(trace_id, **changes)).encode()


def verdicts(run: EvaluationRun) -> Verdicts:
    return {
        int(row.source_line): (None if pd.isna(row.field) else row.field, row.reason)
        for row in run.quarantine.itertuples()
    }


def assert_accounted(run: EvaluationRun, records: int) -> None:
    """read = scored + quarantined, every record is in exactly one table, with a reason."""
    assert run.ingest.read == records
    assert run.ingest.read == run.ingest.valid + run.ingest.quarantined
    assert len(run.per_query) == run.ingest.valid
    assert len(run.quarantine) == run.ingest.quarantined
    assert run.quarantine.reason.notna().all() and (run.quarantine.reason != "").all()
    assert run.quarantine.source_line.notna().all() and run.quarantine.source_file.notna().all()


def record_lines(path: Path) -> dict[int, bytes]:
    """The records of a JSON-lines file by line number, as the reader counts them."""
    lines = path.read_bytes().removeprefix(b"\xef\xbb\xbf").split(b"\n")
    return {n: line.removesuffix(b"\r") for n, line in enumerate(lines, 1) if line.strip()}


def python_verdicts(path: Path) -> tuple[Verdicts, list[str]]:
    """What records.parse_line says of each line, duplicates resolved as the batch path does
    (the first valid record of a trace_id wins, the rest are quarantined)."""
    bad: Verdicts = {}
    kept: dict[str, int] = {}
    for number, line in record_lines(path).items():
        try:
            record = parse_line(line)
        except RecordError as exc:
            bad[number] = (exc.field, exc.reason)
            continue
        if record.trace_id in kept:
            first = kept[record.trace_id]
            reason = f"duplicate trace_id {record.trace_id} (first seen at {path} line {first})"
            bad[number] = ("trace_id", reason)
        else:
            kept[record.trace_id] = number
    return bad, list(kept)
