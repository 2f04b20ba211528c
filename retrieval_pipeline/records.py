"""The trace record: its fields, and validation of one record held as a Python object.

This is the per-example path (the online evaluator, `monitor`); batch ingestion validates the same
rules in DuckDB (`sql/stg_trace_fields.sql`), and tests hold the two to the same verdicts.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import closest, printable

# The stage a record scores (its `stage` field): the first-stage ranking, and a reranker's input
# and output. The input's record is the reranker span's id with INPUT_SUFFIX as its trace_id.
STAGE_RETRIEVER, STAGE_RERANKER_INPUT, STAGE_RERANKER = "retriever", "reranker_input", "reranker"
INPUT_SUFFIX = ":input"


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

# Integer ids must fit DuckDB's JSON integers (BIGINT or UBIGINT); larger ones it reads as doubles.
_MIN_INT, _MAX_INT = -(2**63), 2**64 - 1

# An ISO 8601 date, optionally with a time and an offset (the same pattern as iso_timestamp in
# sql/macros.sql): both parsers accept more (week dates, `epoch`, zone names), and
# only this shape means the same instant to both.
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9]"
    r"([.][0-9]+)?)?(Z|[+-]([01][0-9]|2[0-3])(:?[0-5][0-9])?)?)?"
)
_RANGE_WORDS = "is out of range (0001-01-01 to 9999-12-31 in UTC)"

# The largest grade a label may have (max_grade() in sql/macros.sql; tests hold them equal). With
# exponential gain (2^g - 1) a grade of 1024 is an infinite gain, and nDCG inf / inf = NaN. At 100
# a gain is 2^100 - 1, about 1.3e30, and a sum of such gains overflows a double (about 2^1024)
# only past 2^924 terms, so every list scores; grades in use are 0..4 (TREC, MS MARCO), and 100
# leaves room for percent-like scales. (From a gap of some 50 grades on, exponential gain makes
# the lower grade count for nothing next to the higher one anyway.)
MAX_GRADE = 100
# The words of the rule, for every reader that applies it (trace records, judgments).
GRADE_RANGE = f"must be a grade from 0 to {MAX_GRADE}"
# A trace's segment may not be the overall rows' (sql/macros.sql, overall_segment_reason(), words
# it the same): its rows would be pooled with them, its traces counted twice.
OVERALL_SEGMENT_REASON = (
    f"segment {json.dumps(OVERALL_SEGMENT)} is reserved for all segments together in reports"
    " and checks; rename this segment"
)
_BOM = "\ufeff"
_TOO_DEEP = (
    f"JSON nested too deeply to read one record at a time (lists or objects more than about "
    f"{sys.getrecursionlimit()} levels deep)"
)


def _words(value: object) -> str:
    """A JSON value's type in the words of sql/macros.sql's json_type_in_words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        if _MIN_INT <= value <= _MAX_INT:
            return "an integer"
        return "an integer outside the 64-bit range"
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
    if isinstance(value, int):
        return _MIN_INT <= value <= _MAX_INT
    return isinstance(value, str) and value != ""


def _float_text(value: float) -> str:
    """A double as DuckDB's JSON writer spells it: shortest digits, fixed notation for exponents
    -6..20 (`1.0`, `0.00001`), else `1e-7`, `1.5e300`."""
    if not math.isfinite(value):
        return json.dumps(value)
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    point = len(digit_tuple) + int(exponent)  # digits before the decimal point
    if not -6 <= point - 1 <= 20:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{point - 1}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}.0"
    return f"{sign}{digits[:point]}.{digits[point:]}"


class _Literal(float):
    """A JSON number too large for a double (`1e309`): kept with its text, as DuckDB reports it."""

    text: str

    def __new__(cls, text: str) -> _Literal:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _json_text(value: object) -> str:
    """A JSON value as DuckDB writes it back (compact, UTF-8 kept), for a reason's `(got ...)`."""
    if isinstance(value, _Literal):
        return value.text
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        # too long to show (and past 4,300 digits Python will not write it): its size instead
        digits = len(str(abs(value))) if value.bit_length() < 14_000 else "over 4,000"
        return f"an integer of {digits} digits"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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
    shown = json.dumps(value, ensure_ascii=False)[:80]
    if not _TIMESTAMP.fullmatch(value):
        raise RecordError(f"unparsable timestamp {shown}", "timestamp")
    try:
        served_at = datetime.fromisoformat(value)
    except ValueError:
        if value.startswith("0000") and _parses("2000" + value[4:]):  # 0 and 2000 are leap
            # year 0 (1 BC) is a date to DuckDB, before 0001-01-01
            raise RecordError(f"timestamp {shown} {_RANGE_WORDS}", "timestamp") from None
        raise RecordError(f"unparsable timestamp {shown}", "timestamp") from None
    if served_at.tzinfo is None:
        served_at = served_at.replace(tzinfo=UTC)  # no offset: UTC (the trace contract)
    try:
        return served_at.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-05:00 is in the year 10000 in UTC
        raise RecordError(f"timestamp {shown} {_RANGE_WORDS}", "timestamp") from None


