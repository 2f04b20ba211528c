"""The two lanes of validation give the same rows: the plain lane (sql/stg_plain_trace_fields.sql,
over pyarrow's strict JSON reader or over Parquet and Arrow columns of its types) for a piece whose
every record is plainly valid, the JSON lane (sql/stg_trace_fields.sql) for any piece. A piece the
plain lane cannot read exactly falls back."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from unittest import mock

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_pipeline.ingest import files, jsonl, pieces
from retrieval_pipeline.ingest.lanes import NOT_PLAIN, PLAIN_FIELDS
from retrieval_pipeline.warehouse import parallel_validation, validation
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.sql import load_sql

DAY = date(2026, 11, 30)


@pytest.fixture(scope="module")
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect(":memory:")
    yield connection
    connection.close()


def staged(
    conn: duckdb.DuckDBPyConnection, piece: pieces.RawPiece, partition_date: date | None
) -> list[dict[str, object]]:
    """The rows `_stage_records` gives for `piece`, in line order."""
    parallel_validation.create_seen_trace_ids(conn)
    rows = validation.stage_records(conn, piece, partition_date).to_pylist()
    return sorted(rows, key=lambda row: (row["file_order"], row["source_line"]))


def lanes(
    conn: duckdb.DuckDBPyConnection, lines: list[str], partition_date: date | None = DAY
) -> tuple[list[str], list[dict[str, object]], list[dict[str, object]]]:
    """(the lanes `_stage_records` went through, its rows, the JSON lane's rows) for a piece."""
    piece = jsonl.jsonl_piece(("\n".join(lines) + "\n").encode(), "f.jsonl")
    return through_lanes(conn, piece, piece.records, partition_date)


def through_lanes(
    conn: duckdb.DuckDBPyConnection,
    piece: pieces.RawPiece,
    texts: pa.Table,
    partition_date: date | None,
) -> tuple[list[str], list[dict[str, object]], list[dict[str, object]]]:
    """(the lanes `_stage_records` went through, its rows for `piece`, the JSON lane's rows for
    the same records' `texts`)."""
    with mock.patch.object(validation, "_trace_records", wraps=validation._trace_records) as spy:
        rows = staged(conn, piece, partition_date)
    taken = [call.args[1] for call in spy.call_args_list]
    return taken, rows, staged(conn, pieces.RawPiece(texts), partition_date)


def record(trace: object, **changes: object) -> str:
    """A plain record of trace id `trace`, with `changes`."""
    fields = {
        "trace_id": trace,
        "query_id": f"q-{trace}",
        "timestamp": "2026-11-30T10:00:00Z",
        "segment": "faq",
        "variant": "control",
        "retrieved_ids": ["d1", "d2", "d3", "d2"],
        "relevant_ids": ["d3", "d9"],
        "relevance_scores": {"d1": 2, "d9": 0.5},
    }
    return json.dumps({**fields, **changes})


def test_a_plain_piece_is_read_by_the_plain_lane_alone(conn: duckdb.DuckDBPyConnection) -> None:
    lines = [
        record("t1"),
        record("t2", relevance_scores=None, segment=None, label_source="click"),
        record("t3", relevant_ids=None, timestamp="2026-11-30 23:59:59.5+01:00"),
        record("t1"),  # a repeated trace_id: quarantined in either lane
        record("t4", retrieved_ids=[], relevance_scores={}, extra={"nested": [1, None]}),
    ]
    taken, rows, json_rows = lanes(conn, lines)
    assert taken == ["stg_plain_trace_fields"]
    assert rows == json_rows
    assert [row["reason"] for row in rows] == [
        None,
        None,
        None,
        "duplicate trace_id t1 (first seen at f.jsonl line 1)",
        None,
    ]
    # d2's repeat dropped; grades from relevance_scores, then grade 1 for d3 (d9 is graded)
    assert rows[0]["retrieved_ids"] == ["d1", "d2", "d3"]
    assert rows[0]["labels"] == [
        {"doc_id": "d1", "grade": 2.0, "rank": 1},
        {"doc_id": "d9", "grade": 0.5, "rank": None},
        {"doc_id": "d3", "grade": 1.0, "rank": 3},
    ]
    assert rows[1]["segment"] == "unknown" and rows[1]["label_source"] == "click"
    assert [row["is_judged"] for row in rows] == [True, True, True, True, True]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        # pyarrow's reader crashed the process on a JSON null before a record
        ('null {"trace_id": "x"}', "malformed JSON"),
        ("null", "not a JSON object (got null)"),
        # and read two objects on one line as two records
        ('{"trace_id": "x"} {"trace_id": "y"}', "malformed JSON"),
        (record("t9", relevance_scores={"d1": "3"}), 'relevance_scores["d1"] must be a finite'),
        (record("t9", relevance_scores={"d1": True}), 'relevance_scores["d1"] must be a finite'),
        (record("t9", relevance_scores={"": 1}), "relevance_scores has an empty document id"),
        (record("t9", retrieved_ids=["d1", None]), "retrieved_ids[1] is null"),
        (record("t9", relevant_ids=[""]), "relevant_ids[0] is an empty string"),
        (record("t9", timestamp="epoch"), "unparsable timestamp"),
        (record("t9", segment="__all__"), 'segment "__all__" is reserved'),
        (record("t9", timestamp="0000-12-31T23:00:00Z"), "is out of range"),
        (record("t9", timestamp="9999-12-31T23:00:00-02:00"), "is out of range"),
        (
            '{"trace_id": "t9", "query_id": "q", "timestamp": "2026-11-30T10:00:00Z", '
            '"retrieved_ids": [], "relevance_scores": {"d1": 1, "d1": 2}}',
            'relevance_scores grades document "d1" more than once',
        ),
        (
            '{"trace_id": "t9", "query_id": "q", "timestamp": "2026-11-30T10:00:00Z", '
            '"retrieved_ids": [], "relevance_scores": {"d1": 1e400}}',
            'relevance_scores["d1"] must be a finite',
        ),
    ],
)
def test_a_piece_with_a_record_that_is_not_plain_goes_through_the_json_lane(
    conn: duckdb.DuckDBPyConnection, line: str, reason: str
) -> None:
    taken, rows, json_rows = lanes(conn, [record("t1"), line, record("t2")])
    assert taken[-1] == "stg_trace_fields"
    assert rows == json_rows
    assert [row["reason"] is None for row in rows] == [True, False, True]
    assert reason in str(rows[1]["reason"])


