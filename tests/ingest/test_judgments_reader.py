"""Judgments files (qrels, CSV, JSON lines, Parquet): kept, quarantined with reasons, counted."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.ingest.judgment_rules import check_columns, judgment_reason
from retrieval_pipeline.ingest.judgments import (
    Judgments,
    JudgmentsFileError,
    grades_by_query,
    read_judgments,
)

TREC_EVAL = Path(__file__).resolve().parents[1] / "data" / "trec_eval"


def _counts_add_up(j: Judgments) -> None:
    assert j.read == j.kept + j.quarantined
    assert j.kept == j.table.num_rows + j.superseded
    assert j.quarantine.num_rows == j.quarantined


def _reasons(j: Judgments) -> list[tuple[int, str | None, str]]:
    q = j.quarantine.to_pydict()
    return list(zip(q["source_line"], q["field"], q["reason"], strict=True))


def test_qrels_lines_are_kept_or_quarantined_with_file_line_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "set.qrels"
    path.write_text(
        "# a comment\n"  # 1 skipped
        "q1 0 d1 2\n"  # 2
        "q1 0 d2 -1\n"  # 3: judged non-relevant, grade 0
        "\n"  # 4 skipped
        "q1 0 d3\n"  # 5: three fields
        "q1 0 d4 1 extra\n"  # 6: five fields
        "q2 0 d1 x\n"  # 7: not a number
        "q2 0 d2 nan\n"  # 8: not finite
        "q2 0 d3 1e400\n"  # 9: beyond a double
        "q2\t0  d4   2.5  \r\n"  # 10: tabs, runs of spaces, a Windows line end
        "q3 0 d5 +1\n"  # 11
    )
    j = read_judgments(path)
    _counts_add_up(j)
    assert (j.read, j.kept, j.quarantined, j.skipped, j.superseded) == (9, 4, 5, 2, 0)
    assert j.table.select(["query_id", "doc_id", "grade", "source_line"]).to_pylist() == [
        {"query_id": "q1", "doc_id": "d1", "grade": 2.0, "source_line": 2},
        {"query_id": "q1", "doc_id": "d2", "grade": 0.0, "source_line": 3},
        {"query_id": "q2", "doc_id": "d4", "grade": 2.5, "source_line": 10},
        {"query_id": "q3", "doc_id": "d5", "grade": 1.0, "source_line": 11},
    ]
    assert j.table["label_source"].to_pylist() == ["judgments"] * 4
    assert j.table["judged_at"].null_count == 4
    assert set(j.table["source_file"].to_pylist()) == {str(path)}
    fields = "a qrels line is `qid iter docno rel` (4 fields)"
    assert _reasons(j) == [
        (5, None, f"has 3 fields; {fields}"),
        (6, None, f"has 5 fields; {fields}"),
        (7, "grade", 'grade is not a number (got "x")'),
        (8, "grade", 'grade is not finite (got "nan")'),
        (9, "grade", 'grade is not finite (got "1e400")'),
    ]
    assert j.quarantine["raw_record"].to_pylist()[0] == "q1 0 d3"
    assert j.queries == 3


def test_trec_evals_qrels_read_whole_by_content(tmp_path: Path) -> None:
    """`qrels.test` has no known extension: its content says qrels."""
    j = read_judgments(TREC_EVAL / "qrels.test")
    _counts_add_up(j)
    assert (j.read, j.kept, j.quarantined, j.superseded) == (3681, 3681, 0, 0)
    grades = grades_by_query(j.table)
    assert {q: len(docs) for q, docs in grades.items()} == {"301": 1708, "302": 1061, "303": 912}
    assert sum(g >= 1 for docs in grades.values() for g in docs.values()) == 561
    assert grades["301"]["CR93E-1282"] == 1.0


def test_csv_with_extra_columns_timestamps_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "clicks.csv"
    path.write_bytes(
        b"\xef\xbb\xbfquery_id,doc_id,grade,judged_at,label_source,estimate,impressions\n"
        b"q1,d1,2,2026-11-01T10:00:00Z,clicks,0.61,120\n"  # 2
        b"q1,d2,0.5,2026-11-01 10:00:00+01:00,,0.2,5\n"  # 3: offset; empty label_source
        b"q1,,1,,,0.1,1\n"  # 4: empty doc_id cell
        b"q2,d1,-1,,,0,0\n"  # 5: negative outside qrels
        b"q2,d2,1,yesterday,,0,0\n"  # 6
        b"q2,d3,1\n"  # 7: too few fields
        b'"q 3","d\n4",3,,,,\n'  # 8-9: a quoted newline inside a field
        b"q4,d1,\xff,,,,\n"  # 10: invalid UTF-8
        b"q4,d2,3,2026-11-30,,,\n"  # 11: a date alone
    )
    j = read_judgments(path)
    _counts_add_up(j)
    assert (j.read, j.kept, j.quarantined, j.skipped) == (9, 4, 5, 1)
    rows = j.table.select(["query_id", "doc_id", "grade", "judged_at", "label_source"])
    assert rows.to_pylist() == [
        {"query_id": "q 3", "doc_id": "d\n4", "grade": 3.0, "judged_at": None,
         "label_source": "judgments"},
        {"query_id": "q1", "doc_id": "d1", "grade": 2.0,
         "judged_at": datetime(2026, 11, 1, 10, tzinfo=UTC), "label_source": "clicks"},
        {"query_id": "q1", "doc_id": "d2", "grade": 0.5,
         "judged_at": datetime(2026, 11, 1, 9, tzinfo=UTC), "label_source": "judgments"},
        {"query_id": "q4", "doc_id": "d2", "grade": 3.0,
         "judged_at": datetime(2026, 11, 30, tzinfo=UTC), "label_source": "judgments"},
    ]  # fmt: skip
    assert j.table["source_line"].to_pylist() == [8, 2, 3, 11]
    assert _reasons(j) == [
        (4, "doc_id", "missing field doc_id"),
        (5, "grade", 'grade must be >= 0 (got "-1")'),
        (6, "judged_at", 'unparsable judged_at "yesterday"'),
        (7, None, "has 3 fields; the header has 7"),
        (10, None, "invalid UTF-8 at byte 6 of the line"),
    ]


def test_a_csv_without_a_required_column_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("query_id,document,grade\nq,d,1\n")
    with pytest.raises(JudgmentsFileError, match=r"labels.csv: no column doc_id; judgments need"):
        read_judgments(path)


def test_json_lines_take_typed_values(tmp_path: Path) -> None:
    lines = [
        {"query_id": 301, "doc_id": "d1", "grade": 1, "estimate": 0.3},  # 1: integer query id
        {"query_id": "q", "doc_id": "d2", "grade": "2"},  # 2: a grade as text
        {"query_id": "q", "doc_id": "d3", "grade": True},  # 3
        {"query_id": "", "doc_id": "d4", "grade": 1},  # 4
        {"doc_id": "d5", "grade": 1},  # 5
        {"query_id": "q", "doc_id": 1.5, "grade": 1},  # 6
        {"query_id": "q", "doc_id": "d7", "grade": 1, "judged_at": 20261130},  # 7
        {"query_id": "q", "doc_id": "d8", "grade": 1, "label_source": ["x"]},  # 8
    ]
    path = tmp_path / "labels.jsonl"
    text = "".join(json.dumps(line) + "\n" for line in lines) + "\n[1]\n{not json\n"
    path.write_text(text)
    j = read_judgments(path)
    _counts_add_up(j)
    assert (j.read, j.kept, j.quarantined, j.skipped) == (10, 1, 9, 1)
    assert j.table.select(["query_id", "doc_id", "grade"]).to_pylist() == [
        {"query_id": "301", "doc_id": "d1", "grade": 1.0}
    ]
    assert _reasons(j) == [
        (2, "grade", 'grade must be a number (got a string: "2")'),
        (3, "grade", "grade must be a number (got a boolean)"),
        (4, "query_id", "empty query_id"),
        (5, "query_id", "missing field query_id"),
        (6, "doc_id", "doc_id must be a string or an integer (got a number with a fraction)"),
        (7, "judged_at", "judged_at must be an ISO 8601 string (got an integer)"),
        (8, "label_source", "label_source must be a string (got a list)"),
        (10, None, "not a JSON object (got a list)"),
        (11, None, "malformed JSON"),
    ]


def test_parquet_columns_are_checked_by_type(tmp_path: Path) -> None:
    path = tmp_path / "labels.parquet"
    table = pa.table(
        {
            "query_id": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "doc_id": ["a", "b", None, "d", "e"],
            "grade": [1.0, float("nan"), 2.0, -0.5, 3.0],
            "judged_at": pa.array(
                [datetime(2026, 11, 1, 12), None, None, None, datetime(2026, 11, 2)],
                pa.timestamp("ms"),
            ),
            "impressions": [1, 2, 3, 4, 5],
        }
    )
    pq.write_table(table, path)
    j = read_judgments(path)
    _counts_add_up(j)
    kept = j.table.select(["query_id", "doc_id", "grade", "judged_at", "source_line"])
    assert kept.to_pylist() == [
        {"query_id": "1", "doc_id": "a", "grade": 1.0,
         "judged_at": datetime(2026, 11, 1, 12, tzinfo=UTC), "source_line": 1},
        {"query_id": "5", "doc_id": "e", "grade": 3.0,
         "judged_at": datetime(2026, 11, 2, tzinfo=UTC), "source_line": 5},
    ]  # fmt: skip
    assert _reasons(j) == [
        (2, "grade", 'grade is not finite (got "nan")'),
        (3, "doc_id", "missing field doc_id"),
        (4, "grade", 'grade must be >= 0 (got "-0.5")'),
    ]
    assert json.loads(j.quarantine["raw_record"][1].as_py())["query_id"] == 3


def test_a_pair_judged_again_keeps_the_latest_judgment(tmp_path: Path) -> None:
    """Latest judged_at wins; no judged_at is older than any; else the later line, files in the
    order given."""
    first = tmp_path / "a.csv"
    first.write_text(
        "query_id,doc_id,grade,judged_at\n"
        "q,d1,3,2026-11-02T00:00:00Z\n"  # 2: newer than line 3
        "q,d1,1,2026-11-01T00:00:00Z\n"  # 3
        "q,d2,1,\n"  # 4: no time
        "q,d2,2,2026-01-01T00:00:00Z\n"  # 5: any time beats none
        "q,d3,1,\n"  # 6
        "q,d3,2,\n"  # 7: same (no) time: the later line
    )
    second = tmp_path / "b.qrels"
    second.write_text("q 0 d3 0\nq 0 d4 1\n")  # d3 again, later still
    j = read_judgments([first, second])
    _counts_add_up(j)
    assert (j.read, j.kept, j.superseded, j.files) == (8, 8, 4, 2)
    assert grades_by_query(j.table) == {"q": {"d1": 3.0, "d2": 2.0, "d3": 0.0, "d4": 1.0}}
    assert j.repeats == (
        f"query q document d1: {first}:3 replaced by {first}:2",
        f"query q document d2: {first}:4 replaced by {first}:5",
        f"query q document d3: {first}:6 replaced by {second}:1",
        f"query q document d3: {first}:7 replaced by {second}:1",
    )
    # the other way round, the CSV's line 7 is the later one
    assert grades_by_query(read_judgments([second, first]).table)["q"]["d3"] == 2.0


def test_formats_by_name_by_content_and_folders(tmp_path: Path) -> None:
    folder = tmp_path / "judgments"
    (folder / "more").mkdir(parents=True)
    (folder / "a.qrels.gz").write_bytes(gzip.compress(b"q 0 d1 1\n"))
    (folder / "more" / "b.jsonl").write_text('{"query_id": "q", "doc_id": "d2", "grade": 2}\n')
    (folder / "README.md").write_text("q 0 d9 9\n")  # not a judgments name: not read
    (folder / ".hidden.qrels").write_text("q 0 d9 9\n")
    j = read_judgments(folder)
    assert (j.files, grades_by_query(j.table)) == (2, {"q": {"d1": 1.0, "d2": 2.0}})

    sniffed = {
        "labels": '{"query_id": "q", "doc_id": "d", "grade": 1}\n',
        "labels.dat": "query_id,doc_id,grade\nq,d,1\n",
        "run.test": "q 0 d 1\n",
    }
    for name, text in sniffed.items():
        (tmp_path / name).write_text(text)
        assert grades_by_query(read_judgments(tmp_path / name).table) == {"q": {"d": 1.0}}, name
    pq.write_table(pa.table({"query_id": ["q"], "doc_id": ["d"], "grade": [1]}), tmp_path / "pq")
    assert grades_by_query(read_judgments(tmp_path / "pq").table) == {"q": {"d": 1.0}}


TEXT_VALUES = st.one_of(
    st.none(),
    st.sampled_from(["", " ", "0", "1", "-1", "2.5", "+3", ".5", "1e3", "100", "100.5", "1e400",
                     "nan", "inf", "x", "1_0", " 7 ", "2026-11-30T10:00:00Z", "2026-11-30",
                     "24:00", "q"]),
    st.text(max_size=6),
)  # fmt: skip


ROWS = st.lists(
    st.fixed_dictionaries(
        {name: TEXT_VALUES for name in ("query_id", "doc_id", "grade", "judged_at")}
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, kind=st.sampled_from(["qrels", "csv"]))
def test_column_wise_and_record_wise_rules_agree(
    rows: list[dict[str, str | None]], kind: str
) -> None:
    columns = {name: pa.array([row[name] for row in rows], pa.string()) for name in rows[0]}
    lines = pa.array(range(1, len(rows) + 1), pa.int64())
    checked = check_columns(columns, "f", lines, kind)
    refused = {row for row, _ in checked.bad}
    kept_rows = [i for i in range(len(rows)) if i not in refused]
    assert checked.kept["source_line"].to_pylist() == [i + 1 for i in kept_rows]
    for i, row in enumerate(rows):
        assert (judgment_reason(row, kind) is None) == (i not in refused), row


def test_grades_past_the_trace_records_range_are_quarantined_in_every_format(
    tmp_path: Path,
) -> None:
    """A grade of 1024 is a gain of 2^1024 - 1 (infinite) and nDCG inf / inf: the judgments take
    the trace records' range, 0 to records.MAX_GRADE (100), in every format."""
    (tmp_path / "a.qrels").write_text("q 0 d1 100\nq 0 d2 1024\nq 0 d3 1e300\n")
    (tmp_path / "b.csv").write_text("query_id,doc_id,grade\nq,d4,100.5\nq,d5,0\n")
    (tmp_path / "c.jsonl").write_text(
        '{"query_id": "q", "doc_id": "d6", "grade": 1e300}\n'
        '{"query_id": "q", "doc_id": "d7", "grade": 1024}\n'
    )
    pq.write_table(
        pa.table({"query_id": ["q", "q"], "doc_id": ["d8", "d9"], "grade": [101, 3]}),
        tmp_path / "d.parquet",
    )
    j = read_judgments(tmp_path)
    _counts_add_up(j)
    assert grades_by_query(j.table) == {"q": {"d1": 100.0, "d5": 0.0, "d9": 3.0}}
    rule = "grade must be a grade from 0 to 100"
    q = j.quarantine.to_pydict()
    assert list(zip(q["source_file"], q["source_line"], q["field"], q["reason"], strict=True)) == [
        (str(tmp_path / "a.qrels"), 2, "grade", f'{rule} (got "1024")'),
        (str(tmp_path / "a.qrels"), 3, "grade", f'{rule} (got "1e300")'),
        (str(tmp_path / "b.csv"), 2, "grade", f'{rule} (got "100.5")'),
        (str(tmp_path / "c.jsonl"), 1, "grade", f'{rule} (got "1e+300")'),
        (str(tmp_path / "c.jsonl"), 2, "grade", f'{rule} (got "1024")'),
        (str(tmp_path / "d.parquet"), 1, "grade", f'{rule} (got "101")'),
    ]
