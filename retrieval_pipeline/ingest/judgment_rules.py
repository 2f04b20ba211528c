"""The rules of one judgment (query_id, doc_id, grade, judged_at, label_source) and of repeats.

`judgment_reason` judges one record held as Python values; `check_columns` judges a batch of
records held as Arrow columns, finding the bad rows column-wise and asking `judgment_reason` for
each bad row's words, so that the two cannot disagree on a reason (the tests hold them to the
same verdicts). `latest` applies the repeats rule. The rules themselves are stated once, in
`retrieval_pipeline.ingest.judgments`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.ingest.line_stream import SPACE
from retrieval_pipeline.ingest.line_stream import true_rows as true_rows
from retrieval_pipeline.records import GRADE_RANGE, MAX_GRADE, RecordError

# the trace contract's one timestamp rule (the same pattern as sql/macros.sql's iso_timestamp),
# and its words for a value's JSON type ("an integer", "a list", ...)
from retrieval_pipeline.records import _timestamp as trace_timestamp
from retrieval_pipeline.records import _words as kind_in_words

DEFAULT_LABEL_SOURCE = "judgments"
REQUIRED_COLUMNS = ("query_id", "doc_id", "grade")
# formats whose values are text (a grade is its decimal text); JSON lines and Parquet are typed
TEXT_FORMATS = ("qrels", "csv")
OPTIONAL_COLUMNS = ("judged_at", "label_source")
COLUMNS = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
TIMESTAMP = pa.timestamp("us", tz="UTC")

JUDGMENTS_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("doc_id", pa.string()),
        ("grade", pa.float64()),
        ("judged_at", TIMESTAMP),
        ("label_source", pa.string()),
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
    ]
)
ORDER = "read_order"  # a kept row's place in reading order, for the repeats rule
KEPT_SCHEMA = JUDGMENTS_SCHEMA.append(pa.field(ORDER, pa.int64()))

# A decimal number as text; Python's float() would also take `1_0`, `nan` and `infinity`.
NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBER = re.compile(NUMBER)


class Bad(Exception):
    """One field of one record breaks the contract: `field` (None: the whole record) and why."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _shown(value: object) -> str:
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)[:80]


def check_id(value: object, name: str) -> str:
    if value is None:
        raise Bad(name, f"missing field {name}")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Bad(name, f"{name} must be a string or an integer (got {kind_in_words(value)})")
    text = str(value)
    if not text.strip(SPACE):
        raise Bad(name, f"empty {name}")
    return text


def check_grade(value: object, kind: str = "jsonl") -> float:
    """A grade: a number from 0 to `records.MAX_GRADE` (the trace records' range, which says why),
    given as a number (JSON lines, Parquet) or as its decimal text (qrels, CSV); in qrels a
    negative grade means judged non-relevant, grade 0."""
    if value is None or (isinstance(value, str) and not value.strip(SPACE)):
        raise Bad("grade", "missing field grade")
    if isinstance(value, str) and kind not in TEXT_FORMATS:
        raise Bad("grade", f"grade must be a number (got a string: {_shown(value)})")
    if isinstance(value, Decimal):  # a Parquet decimal column
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise Bad("grade", f"grade must be a number (got {kind_in_words(value)})")
    if isinstance(value, str):
        text = value.strip(SPACE)
        if not _NUMBER.fullmatch(text):
            try:
                odd = not math.isfinite(float(text))
            except ValueError:
                odd = False
            raise Bad(
                "grade", f"grade is {'not finite' if odd else 'not a number'} (got {_shown(text)})"
            )
        value = text
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a double
        number = math.inf
    if not math.isfinite(number):
        raise Bad("grade", f"grade is not finite (got {_shown(value)})")
    if number < 0:
        if kind == "qrels":
            return 0.0
        raise Bad("grade", f"grade must be >= 0 (got {_shown(value)})")
    if number > MAX_GRADE:
        raise Bad("grade", f"grade {GRADE_RANGE} (got {_shown(value)})")
    return number + 0.0  # -0.0 reads 0.0


def check_judged_at(value: object) -> datetime | None:
    if value is None or (isinstance(value, str) and not value.strip(SPACE)):
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    try:
        return trace_timestamp(value.strip(SPACE) if isinstance(value, str) else value)
    except RecordError as exc:
        raise Bad("judged_at", exc.reason.replace("timestamp", "judged_at", 1)) from None