def test_integer_ids_are_read_by_the_json_lane_as_their_text(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    taken, rows, _ = lanes(conn, [record("t1", retrieved_ids=[7, "7", 8], relevant_ids=[8])])
    assert taken == ["stg_trace_fields"]  # pyarrow's reader refused the piece
    assert rows[0]["retrieved_ids"] == ["7", "8"] and rows[0]["n_duplicate_ids"] == 1


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        # a value of another JSON type where the plain lane reads a string or a list of strings:
        # its reader refuses the piece, and the JSON lane names the value
        ({"trace_id": 9.5}, "trace_id must be a non-empty string or an integer"),
        ({"trace_id": True}, "trace_id must be a non-empty string or an integer (got a boolean)"),
        ({"query_id": {"q": 1}}, "query_id must be a non-empty string or an integer (got an obj"),
        ({"timestamp": 20261130}, "timestamp must be an ISO 8601 string (got an integer)"),
        ({"segment": 3}, "segment must be a string (got an integer)"),
        ({"segment": ["faq"]}, "segment must be a string (got a list)"),
        ({"variant": 1.5}, "variant must be a string (got a number with a fraction)"),
        ({"label_source": False}, "label_source must be a string (got a boolean)"),
        ({"retrieved_ids": ["d1", 1.5]}, "retrieved_ids[1] is a number with a fraction"),
        ({"retrieved_ids": ["d1", ["d2"]]}, "retrieved_ids[1] is a list"),
        ({"retrieved_ids": "d1"}, "retrieved_ids must be a list of ids (got a string)"),
        ({"relevant_ids": [True]}, "relevant_ids[0] is a boolean"),
        ({"relevant_ids": "d3"}, "relevant_ids must be a list of ids (got a string)"),
        ({"relevant_ids": {"d3": 1}}, "relevant_ids must be a list of ids (got an object)"),
    ],
)
def test_a_value_of_another_type_sends_the_piece_to_the_json_lane(
    conn: duckdb.DuckDBPyConnection, changes: dict[str, object], reason: str
) -> None:
    taken, rows, json_rows = lanes(conn, [record("t1"), record("t9", **changes), record("t2")])
    assert taken == ["stg_trace_fields"]
    assert rows == json_rows
    assert [row["reason"] for row in rows][::2] == [None, None]
    assert str(rows[1]["reason"]).startswith(reason)


