"""Hostile trace files: every record read is scored or quarantined with its file, line (or Parquet
row), field and a reason, and the rest of the file is still scored.

The committed corpus is `tests/warehouse/hostile/` (text files, one problem per line; see its
README). Cases at the reading stage (invalid UTF-8, BOMs, gzip cut at every stage, 100k ids) are
in `tests/ingest/test_hostile_files.py`, Parquet with mistyped columns in
`test_hostile_parquet.py`, and the one-line-per-rule cases in `test_ingestion.py`; this file
covers the corpus, the decisions on timestamps and ids, and the accounting on random mixtures.
Each case is checked against both validators: DuckDB's (`sql/stg_trace_fields.sql` or its plain
lane, batch) and Python's (`records.py`, per example).
"""

from __future__ import annotations

import gzip
import json
import math
from datetime import UTC, date, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_pipeline.cli import main
from retrieval_pipeline.records import RecordError, outside_day, parse_line
from retrieval_pipeline.warehouse import connection, ingestion
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.hostile_records import (
    DAY,
    ID_RULE,
    OUT_OF_RANGE,
    Verdicts,
    assert_accounted,
    finite,
    good,
    good_line,
    python_verdicts,
    record_lines,
    verdicts,
)

CORPUS = Path(__file__).parent / "hostile"