def check_label_source(value: object) -> str:
    if value is None or value == "":
        return DEFAULT_LABEL_SOURCE
    if not isinstance(value, str):
        raise Bad("label_source", f"label_source must be a string (got {kind_in_words(value)})")
    return value


def check_judgment(
    values: Mapping[str, object], kind: str = "jsonl"
) -> tuple[str, str, float, datetime | None, str]:
    """One record's kept values, in field order; raise `Bad` at its first broken field."""
    return (
        check_id(values.get("query_id"), "query_id"),
        check_id(values.get("doc_id"), "doc_id"),
        check_grade(values.get("grade"), kind),
        check_judged_at(values.get("judged_at")),
        check_label_source(values.get("label_source")),
    )


def judgment_reason(values: Mapping[str, object], kind: str = "jsonl") -> Bad | None:
    """Why a record is quarantined, or None when it is kept."""
    try:
        check_judgment(values, kind)
    except Bad as bad:
        return bad
    return None


@dataclass(frozen=True)
class Checked:
    """A batch judged: the kept rows (JUDGMENTS_SCHEMA) and the bad ones, by row index."""

    kept: pa.Table
    bad: list[tuple[int, Bad]]


def check_columns(
    columns: Mapping[str, pa.Array],
    source_file: str,
    source_lines: pa.Array,
    kind: str,
) -> Checked:
    """Judge every row of `columns` (any of COLUMNS; absent optional ones are null) at once."""
    n = len(source_lines)
    ids = {name: _ids(columns.get(name), n) for name in ("query_id", "doc_id")}
    grade, grade_ok = _grades(columns.get("grade"), n, kind)
    judged_at, judged_ok = _times(columns.get("judged_at"), n)
    source, source_ok = _sources(columns.get("label_source"), n)
    ok = pc.and_(pc.and_(ids["query_id"][1], ids["doc_id"][1]), pc.and_(grade_ok, judged_ok))
    ok = pc.fill_null(pc.and_(ok, source_ok), False)
    bad: list[tuple[int, Bad]] = []
    for row in true_rows(pc.invert(ok)):
        values = {name: array[row].as_py() for name, array in columns.items()}
        reason = judgment_reason(values, kind)
        if reason is None:  # the column-wise rules and the record's rules must agree
            raise AssertionError(f"row {row} refused column-wise but not by the rules: {values}")
        bad.append((row, reason))
    kept = pa.table(
        {
            "query_id": ids["query_id"][0],
            "doc_id": ids["doc_id"][0],
            "grade": grade,
            "judged_at": judged_at,
            "label_source": source,
            "source_file": pa.repeat(pa.scalar(source_file), n) if n else pa.array([], pa.string()),
            "source_line": pc.cast(source_lines, pa.int64()),
        },
        schema=JUDGMENTS_SCHEMA,
    ).filter(ok)
    return Checked(kept, bad)


def _blank(text: pa.Array) -> pa.Array:
    return pc.equal(pc.utf8_trim(text, characters=SPACE), "")


def _ids(array: pa.Array | None, n: int) -> tuple[pa.Array, pa.Array]:
    if array is None:
        return pa.nulls(n, pa.string()), pa.repeat(pa.scalar(False), n)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if (
        pa.types.is_integer(array.type)
        or pa.types.is_string(array.type)
        or pa.types.is_large_string(array.type)
    ):
        array = pc.cast(array, pa.string())
    else:  # another type: never an id
        return pa.nulls(n, pa.string()), pa.repeat(pa.scalar(False), n)
    return array, pc.invert(pc.fill_null(pc.or_kleene(pc.is_null(array), _blank(array)), True))


def _grades(array: pa.Array | None, n: int, kind: str) -> tuple[pa.Array, pa.Array]:
    if array is None:
        return pa.nulls(n, pa.float64()), pa.repeat(pa.scalar(False), n)
    textual = pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
    if textual and kind in TEXT_FORMATS:
        text = pc.utf8_trim(array, characters=SPACE)
        number = pc.match_substring_regex(text, f"^{NUMBER}$")
        number = pc.fill_null(number, False)
        values = pc.cast(pc.if_else(number, text, pa.scalar("0")), pa.float64())
        ok = number
    elif (
        pa.types.is_integer(array.type)
        or pa.types.is_floating(array.type)
        or pa.types.is_decimal(array.type)
    ):
        values = pc.cast(array, pa.float64())
        ok = pc.invert(pc.is_null(values))
    else:
        return pa.nulls(n, pa.float64()), pa.repeat(pa.scalar(False), n)
    finite = pc.fill_null(pc.is_finite(values), False)
    in_range = pc.fill_null(pc.less_equal(values, MAX_GRADE), False)
    ok = pc.and_(ok, pc.and_(finite, in_range))
    negative = pc.fill_null(pc.less(values, 0), False)
    if kind == "qrels":
        values = pc.if_else(negative, 0.0, values)
    else:
        ok = pc.and_(ok, pc.invert(negative))
    return pc.add(values, 0.0), ok  # -0.0 reads 0.0