def test_a_field_given_twice_counts_once(conn: duckdb.DuckDBPyConnection) -> None:
    """The first of a field given twice counts (the JSON lane's rule), whatever the second's type;
    the plain lane's reader refuses such a piece."""
    for second in ('"other"', "3"):
        twice = record("t1")[:-1] + f', "segment": {second}, "trace_id": "t8"}}'
        taken, rows, json_rows = lanes(conn, [twice, record("t2")])
        assert taken == ["stg_trace_fields"]
        assert rows == json_rows
        assert (rows[0]["trace_id"], rows[0]["segment"], rows[0]["reason"]) == ("t1", "faq", None)


# ---- the lanes agree on random pieces ------------------------------------------------------------

_ids = st.sampled_from(["d1", "d2", "doc-000001", "é", 'a"b', "a\\b", "\u2028", "x y", "😀"])
_grades = st.one_of(
    st.integers(0, 3), st.floats(0, 3), st.sampled_from([-1, 10**20, "2", True, None, [1]])
)
_values = {
    "trace_id": st.one_of(_ids, st.just(""), st.integers(-5, 5), st.none()),
    "query_id": st.one_of(_ids, st.just(7), st.none()),
    "timestamp": st.sampled_from(
        [
            "2026-11-30T10:00:00Z",
            "2026-11-30",
            "2026-11-30T23:30:00-02:00",
            "2026-12-01T00:30:00+01:00",
            "2026-11-30T10:00:00.123456",
            "2026-11-30T24:00:00Z",
            "30/11/2026",
            "",
        ]
    ),
    "retrieved_ids": st.one_of(
        st.lists(_ids, max_size=6),
        st.lists(st.one_of(_ids, st.integers(0, 9), st.just(""), st.none()), max_size=4),
        st.just("d1"),
    ),
    "relevant_ids": st.one_of(st.none(), st.lists(_ids, max_size=3), st.just([None])),
    "relevance_scores": st.one_of(
        st.none(),
        st.dictionaries(_ids, st.integers(0, 3), max_size=4),
        st.dictionaries(st.one_of(_ids, st.just("")), _grades, max_size=3),
        st.just([1]),
    ),
    "segment": st.one_of(st.none(), st.sampled_from(["faq", "multi_hop"]), st.just(1)),
    "variant": st.one_of(st.none(), st.just("candidate")),
    "label_source": st.one_of(st.none(), st.just("click")),
    "extra": st.one_of(st.none(), st.just({"a": [1, {"b": None}]})),
}


@st.composite
def record_lines(draw: st.DrawFn) -> str:
    """A trace record, mostly plain: each field is left out, kept or drawn from `_values`."""
    base = json.loads(record(draw(_ids)))
    fields: dict[str, object] = {}
    for name, values in _values.items():
        choice = draw(st.sampled_from(["keep", "keep", "keep", "drop", "draw"]))
        if choice == "keep" and name in base:
            fields[name] = base[name]
        elif choice == "draw":
            fields[name] = draw(values)
    return json.dumps(fields, ensure_ascii=draw(st.booleans()))


_plain_pieces = st.lists(record_lines(), min_size=1, max_size=12)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.one_of(
        _plain_pieces,
        st.lists(st.builds(lambda i: record(f"t{i}"), st.integers(0, 5)), min_size=1, max_size=8),
    ),
    partition_date=st.sampled_from([DAY, None]),
)
def test_both_lanes_give_the_same_rows(
    conn: duckdb.DuckDBPyConnection, lines: list[str], partition_date: date | None
) -> None:
    taken, rows, json_rows = lanes(conn, lines, partition_date)
    assert rows == json_rows
    # no record quarantined for its own fields (repeats aside), every id a string: plain
    if all(_plain_types(line) for line in lines) and all(
        row["reason"] is None or str(row["reason"]).startswith("duplicate") for row in rows
    ):
        assert taken == ["stg_plain_trace_fields"]


def _plain_types(line: str) -> bool:
    """Whether the record's ids are JSON strings (integer ids go through the JSON lane)."""
    fields = json.loads(line)
    ids = [fields.get("trace_id"), fields.get("query_id")]
    ids += fields.get("retrieved_ids") or []
    ids += fields.get("relevant_ids") or []
    return all(isinstance(value, str) for value in ids)