# file -> {line: (field, reason)} of every quarantined line, and the trace ids scored.
EXPECTED: dict[str, tuple[Verdicts, list[str]]] = {
    "malformed.jsonl": (
        {
            **{line: (None, "malformed JSON") for line in range(2, 10)},
            10: (None, "not a JSON object (got a list)"),
            11: (None, "not a JSON object (got a string)"),
            12: (None, "not a JSON object (got an integer)"),
            13: (None, "not a JSON object (got null)"),
        },
        ["m-ok-1", "m-ok-2"],
    ),
    "retrieved_ids.jsonl": (
        {
            1: ("retrieved_ids", "retrieved_ids must be a list of ids (got a string)"),
            2: ("retrieved_ids", "retrieved_ids must be a list of ids (got an integer)"),
            3: ("retrieved_ids", "retrieved_ids must be a list of ids (got an object)"),
            4: ("retrieved_ids", f"retrieved_ids[2] is null; {ID_RULE}"),
            5: ("retrieved_ids", f"retrieved_ids[1] is an object; {ID_RULE}"),
            6: ("retrieved_ids", f"retrieved_ids[0] is a list; {ID_RULE}"),
            7: ("retrieved_ids", f"retrieved_ids[1] is a boolean; {ID_RULE}"),
            8: ("retrieved_ids", f"retrieved_ids[0] is a number with a fraction; {ID_RULE}"),
            9: ("retrieved_ids", f"retrieved_ids[1] is an empty string; {ID_RULE}"),
            10: (
                "retrieved_ids",
                f"retrieved_ids[0] is an integer outside the 64-bit range; {ID_RULE}",
            ),
            11: ("relevant_ids", f"relevant_ids[0] is null; {ID_RULE}"),
        },
        ["r-empty-list", "r-int-ids"],
    ),
    "grades.jsonl": (
        {
            1: finite("relevance_scores", "b", "-1"),
            2: finite("relevance_scores", "a", "-0.5"),
            3: finite("relevance_scores", "a", "NaN"),
            4: finite("relevance_scores", "a", "Infinity"),
            5: finite("relevance_scores", "a", "-Infinity"),
            6: finite("relevance_scores", "a", "1e309"),
            7: finite("relevance_scores", "a", "true"),
            8: finite("relevance_scores", "a", '"3"'),
            9: finite("relevance_scores", "a", "null"),
            10: finite("relevance_scores", "a", '{"grade":2}'),
            11: finite("relevance_scores", "a", "[2]"),
            12: finite("relevance_scores", "a", "-2.5e-7"),
            13: ("relevance_scores", 'relevance_scores grades document "a" more than once'),
            # empty ids are looked for before grades, in both validators
            14: ("relevance_scores", "relevance_scores has an empty document id"),
            15: finite("relevance_scores", 'say \\"é\\"', "-1"),
            16: (
                "relevance_scores",
                "relevance_scores must be an object of doc_id -> grade (got a string)",
            ),
        },
        ["g-ok-float", "g-ok-collide"],
    ),
    "ids.jsonl": (
        {
            1: (
                "trace_id",
                "trace_id must be a non-empty string or an integer (got an empty string)",
            ),
            2: ("trace_id", "trace_id must be a non-empty string or an integer (got a boolean)"),
            3: ("trace_id", "trace_id must be a non-empty string or an integer (got a list)"),
            4: (
                "trace_id",
                "trace_id must be a non-empty string or an integer (got a number with a fraction)",
            ),
            5: (
                "trace_id",
                "trace_id must be a non-empty string or an integer "
                "(got an integer outside the 64-bit range)",
            ),
            6: ("query_id", "query_id must be a non-empty string or an integer (got an object)"),
            7: (
                "query_id",
                "query_id must be a non-empty string or an integer (got an empty string)",
            ),
            8: ("segment", "segment must be a string (got an integer)"),
            9: ("label_source", "label_source must be a string (got a list)"),
            10: (None, "malformed JSON"),  # a lone surrogate escape is not Unicode
            15: (
                "trace_id",
                f"duplicate trace_id 12 (first seen at {CORPUS / 'ids.jsonl'} line 14)",
            ),
        },
        ["i-unicode-é中😀", "i-escaped-\x00-nul", " ", "12", "i-first-key-counts"],
    ),
    "timestamps.jsonl": (
        {
            12: ("timestamp", f'timestamp "9999-12-31T23:59:59-05:00" {OUT_OF_RANGE}'),
            13: ("timestamp", f'timestamp "0001-01-01T00:00:00+01:00" {OUT_OF_RANGE}'),
            14: ("timestamp", f'timestamp "0000-06-01" {OUT_OF_RANGE}'),
            **{
                line: ("timestamp", f"unparsable timestamp {json.dumps(text)}")
                for line, text in [
                    (15, "10000-01-01T00:00:00Z"),
                    (16, "epoch"),
                    (17, "infinity"),
                    (18, "2026-11-30T10:00:00 America/New_York"),
                    (19, "2026-W48-1"),
                    (20, "20261130T100000Z"),
                    (21, "2026-11-30T24:00:00Z"),
                    (22, "2026-12-31T23:59:60Z"),
                    (23, "2026-02-30"),
                    (24, " 2026-11-30T10:00:00Z"),
                    (26, ""),
                ]
            },
            25: ("timestamp", "timestamp must be an ISO 8601 string (got an integer)"),
        },
        [
            "t-no-zone",
            "t-z",
            "t-offset",
            "t-offset-compact",
            "t-offset-hours",
            "t-space",
            "t-minutes",
            "t-date",
            "t-nanos",
            "t-far-future",
            "t-year-0001",
        ],
    ),
    "empty.jsonl": ({}, []),
    "blank_lines.jsonl": ({}, []),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_quarantines_each_bad_line_and_scores_the_rest(name: str) -> None:
    path = CORPUS / name
    run = run_evaluation(path, "mrr")
    expected_bad, expected_scored = EXPECTED[name]
    assert verdicts(run) == expected_bad
    assert list(run.per_query.trace_id) == expected_scored
    assert (run.quarantine.source_file == str(path)).all()
    assert_accounted(run, len(record_lines(path)))
    for field, reason in expected_bad.values():
        assert field is None or field in reason  # the words name the field


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_python_validator_agrees_on_the_corpus(name: str) -> None:
    assert python_verdicts(CORPUS / name) == EXPECTED[name]


def test_the_whole_corpus_at_once_accounts_for_every_record(tmp_path: Path) -> None:
    run = run_evaluation(CORPUS, "mrr,ndcg@10")
    records = sum(len(record_lines(path)) for path in CORPUS.glob("*.jsonl"))
    assert_accounted(run, records)
    scored = [trace for _, traces in EXPECTED.values() for trace in traces]
    assert sorted(run.per_query.trace_id) == sorted(scored)
    out = tmp_path / "rejected.jsonl"
    result = CliRunner().invoke(main, ["evaluate", str(CORPUS), "--quarantine", str(out)])
    assert result.exit_code == 0, result.output
    assert f"{records} records" in result.output and f"{len(scored)} valid (" in result.output
    first_file = CORPUS / "grades.jsonl"  # the first file in name order with a bad line
    assert f"{first_file}:1: " + EXPECTED["grades.jsonl"][0][1][1] in result.output
    rejected = pd.read_json(out, lines=True)
    assert len(rejected) == records - len(scored)
    assert set(rejected.columns) >= {"source_file", "source_line", "field", "reason", "raw_record"}


def test_scored_values_of_unicode_and_colliding_ids() -> None:
    per_query = run_evaluation(CORPUS, "mrr,precision@5").per_query.set_index("trace_id")
    # "e\u0301" (e + combining accent) is the 4th id and the one relevant: ids are compared as
    # given, without Unicode normalisation
    assert per_query.loc["i-unicode-é中😀", "mrr"] == 1 / 4
    assert per_query.loc["i-unicode-é中😀", "segment"] == "naïve ✓"
    assert per_query.loc["i-escaped-\x00-nul", "mrr"] == 1.0  # NUL is part of the id
    assert per_query.loc[" ", "mrr"] == 1.0  # a blank id is still a non-empty string
    # 7 and "7" are one document: the repeat is dropped and the ranks close up
    assert per_query.loc["r-int-ids", "n_retrieved"] == 4
    assert per_query.loc["r-int-ids", "mrr"] == 1 / 2  # "8" is now at rank 2
    # relevant_ids [7, 8] with relevance_scores {"7": 2}: two labels, 7 graded 2
    assert per_query.loc["g-ok-collide", "n_relevant"] == 2
    assert per_query.loc["g-ok-collide", "precision@5"] == 2 / 5
    assert per_query.loc["12", "segment"] == "" and per_query.loc["12", "variant"] == ""


def test_repeated_top_level_field_keeps_the_first_in_both_validators() -> None:
    line = (CORPUS / "ids.jsonl").read_bytes().split(b"\n")[15]
    assert parse_line(line).trace_id == "i-first-key-counts"
    assert "i-first-key-counts" in EXPECTED["ids.jsonl"][1]


def _stored(
    path: Path, partition_date: date | None
) -> tuple[ingestion.IngestCounts, dict[str, tuple[date, datetime]]]:
    """Ingest `path`; the counts and each stored trace's (partition_date, served_at)."""
    conn = connection.connect(":memory:")
    counts = ingestion.ingest_traces(conn, [path], partition_date=partition_date)
    rows = conn.execute("select trace_id, partition_date, served_at from traces").fetchall()
    conn.close()
    return counts, {trace: (day, served) for trace, day, served in rows}


def test_timestamps_mean_the_same_instant_to_both_validators() -> None:
    path = CORPUS / "timestamps.jsonl"
    _, rows = _stored(path, None)
    for number, line in record_lines(path).items():
        if number in EXPECTED["timestamps.jsonl"][0]:
            continue
        record = parse_line(line)
        assert rows[record.trace_id][1] == record.served_at, record.trace_id
    assert rows["t-no-zone"][1] == datetime(2026, 11, 30, 10, tzinfo=UTC)  # no offset: UTC
    assert rows["t-offset"][1] == datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    assert rows["t-nanos"][1] == datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)  # to us
    assert rows["t-year-0001"][1] == datetime(1, 1, 1, tzinfo=UTC)
    # without a store day, each record goes under its own UTC date, far future included
    assert rows["t-offset"][0] == date(2026, 12, 1)
    assert rows["t-far-future"][0] == date(9999, 12, 31)


