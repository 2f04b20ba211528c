"""Trace records for the ingestion tests: a good one, changed a field at a time."""

from __future__ import annotations

from pathlib import Path

GOOD = {
    "trace_id": "t0",
    "query_id": "q0",
    "timestamp": "2026-11-30T10:00:00Z",
    "retrieved_ids": ["a", "b"],
    "relevant_ids": ["b"],
}


def good(trace_id: str, **changes: object) -> dict:
    return {**GOOD, "trace_id": trace_id, **changes}


def unjudged(trace_id: str) -> dict:
    """A good record without relevant_ids or relevance_scores."""
    return {key: value for key, value in good(trace_id).items() if key != "relevant_ids"}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