def test_the_plain_lane_is_typed_as_the_json_lane_and_raises_what_the_engine_expects() -> None:
    """The plain lane's schema: ids and lists of ids as strings, as the JSON lane's output; its
    SQL raises the very error that sends a piece to the JSON lane."""
    assert f"error('{NOT_PLAIN}')" in load_sql("stg_plain_trace_fields")
    for name in ("trace_id", "query_id", "segment", "variant", "label_source", "timestamp"):
        assert PLAIN_FIELDS.field(name).type == pa.string()
    for name in ("retrieved_ids", "relevant_ids"):
        assert PLAIN_FIELDS.field(name).type == pa.list_(pa.string())


def test_the_plain_lane_attaches_its_id_lists_to_the_rows_of_the_same_lines() -> None:
    fields = pa.table(
        {
            "source_line": pa.array([3, 5, 9], pa.int64()),
            "retrieved_ids": pa.array([["a"], ["b", "c"], []], pa.list_(pa.string())),
        }
    )
    in_order = pa.table({"source_line": pa.array([3, 5, 9], pa.int64()), "x": [1, 2, 3]})
    shuffled = pa.table({"source_line": pa.array([9, 3, 5], pa.int64()), "x": [3, 1, 2]})
    for rows in (in_order, shuffled):
        out = validation._with_column_of(rows, fields, "retrieved_ids")
        assert out.to_pydict() == {
            "source_line": [3, 5, 9],
            "x": [1, 2, 3],
            "retrieved_ids": [["a"], ["b", "c"], []],
        }
    # a line the fields do not have, a line twice, a line missing
    for lines in ([3, 5, 8], [3, 3, 9], [3, 5]):
        with pytest.raises(AssertionError):
            validation._with_column_of(
                pa.table({"source_line": pa.array(lines, pa.int64())}), fields, "retrieved_ids"
            )


# ---- Parquet and Arrow rows: the plain lane reads columns of its types without JSON --------------


def typed_lanes(
    conn: duckdb.DuckDBPyConnection, rows: pa.Table, partition_date: date | None = DAY
) -> tuple[list[str], list[dict[str, object]], list[dict[str, object]]]:
    """(the lanes `_stage_records` went through, its rows, the JSON lane's rows) for Parquet or
    Arrow `rows`, turned into a piece as ingestion does."""
    piece = validation.rows_as_raw(conn, rows, "t.parquet", 0)
    # the JSON lane reads the records' text, written for every row
    texts = piece.records if piece.rows is None else validation._rows_as_json(conn, piece.rows)
    assert texts.column("raw_record").null_count == 0
    return through_lanes(conn, piece, texts, partition_date)


GRADES = pa.map_(pa.string(), pa.int32())