def test_the_store_day_is_authoritative_and_records_outside_it_are_counted() -> None:
    path = CORPUS / "timestamps.jsonl"
    counts, rows = _stored(path, DAY)
    valid = EXPECTED["timestamps.jsonl"][1]
    assert counts.valid == len(valid)
    assert {day for day, _ in rows.values()} == {DAY}  # kept, under the store's day
    bad = EXPECTED["timestamps.jsonl"][0]
    kept = [parse_line(line) for n, line in record_lines(path).items() if n not in bad]
    assert sorted(r.trace_id for r in kept) == sorted(valid)
    outside = sorted(r.trace_id for r in kept if outside_day(r, DAY))
    assert outside == ["t-far-future", "t-offset", "t-year-0001"]
    assert counts.outside_day == len(outside)


def test_far_future_timestamps_are_scored_in_evaluate() -> None:
    run = run_evaluation(CORPUS / "timestamps.jsonl", "mrr")
    assert "t-far-future" in set(run.per_query.trace_id)  # 9999-12-31 is a date like any other


def test_duplicate_trace_ids_across_the_files_of_one_day(tmp_path: Path) -> None:
    day = tmp_path / "traces" / f"date={DAY}"
    day.mkdir(parents=True)
    (day / "a.jsonl").write_bytes(good_line("t1") + b"\n" + good_line("7") + b"\n")
    pq.write_table(
        pa.table(
            {
                "trace_id": pa.array([7, 8], pa.int64()),  # 7 is the "7" of a.jsonl
                "query_id": ["q", "q"],
                "timestamp": ["2026-11-30T10:00:00Z"] * 2,
                "retrieved_ids": [["z"], ["y"]],
            }
        ),
        day / "b.parquet",
    )
    (day / "c.jsonl.gz").write_bytes(gzip.compress(good_line("t1") + b"\n" + good_line("8")))
    conn = connection.connect(":memory:")
    counts = ingestion.ingest_traces(conn, sorted(day.iterdir()), partition_date=DAY)
    assert (counts.read, counts.valid, counts.quarantined) == (6, 3, 3)
    rows = conn.execute(
        "select source_file, source_line, reason from quarantine order by all"
    ).fetchall()
    assert rows == [
        (
            str(day / "b.parquet"),
            1,
            f"duplicate trace_id 7 (first seen at {day / 'a.jsonl'} line 2)",
        ),
        (
            str(day / "c.jsonl.gz"),
            1,
            f"duplicate trace_id t1 (first seen at {day / 'a.jsonl'} line 1)",
        ),
        (
            str(day / "c.jsonl.gz"),
            2,
            f"duplicate trace_id 8 (first seen at {day / 'b.parquet'} line 2)",
        ),
    ]
    kept = conn.execute("select trace_id, retrieved_ids from traces order by 1").fetchall()
    assert kept == [("7", ["a", "b"]), ("8", ["y"]), ("t1", ["a", "b"])]  # the first ones
    conn.close()


