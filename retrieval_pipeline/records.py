"""The trace record: its fields, and validation of one record held as a Python object.

This is the per-example path (the online evaluator, `monitor`); batch ingestion validates the same
rules in DuckDB (`sql/stg_trace_records.sql`), and tests hold the two to the same verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


class RecordError(ValueError):
    """A record that cannot be scored: `field` names the offending field (None: whole record)."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field


@dataclass(frozen=True)
class TraceRecord:
    """One validated trace. Ids are strings; `retrieved_ids` has duplicates removed (first kept)."""

    trace_id: str
    query_id: str
    served_at: datetime  # timezone-aware, UTC
    retrieved_ids: tuple[str, ...]
    labels: dict[str, float]  # doc_id -> grade, merged from relevant_ids and relevance_scores
    is_judged: bool  # relevant_ids or relevance_scores was present (possibly empty)
    segment: str = "unknown"
    variant: str = "default"
    label_source: str | None = None
    n_duplicate_ids: int = 0
    extra: dict[str, object] = field(default_factory=dict)


def parse_record(obj: object) -> TraceRecord:
    """Validate one decoded JSON object (or dict) into a `TraceRecord`; raise `RecordError`."""
    raise NotImplementedError  # filled in by the ingestion work