def test_typed_rows_are_read_by_the_plain_lane_without_their_json(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    rows = pa.table(
        {
            "trace_id": pa.array(["t1", "t2", "t1"], pa.large_string()),
            "query_id": ["q1", "q2", "q1"],
            # 23:30 at +02:00 is 21:30 UTC; an Arrow timestamp, not text
            "timestamp": pa.array(
                [datetime(2026, 11, 30, 21, 30, tzinfo=UTC)] * 3, pa.timestamp("us", "+02:00")
            ),
            "retrieved_ids": [["d1", "d2", "d1", "d3"], [], ["d1"]],
            "relevance_scores": pa.array([[("d3", 3), ("d9", 0)], None, []], GRADES),
            "relevant_ids": pa.array([None, None, None], pa.null()),  # an all-null column
            "extra": [1, 2, 3],  # a column the records do not read
        }
    )
    piece = validation.rows_as_raw(conn, rows, "t.parquet", 0)
    assert piece.typed is not None and piece.rows is not None
    assert piece.typed.column("scores_json").to_pylist() == ['{"d3":3,"d9":0}', None, "{}"]
    # the rows' JSON text is not written until a statement reads it
    assert piece.records.column("raw_record").null_count == 3
    taken, staged_rows, json_rows = typed_lanes(conn, rows)
    assert taken == ["stg_plain_trace_fields"]
    assert staged_rows == json_rows
    assert [row["reason"] for row in staged_rows] == [
        None,
        None,
        "duplicate trace_id t1 (first seen at t.parquet line 1)",
    ]
    first = staged_rows[0]
    assert first["served_at"] == datetime(2026, 11, 30, 21, 30, tzinfo=UTC)
    # d1's repeat at position 3 dropped, so d3 moves up from 4 to 3
    assert first["retrieved_ids"] == ["d1", "d2", "d3"] and first["n_duplicate_ids"] == 1
    assert first["labels"] == [
        {"doc_id": "d3", "grade": 3.0, "rank": 3},
        {"doc_id": "d9", "grade": 0.0, "rank": None},
    ]
    assert [row["is_judged"] for row in staged_rows] == [True, False, True]
    # the quarantined repeat keeps its row as JSON text, as the JSON lane writes it
    assert json.loads(str(staged_rows[2]["raw_record"]))["retrieved_ids"] == ["d1"]


def _plain_row(trace: str = "t9", **changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "trace_id": trace,
        "query_id": "q",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["d1", "d2"],
        "relevance_scores": [("d1", 2.0)],
    }
    return {**row, **changes}


SCORES = pa.map_(pa.string(), pa.float64())


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"retrieved_ids": ["d1", None]}, "retrieved_ids[1] is null"),
        ({"retrieved_ids": ["", "d2"]}, "retrieved_ids[0] is an empty string"),
        ({"retrieved_ids": None}, "missing required field retrieved_ids"),
        ({"trace_id": ""}, "trace_id must be a non-empty string"),
        ({"query_id": None}, "missing required field query_id"),
        ({"timestamp": "30/11/2026"}, "unparsable timestamp"),
        ({"relevance_scores": [("d1", -1.0)]}, 'relevance_scores["d1"] must be a finite'),
        ({"relevance_scores": [("d1", math.inf)]}, "must be a finite number >= 0 (got Infinity)"),
        ({"relevance_scores": [("", 1.0)]}, "relevance_scores has an empty document id"),
        ({"relevance_scores": [("d1", None)]}, 'relevance_scores["d1"] must be a finite'),
    ],
)
def test_typed_rows_with_a_record_that_is_not_plain_go_through_the_json_lane(
    conn: duckdb.DuckDBPyConnection, changes: dict[str, object], reason: str
) -> None:
    rows = pa.Table.from_pylist(
        [_plain_row("t1"), _plain_row("t9", **changes), _plain_row("t2")],
        schema=pa.schema(
            [
                ("trace_id", pa.string()),
                ("query_id", pa.string()),
                ("timestamp", pa.string()),
                ("retrieved_ids", pa.list_(pa.string())),
                ("relevance_scores", SCORES),
            ]
        ),
    )
    taken, staged_rows, json_rows = typed_lanes(conn, rows)
    assert taken == ["stg_plain_trace_fields", "stg_trace_fields"]
    assert staged_rows == json_rows
    assert [row["reason"] is None for row in staged_rows] == [True, False, True]
    assert reason in str(staged_rows[1]["reason"])


@pytest.mark.parametrize(
    ("name", "column"),
    [
        ("trace_id", pa.array([7], pa.int64())),  # read as its text by the JSON lane
        ("retrieved_ids", pa.array([[1, 2]], pa.list_(pa.int32()))),
        ("relevance_scores", pa.array([[("d1", "2")]], pa.map_(pa.string(), pa.string()))),
        ("relevance_scores", pa.array([[(1, 2)]], pa.map_(pa.int32(), pa.int32()))),
        ("relevance_scores", pa.array([{"d1": 2.0}], pa.struct([("d1", pa.float64())]))),
        ("relevance_scores", pa.array([[("d1", 1), ("d1", 2)]], GRADES)),  # graded twice
        ("timestamp", pa.array([date(2026, 11, 30)], pa.date32())),
        ("segment", pa.array([1], pa.int64())),
        ("trace_id", pa.array([None], pa.null())),  # required, so never null
    ],
)
def test_columns_of_other_types_leave_the_rows_to_the_json_lane(
    conn: duckdb.DuckDBPyConnection, name: str, column: pa.Array
) -> None:
    row = _plain_row()
    del row["relevance_scores"]
    rows = pa.Table.from_pylist([{**row, "segment": "faq"}])
    rows = rows.append_column("relevance_scores", pa.nulls(1, GRADES))
    rows = rows.set_column(rows.column_names.index(name), name, column)
    piece = validation.rows_as_raw(conn, rows, "t.parquet", 0)
    assert piece.typed is None
    taken, staged_rows, json_rows = typed_lanes(conn, rows)
    assert taken == ["stg_trace_fields"]
    assert staged_rows == json_rows