def _times(array: pa.Array | None, n: int) -> tuple[pa.Array, pa.Array]:
    if array is None:
        return pa.nulls(n, TIMESTAMP), pa.repeat(pa.scalar(True), n)
    kind = array.type
    if pa.types.is_timestamp(kind):
        if kind.tz is None:  # no zone: UTC, as in the trace contract
            array = array.cast(pa.timestamp(kind.unit, "UTC"))
        return pc.cast(array, TIMESTAMP), pa.repeat(pa.scalar(True), n)
    if pa.types.is_date(kind):
        return pc.cast(pc.cast(array, pa.timestamp("us")), TIMESTAMP), pa.repeat(pa.scalar(True), n)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _parsed_times(pc.cast(array, pa.string()))
    return pa.nulls(n, TIMESTAMP), pc.is_null(array)


def _parsed_times(text: pa.Array) -> tuple[pa.Array, pa.Array]:
    """ISO 8601 text by the trace contract's rule, each distinct value parsed once."""
    encoded = text.dictionary_encode()
    parsed: list[datetime | None] = []
    valid: list[bool] = []
    for value in encoded.dictionary.to_pylist():
        try:
            parsed.append(check_judged_at(value))
            valid.append(True)
        except Bad:
            parsed.append(None)
            valid.append(False)
    indices = encoded.indices
    times = pc.take(pa.array(parsed, TIMESTAMP), indices)
    ok = pc.fill_null(pc.take(pa.array(valid, pa.bool_()), indices), True)  # null: no judged_at
    return times, ok


def _sources(array: pa.Array | None, n: int) -> tuple[pa.Array, pa.Array]:
    default = pa.scalar(DEFAULT_LABEL_SOURCE)
    if array is None:
        return pa.repeat(default, n), pa.repeat(pa.scalar(True), n)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        text = pc.cast(array, pa.string())
        empty = pc.fill_null(pc.equal(text, ""), True)
        return pc.if_else(empty, default, text), pa.repeat(pa.scalar(True), n)
    return pa.repeat(default, n), pc.is_null(array)


def latest(table: pa.Table, examples: int = 5) -> tuple[pa.Table, tuple[str, ...]]:
    """One row per (query_id, doc_id) of a KEPT_SCHEMA table: the latest judgment (the rule in
    `retrieval_pipeline.ingest.judgments`), ordered by query_id then doc_id; and the first few
    replacements, in words."""
    # no judged_at sorts before any time (null placement per sort key needs pyarrow >= 25)
    when = pc.fill_null(table["judged_at"], pa.scalar(datetime.min, TIMESTAMP))
    keyed = table.append_column("_when", when)
    order = [(name, "ascending") for name in ("query_id", "doc_id", "_when", ORDER)]
    ranked = table.take(pc.sort_indices(keyed, sort_keys=order))
    n = ranked.num_rows
    if n < 2:
        return ranked.drop_columns([ORDER]), ()
    head, tail = ranked.slice(0, n - 1), ranked.slice(1)
    same = pc.and_(
        pc.equal(head["query_id"], tail["query_id"]), pc.equal(head["doc_id"], tail["doc_id"])
    )
    same_as_next = pa.chunked_array([*same.chunks, pa.array([False])])
    winners = ranked.filter(pc.invert(same_as_next)).drop_columns([ORDER])
    return winners, _replacements(ranked, same_as_next, examples)


def _replacements(
    ranked: pa.Table, same_as_next: pa.ChunkedArray, examples: int
) -> tuple[str, ...]:
    flags = same_as_next.to_numpy()
    words: list[str] = []
    for start in np.flatnonzero(flags)[:examples].tolist():
        end = start
        while flags[end]:
            end += 1
        old, new = ranked.slice(start, 1).to_pylist()[0], ranked.slice(end, 1).to_pylist()[0]
        words.append(
            f"query {old['query_id']} document {old['doc_id']}: {old['source_file']}:"
            f"{old['source_line']} replaced by {new['source_file']}:{new['source_line']}"
        )
    return tuple(words)
