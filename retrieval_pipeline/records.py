"""The trace record: its fields, and validation of one record held as a Python object.

This is the per-example path (the online evaluator, `monitor`); batch ingestion validates the same
rules in DuckDB (`sql/stg_trace_records.sql`), and tests hold the two to the same verdicts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime


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


_ID_WORDS = "ids must be non-empty strings or integers"


def _words(value: object) -> str:
    """A JSON value's type in the words of sql/macros.sql's json_type_in_words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _is_id(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and value != "")


def _required_id(obj: dict[str, object], name: str) -> str:
    value = obj.get(name)
    if value is None:
        raise RecordError(f"missing required field {name}", name)
    if not _is_id(value):
        got = "an empty string" if value == "" else _words(value)
        raise RecordError(f"{name} must be a non-empty string or an integer (got {got})", name)
    return str(value)


def _id_list(value: object, name: str) -> list[str]:
    if not isinstance(value, list):
        raise RecordError(f"{name} must be a list of ids (got {_words(value)})", name)
    for position, item in enumerate(value):
        if not _is_id(item):
            got = "an empty string" if item == "" else _words(item)
            raise RecordError(f"{name}[{position}] is {got}; {_ID_WORDS}", name)
    return [str(item) for item in value]


def _timestamp(value: object) -> datetime:
    if value is None:
        raise RecordError("missing required field timestamp", "timestamp")
    if not isinstance(value, str):
        raise RecordError(
            f"timestamp must be an ISO 8601 string (got {_words(value)})", "timestamp"
        )
    try:
        served_at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise RecordError(f"unparsable timestamp {json.dumps(value)[:80]}", "timestamp") from None
    if served_at.tzinfo is None:
        served_at = served_at.replace(tzinfo=UTC)
    return served_at.astimezone(UTC)


def _grades(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        raise RecordError(
            f"relevance_scores must be an object of doc_id -> grade (got {_words(value)})",
            "relevance_scores",
        )
    grades: dict[str, float] = {}
    for doc_id, grade in value.items():
        if doc_id == "":
            raise RecordError("relevance_scores has an empty document id", "relevance_scores")
        number = isinstance(grade, int | float) and not isinstance(grade, bool)
        if not number or not math.isfinite(grade) or grade < 0:
            raise RecordError(
                f"relevance_scores[{json.dumps(doc_id)[:82]}] must be a finite number >= 0 "
                f"(got {json.dumps(grade)[:40]})",
                "relevance_scores",
            )
        grades[doc_id] = float(grade)
    return grades


def _optional_text(obj: dict[str, object], name: str, default: str | None) -> str | None:
    value = obj.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise RecordError(f"{name} must be a string (got {_words(value)})", name)
    return value


def parse_record(obj: object) -> TraceRecord:
    """Validate one decoded JSON object (or dict) into a `TraceRecord`; raise `RecordError`.

    Rules are checked in field order and the first failure is reported, as in batch ingestion.
    """
    if not isinstance(obj, dict):
        raise RecordError(f"not a JSON object (got {_words(obj)})")
    trace_id = _required_id(obj, "trace_id")
    query_id = _required_id(obj, "query_id")
    served_at = _timestamp(obj.get("timestamp"))
    if obj.get("retrieved_ids") is None:
        raise RecordError("missing required field retrieved_ids", "retrieved_ids")
    retrieved = _id_list(obj["retrieved_ids"], "retrieved_ids")
    relevant_raw = obj.get("relevant_ids")
    relevant = None if relevant_raw is None else _id_list(relevant_raw, "relevant_ids")
    scores_raw = obj.get("relevance_scores")
    scores = None if scores_raw is None else _grades(scores_raw)
    segment = _optional_text(obj, "segment", "unknown")
    variant = _optional_text(obj, "variant", "default")
    label_source = _optional_text(obj, "label_source", None)

    unique = tuple(dict.fromkeys(retrieved))  # first occurrence kept
    labels = dict(scores or {})
    for doc_id in relevant or []:
        labels.setdefault(doc_id, 1.0)
    return TraceRecord(
        trace_id=trace_id,
        query_id=query_id,
        served_at=served_at,
        retrieved_ids=unique,
        labels=labels,
        is_judged=relevant is not None or scores is not None,
        segment=segment or "",
        variant=variant or "",
        label_source=label_source,
        n_duplicate_ids=len(retrieved) - len(unique),
    )


def parse_line(line: str | bytes) -> TraceRecord:
    """Validate one JSON line (the `monitor` and online path)."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise RecordError("malformed JSON") from None
    return parse_record(obj)