_timestamps = st.datetimes(
    min_value=datetime(2026, 11, 29), max_value=datetime(2026, 12, 2), timezones=st.just(UTC)
)
_typed_ids = st.one_of(_ids, st.just(""), st.none())
_typed_grades = st.one_of(
    st.integers(0, 3), st.floats(0, 3), st.sampled_from([-1.0, math.nan, None, 2.5])
)
# each column's type: as ingestion would be given it, or of a type the plain lane does not read
_column_types = {
    "trace_id": [pa.string(), pa.large_string()],
    "query_id": [pa.string(), pa.string_view()],
    "timestamp": [
        pa.timestamp("us", "UTC"),
        pa.timestamp("ns"),
        pa.timestamp("s", "-02:00"),
        pa.string(),
    ],
    "retrieved_ids": [pa.list_(pa.string()), pa.large_list(pa.large_string())],
    "relevant_ids": [pa.list_(pa.string()), pa.null()],
    "relevance_scores": [
        pa.map_(pa.string(), pa.int32()),
        pa.map_(pa.string(), pa.float64()),
        pa.map_(pa.string(), pa.float32()),
        pa.map_(pa.string(), pa.uint8()),
    ],
    "segment": [pa.string(), pa.null()],
}


@st.composite
def typed_rows(draw: st.DrawFn) -> pa.Table:
    """Arrow rows, mostly plain, in columns of types drawn from `_column_types`; some columns
    left out."""
    count = draw(st.integers(1, 8))
    grades = st.dictionaries(_ids, st.integers(0, 3), max_size=4).map(lambda d: list(d.items()))
    values: dict[str, st.SearchStrategy[object]] = {
        "trace_id": st.one_of(_ids, st.sampled_from(["t1", "t2"])),
        "query_id": _ids,
        "timestamp": _timestamps,
        "retrieved_ids": st.lists(_ids, max_size=6),
        "relevant_ids": st.one_of(st.none(), st.lists(_ids, max_size=3)),
        "relevance_scores": st.one_of(st.none(), grades),
        "segment": st.one_of(st.none(), st.sampled_from(["faq", "multi_hop"])),
    }
    if draw(st.booleans()):  # values the plain lane does not take, in half the pieces
        values["trace_id"] = st.one_of(values["trace_id"], st.just(""))
        values["query_id"] = st.one_of(_ids, st.none())
        values["retrieved_ids"] = st.one_of(
            st.lists(_ids, max_size=6), st.lists(_typed_ids, max_size=3), st.none()
        )
        values["relevance_scores"] = st.one_of(
            st.none(),
            grades,
            st.lists(st.tuples(st.one_of(_ids, st.just("")), _typed_grades), max_size=3),
        )
    columns = {}
    for name, kind_choices in _column_types.items():
        if name not in files.REQUIRED_FIELDS and draw(st.booleans()) and draw(st.booleans()):
            continue  # left out
        kind = draw(st.sampled_from(kind_choices))
        if pa.types.is_null(kind):
            columns[name] = pa.nulls(count, kind)
            continue
        column = [draw(values[name]) for _ in range(count)]
        if name == "timestamp" and pa.types.is_string(kind):
            offset = timezone(timedelta(hours=draw(st.sampled_from([-2, 0, 5]))))
            column = [value.astimezone(offset).isoformat() for value in column]  # type: ignore[attr-defined]
        elif name == "timestamp" and kind.tz is None:
            column = [value.replace(tzinfo=None) for value in column]  # type: ignore[attr-defined]
        elif name == "relevance_scores" and not pa.types.is_floating(kind.item_type):
            column = [
                None if v is None else [(k, g) for k, g in v if isinstance(g, int)]  # type: ignore[attr-defined]
                for v in column
            ]
        columns[name] = pa.array(column, kind)
    return pa.table(columns)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=typed_rows(), partition_date=st.sampled_from([DAY, None]))
def test_typed_rows_give_the_rows_of_the_json_lane(
    conn: duckdb.DuckDBPyConnection, rows: pa.Table, partition_date: date | None
) -> None:
    taken, staged_rows, json_rows = typed_lanes(conn, rows, partition_date)
    # as text: a NaN grade (of a quarantined record) is not == itself
    assert repr([sorted(row.items()) for row in staged_rows]) == repr(
        [sorted(row.items()) for row in json_rows]
    )
    # no record quarantined for its own fields (repeats aside): read without JSON
    if all(
        row["reason"] is None or str(row["reason"]).startswith("duplicate") for row in staged_rows
    ):
        assert taken == ["stg_plain_trace_fields"]