def _parses(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _grades(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        raise RecordError(
            f"relevance_scores must be an object of doc_id -> grade (got {_words(value)})",
            "relevance_scores",
        )
    repeated = getattr(value, "repeated", ())
    if repeated:
        raise RecordError(
            f"relevance_scores grades document {_key_text(repeated[0])} more than once",
            "relevance_scores",
        )
    if "" in value:
        raise RecordError("relevance_scores has an empty document id", "relevance_scores")
    return {doc_id: check_grade(doc_id, grade) for doc_id, grade in value.items()}


def check_grade(doc_id: str, grade: object) -> float:
    """`grade` as a float when it is a number from 0 to MAX_GRADE (see there why), else raise
    `RecordError` in the words of sql/stg_trace_fields.sql."""
    if (
        isinstance(grade, bool)
        or not isinstance(grade, int | float)
        # an int of any size compares exactly; only a float can be inf or nan (math.isfinite
        # of a 400-digit int would overflow converting it)
        or (isinstance(grade, float) and not math.isfinite(grade))
        or grade < 0
    ):
        raise RecordError(
            f"relevance_scores[{_key_text(doc_id)}] must be a finite number >= 0 "
            f"(got {_json_text(grade)[:40]})",
            "relevance_scores",
        )
    if grade > MAX_GRADE:
        raise RecordError(
            f"relevance_scores[{_key_text(doc_id)}] {GRADE_RANGE} (got {_json_text(grade)[:40]})",
            "relevance_scores",
        )
    return float(grade)


def _key_text(doc_id: str) -> str:
    return json.dumps(doc_id[:80], ensure_ascii=False)


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
    if segment == OVERALL_SEGMENT:
        raise RecordError(OVERALL_SEGMENT_REASON, "segment")
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


class _JsonObject(dict[str, object]):
    """A decoded JSON object; the first of a repeated key counts (as in DuckDB's from_json) and
    `repeated` names the keys given more than once."""

    repeated: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, object]]) -> _JsonObject:
    obj = _JsonObject()
    repeated: list[str] = []
    for key, value in pairs:
        if key in obj:
            repeated.append(key)
        else:
            obj[key] = value
    if repeated:
        obj.repeated = tuple(dict.fromkeys(repeated))
    return obj


def _parse_float(text: str) -> float:
    number = float(text)
    return number if math.isfinite(number) else _Literal(text)


def _has_lone_surrogate(obj: object) -> bool:
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_line(line: str | bytes) -> TraceRecord:
    """Validate one JSON line (the `monitor` and online path), with the batch reader's rules for
    what a line is: invalid UTF-8 and a string escape that is not Unicode (a lone surrogate such
    as `\\ud800`) are errors; a byte-order mark at its start is ignored."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"invalid UTF-8 at byte {exc.start} of the line") from None
    line = line.removeprefix(_BOM)
    try:
        try:
            obj = json.loads(line, object_pairs_hook=_object, parse_float=_parse_float)
        except ValueError:
            raise RecordError("malformed JSON") from None
        if "\\u" in line and _has_lone_surrogate(obj):
            raise RecordError("malformed JSON")
        return parse_record(obj)
    except RecursionError:
        # Python's JSON reader recurses per level; DuckDB's does not, and reads such a line
        # (a known difference between the validators, pinned by a test)
        raise RecordError(_TOO_DEEP) from None


def outside_day(record: TraceRecord, day: date) -> bool:
    """Whether a record stored under partition `day` was served on another UTC day. The store's
    day is authoritative: such a record is kept and scored under `day`, and counted."""
    return record.served_at.date() != day


# How many unknown fields a summary names, most common first.
SHOWN_UNKNOWN_FIELDS = 5


def unknown_field_lines(unknown: Sequence[tuple[str, int]], known: Sequence[str]) -> list[str]:
    """One line per field the records carry that a trace record does not have (`unknown`: name
    and records, most first), with the known field it most likely misspells: a misspelt field is
    otherwise read as absent without a word (`relevant_docs`: every trace unannotated)."""
    lines = []
    for name, count in unknown[:SHOWN_UNKNOWN_FIELDS]:
        guess = closest(name, known)
        hint = f": did you mean {guess}?" if guess else ", not read"
        records = "record" if count == 1 else "records"
        lines.append(f"unknown field {printable(name, 60)} in {count} {records}{hint}")
    if len(unknown) > SHOWN_UNKNOWN_FIELDS:
        lines.append(f"... and {len(unknown) - SHOWN_UNKNOWN_FIELDS} more unknown fields")
    return lines