def test_lenient_json_is_a_known_difference_between_the_validators(tmp_path: Path) -> None:
    """DuckDB's JSON reader accepts a trailing comma and `nan`/`inf` in any case; Python's
    json module (the per-example path) does not. Pinned so that a change is seen; see README."""
    trailing = good_line("comma")[:-1] + b",}"
    lowercase = good_line("nan-field")[:-1] + b', "latency": nan}'
    path = tmp_path / "lenient.jsonl"
    path.write_bytes(trailing + b"\n" + lowercase + b"\n")
    assert list(run_evaluation(path, "mrr").per_query.trace_id) == ["comma", "nan-field"]
    for line in (trailing, lowercase):
        with pytest.raises(RecordError, match="malformed JSON"):
            parse_line(line)


GOOD_RECORD = st.builds(
    lambda n, ids, grades: good(
        f"t{n}",
        retrieved_ids=ids,
        relevance_scores={str(k): g for k, g in grades.items()},
    ),
    st.integers(0, 30),
    st.lists(st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "é", "7"])), max_size=6),
    st.dictionaries(st.sampled_from(["a", "b", "7", "x"]), st.floats(0, 3), max_size=3),
)


BAD_VALUE = st.sampled_from(
    [
        ("retrieved_ids", None),
        ("retrieved_ids", ["a", None]),
        ("retrieved_ids", ["a", ""]),
        ("trace_id", ""),
        ("query_id", None),
        ("timestamp", "2026-13-01"),
        ("timestamp", "9999-12-31T23:59:59-05:00"),
        ("timestamp", "epoch"),
    ]
)


BAD_RECORD = st.tuples(GOOD_RECORD, BAD_VALUE).map(lambda pair: pair[0] | dict([pair[1]]))
BAD_GRADES = st.tuples(GOOD_RECORD, st.sampled_from([-1.0, math.nan, math.inf])).map(
    lambda pair: pair[0] | {"relevance_scores": {"a": pair[1]}}
)


MIXTURE = st.lists(st.one_of(GOOD_RECORD, BAD_RECORD, BAD_GRADES), max_size=25)


def _text_ids(ids: object) -> list[str | None] | None:
    if not isinstance(ids, list):
        return None
    return [None if i is None else str(i) for i in ids]


def _as_parquet(records: list[dict[str, object]], path: Path) -> None:
    """Typed columns (a list of ids, a map of grades); bad values are the ones Parquet can hold."""
    pq.write_table(
        pa.table(
            {
                "trace_id": pa.array([r["trace_id"] for r in records], pa.string()),
                "query_id": pa.array([r["query_id"] for r in records], pa.string()),
                "timestamp": pa.array([r["timestamp"] for r in records], pa.string()),
                "retrieved_ids": pa.array(
                    [_text_ids(r["retrieved_ids"]) for r in records], pa.list_(pa.string())
                ),
                "relevance_scores": pa.array(
                    [list(dict(r["relevance_scores"]).items()) for r in records],  # type: ignore[call-overload]
                    pa.map_(pa.string(), pa.float64()),
                ),
            }
        ),
        path,
    )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(jsonl=MIXTURE, parquet=MIXTURE)
def test_random_mixtures_account_for_every_record(
    tmp_path: Path, jsonl: list[dict[str, object]], parquet: list[dict[str, object]]
) -> None:
    folder = tmp_path / "mix"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    lines = [json.dumps(record, allow_nan=True) for record in jsonl]
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _as_parquet(parquet, folder / "b.parquet")
    run = run_evaluation(folder, "mrr,ndcg@5")
    assert_accounted(run, len(jsonl) + len(parquet))
    # the Python validator agrees on the JSON lines (the earlier valid trace_id wins)
    valid_ids: list[str] = []
    for line in lines:
        try:
            record = parse_line(line)
        except RecordError:
            continue
        if record.trace_id not in valid_ids:
            valid_ids.append(record.trace_id)
    scored_from_jsonl = run.per_query.trace_id.iloc[: len(valid_ids)].tolist()
    assert scored_from_jsonl == valid_ids
