"""Ingestion: every record read is scored or quarantined with its file, line, field and reason."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import threading
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.records import OVERALL_SEGMENT_REASON, RecordError, parse_line
from retrieval_pipeline.warehouse import connection, ingestion, sources
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.processes import default_signals
from tests.trace_records import GOOD, good, write_lines

# (line, field, reason) for one bad record each; the reasons are what a user reads.
BAD_RECORDS = [
    ('{"trace_id": "x", ', None, "malformed JSON"),
    ("[1, 2]", None, "not a JSON object (got a list)"),
    (
        json.dumps({k: v for k, v in GOOD.items() if k != "trace_id"}),
        "trace_id",
        "missing required field trace_id",
    ),
    (json.dumps(GOOD | {"trace_id": None}), "trace_id", "missing required field trace_id"),
    (
        json.dumps(good("")),
        "trace_id",
        "trace_id must be a non-empty string or an integer (got an empty string)",
    ),
    (
        json.dumps(GOOD | {"trace_id": 1.5}),
        "trace_id",
        "trace_id must be a non-empty string or an integer (got a number with a fraction)",
    ),
    (json.dumps({**good("q"), "query_id": None}), "query_id", "missing required field query_id"),
    (
        json.dumps({**good("ts0"), "timestamp": None}),
        "timestamp",
        "missing required field timestamp",
    ),
    (
        json.dumps(good("ts1", timestamp=1764496800)),
        "timestamp",
        "timestamp must be an ISO 8601 string (got an integer)",
    ),
    (
        json.dumps(good("ts2", timestamp="yesterday")),
        "timestamp",
        'unparsable timestamp "yesterday"',
    ),
    (
        json.dumps({**good("r0"), "retrieved_ids": None}),
        "retrieved_ids",
        "missing required field retrieved_ids",
    ),
    (
        json.dumps(good("r1", retrieved_ids="a,b")),
        "retrieved_ids",
        "retrieved_ids must be a list of ids (got a string)",
    ),
    (
        json.dumps(good("r2", retrieved_ids=5)),
        "retrieved_ids",
        "retrieved_ids must be a list of ids (got an integer)",
    ),
    (
        json.dumps(good("r3", retrieved_ids=["a", None])),
        "retrieved_ids",
        "retrieved_ids[1] is null; ids must be non-empty strings or integers",
    ),
    (
        json.dumps(good("r4", retrieved_ids=[{"id": "a"}])),
        "retrieved_ids",
        "retrieved_ids[0] is an object; ids must be non-empty strings or integers",
    ),
    (
        json.dumps(good("r5", retrieved_ids=["a", ""])),
        "retrieved_ids",
        "retrieved_ids[1] is an empty string; ids must be non-empty strings or integers",
    ),
    (
        json.dumps(good("r6", retrieved_ids=[True])),
        "retrieved_ids",
        "retrieved_ids[0] is a boolean; ids must be non-empty strings or integers",
    ),
    (
        json.dumps(good("l0", relevant_ids="b")),
        "relevant_ids",
        "relevant_ids must be a list of ids (got a string)",
    ),
    (
        json.dumps(good("l1", relevant_ids=[["b"]])),
        "relevant_ids",
        "relevant_ids[0] is a list; ids must be non-empty strings or integers",
    ),
    (
        json.dumps(good("g0", relevance_scores=[1, 2])),
        "relevance_scores",
        "relevance_scores must be an object of doc_id -> grade (got a list)",
    ),
    (
        json.dumps(good("g1", relevance_scores={"a": -1})),
        "relevance_scores",
        'relevance_scores["a"] must be a finite number >= 0 (got -1)',
    ),
    (
        json.dumps(good("g2", relevance_scores={"a": "high"})),
        "relevance_scores",
        'relevance_scores["a"] must be a finite number >= 0 (got "high")',
    ),
    (
        json.dumps(good("g3", relevance_scores={"a": True})),
        "relevance_scores",
        'relevance_scores["a"] must be a finite number >= 0 (got true)',
    ),
    (
        '{"trace_id": "g4", "query_id": "q", "timestamp": "2026-11-30", "retrieved_ids": [],'
        ' "relevance_scores": {"a": NaN}}',
        "relevance_scores",
        'relevance_scores["a"] must be a finite number >= 0 (got NaN)',
    ),
    (
        '{"trace_id": "g5", "query_id": "q", "timestamp": "2026-11-30", "retrieved_ids": [],'
        ' "relevance_scores": {"a": Infinity}}',
        "relevance_scores",
        'relevance_scores["a"] must be a finite number >= 0 (got Infinity)',
    ),
    (
        json.dumps(good("g6", relevance_scores={"": 1})),
        "relevance_scores",
        "relevance_scores has an empty document id",
    ),
    (json.dumps(good("s0", segment=3)), "segment", "segment must be a string (got an integer)"),
    (json.dumps(good("v0", variant=["a"])), "variant", "variant must be a string (got a list)"),
    # the overall rows' name: the trace would be pooled with them, counted twice
    (
        json.dumps(good("s1", segment="__all__")),
        "segment",
        'segment "__all__" is reserved for all segments together in reports and checks;'
        " rename this segment",
    ),
]


@pytest.mark.parametrize(("line", "field", "reason"), BAD_RECORDS)
def test_each_bad_record_is_quarantined_with_its_reason(
    tmp_path: Path, line: str, field: str | None, reason: str
) -> None:
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(good("ok-1")), line])
    run = run_evaluation(path, "mrr")
    assert (run.ingest.read, run.ingest.valid, run.ingest.quarantined) == (2, 1, 1)
    bad = run.quarantine.iloc[0]
    assert (bad.source_file, bad.source_line) == (str(path), 2)
    assert bad.field == field or (field is None and pd.isna(bad.field))
    assert bad.reason == reason
    assert bad.raw_record == line  # kept whole: nothing is lost
    assert list(run.per_query.trace_id) == ["ok-1"]


@pytest.mark.parametrize(("line", "field", "reason"), BAD_RECORDS)
def test_python_validator_gives_the_same_verdict(line: str, field: str | None, reason: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_line(line)
    assert (caught.value.field, caught.value.reason) == (field, reason)


def test_duplicate_trace_id_quarantines_the_later_one_across_files(tmp_path: Path) -> None:
    day = tmp_path / "day"
    day.mkdir()
    write_lines(day / "a.jsonl", [json.dumps(good("same")), json.dumps(good("other"))])
    write_lines(day / "b.jsonl", [json.dumps(good("same", retrieved_ids=["z"]))])
    run = run_evaluation(day, "mrr")
    assert run.ingest.read == 3 and run.ingest.quarantined == 1
    bad = run.quarantine.iloc[0]
    assert bad.source_file == str(day / "b.jsonl")
    assert bad.reason == f"duplicate trace_id same (first seen at {day / 'a.jsonl'} line 1)"
    kept = run.per_query.set_index("trace_id")
    assert kept.loc["same", "n_retrieved"] == 2  # the first one, a and b


def test_parquet_rows_follow_the_same_rules(tmp_path: Path) -> None:
    table = pa.table(
        {
            "trace_id": ["p1", "p2", "p3", "p4"],
            "query_id": ["q", "q", "q", "q"],
            "timestamp": ["2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z", "bad", "2026-11-30"],
            "retrieved_ids": [["a", "b"], ["b", None], ["a"], ["a"]],
            "relevance_scores": pa.array(
                [[("b", 2.0)], [("a", 1.0)], [], []], type=pa.map_(pa.string(), pa.float64())
            ),
            "segment": [None, None, None, "__all__"],
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    run = run_evaluation(path, "mrr")
    assert (run.ingest.read, run.ingest.valid) == (4, 1)
    assert run.per_query.iloc[0]["mrr"] == pytest.approx(1 / 2)
    reasons = dict(zip(run.quarantine.source_line, run.quarantine.reason, strict=True))
    assert reasons == {
        2: "retrieved_ids[1] is null; ids must be non-empty strings or integers",
        3: 'unparsable timestamp "bad"',
        4: OVERALL_SEGMENT_REASON,
    }


def test_reingesting_a_partition_replaces_it(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(good("a")), "{bad"])
    for _ in range(3):
        ingestion.ingest_traces(conn, [path], partition_date=date(2026, 11, 30))
    counts = conn.execute("select (select count(*) from traces), (select count(*) from quarantine)")
    assert counts.fetchone() == (1, 1)


record_lines = st.one_of(
    st.integers(0, 10_000).map(lambda i: json.dumps(good(f"t{i % 40}"))),  # repeats -> duplicates
    st.sampled_from([line for line, _, _ in BAD_RECORDS]),
    st.text(max_size=30).filter(lambda t: "\n" not in t and "\r" not in t),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(record_lines, max_size=40))
@example(lines=["\ufeff"])  # a line that is only a byte-order mark is blank
def test_read_equals_scored_plus_quarantined(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "mix.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = run_evaluation(path, "mrr")
    # the reader's blank lines: nothing but whitespace once a leading byte-order mark is dropped
    records = [line for line in lines if line.encode().removeprefix(b"\xef\xbb\xbf").strip()]
    assert run.ingest.read == len(records)
    assert run.ingest.read == run.ingest.valid + run.ingest.quarantined
    assert len(run.per_query) == run.ingest.valid
    assert len(run.quarantine) == run.ingest.quarantined
    # the Python validator agrees on which records are valid (first occurrence of an id)
    seen: set[str] = set()
    expected_valid = 0
    for line in records:
        try:
            record = parse_line(line)
        except RecordError:
            continue
        if record.trace_id not in seen:
            seen.add(record.trace_id)
            expected_valid += 1
    assert run.ingest.valid == expected_valid


def _outcome(
    path: Path,
) -> tuple[ingestion.IngestCounts, dict[Any, list[Any]], dict[Any, list[Any]]]:
    run = run_evaluation(path, "mrr,ndcg@10")
    per_query = run.per_query.sort_values("trace_id").reset_index(drop=True)
    quarantine = run.quarantine[["source_file", "source_line", "field", "reason", "raw_record"]]
    return run.ingest, per_query.to_dict("list"), quarantine.to_dict("list")


def test_pieces_do_not_change_any_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Repeated trace_ids within and across files and pieces, bad records, repeated retrieved ids,
    # a gzip file cut short and a Parquet file.
    lines = [json.dumps(good(f"t{i % 40}", retrieved_ids=["a", f"d{i}", "a"])) for i in range(60)]
    lines[7:7] = [line for line, _, _ in BAD_RECORDS]
    write_lines(tmp_path / "a.jsonl", lines)
    packed = gzip.compress(("\n".join(lines[::-1]) + "\n").encode())
    (tmp_path / "b.jsonl.gz").write_bytes(packed[: len(packed) * 3 // 4])
    rows = [good(f"p{i % 30}", retrieved_ids=[f"d{i}", "x", f"d{i}"]) for i in range(45)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    whole = _outcome(tmp_path)
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 300)  # a few lines a piece
    monkeypatch.setattr(sources, "ROWS_PER_PIECE", 7)
    assert _outcome(tmp_path) == whole
    # read 64 bytes at a time: pieces of 300 bytes, the first file's first of 100 (a line)
    monkeypatch.setattr(jsonl, "_READ_BYTES", 64)
    monkeypatch.setattr(jsonl, "FIRST_PIECE_BYTES", 100)
    monkeypatch.setattr(sources, "ROWS_PER_PIECE", 50)
    assert _outcome(tmp_path) == whole
    ingest = whole[0]
    assert isinstance(ingest, ingestion.IngestCounts)
    assert ingest.read == ingest.valid + ingest.quarantined
    assert ingest.duplicate_ids_dropped > 0
    reasons = whole[2]["reason"]
    assert any("duplicate trace_id t1 (first seen at " in r for r in reasons)
    assert any("gzip stream is truncated" in r for r in reasons)


def test_a_dataframe_is_read_in_pieces_numbered_by_its_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rows 1-20; row 9 lacks its query_id, rows 12 and 19 repeat row 2's trace_id
    rows = [good(f"t{i}", retrieved_ids=["a", f"d{i}", "a"]) for i in range(1, 21)]
    rows[8]["query_id"] = None
    rows[11]["trace_id"] = rows[18]["trace_id"] = "t2"
    frame = pd.DataFrame(rows)

    def outcome() -> tuple[object, ...]:
        run = run_evaluation(frame, "mrr")
        quarantine = run.quarantine[["source_file", "source_line", "reason"]].to_dict("list")
        return run.ingest, run.per_query.to_dict("list"), quarantine

    whole = outcome()
    monkeypatch.setattr(sources, "ROWS_PER_PIECE", 7)
    pieces = [
        piece.records.column("source_line").to_pylist() for piece in sources._frame_pieces(frame)
    ]
    assert pieces == [list(range(1, 8)), list(range(8, 15)), list(range(15, 21))]
    assert outcome() == whole
    ingest, per_query, quarantine = whole
    assert isinstance(ingest, ingestion.IngestCounts)
    assert (ingest.read, ingest.valid, ingest.duplicate_ids_dropped) == (20, 17, 17)
    assert quarantine == {
        "source_file": ["<DataFrame>"] * 3,
        "source_line": [9, 12, 19],
        "reason": [
            "missing required field query_id",
            "duplicate trace_id t2 (first seen at <DataFrame> line 2)",
            "duplicate trace_id t2 (first seen at <DataFrame> line 2)",
        ],
    }
    assert isinstance(per_query, dict) and len(per_query["trace_id"]) == 17


def test_a_failed_ingestion_keeps_the_day_and_no_staging_files(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    day = date(2026, 11, 30)
    folder = tmp_path / "day"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [json.dumps(good("a")), json.dumps(good("b"))])
    staging = tmp_path / "w.duckdb.staging"
    written: list[Path] = []
    write_staged = ingestion._write_staged

    def spy(conn: duckdb.DuckDBPyConnection, statement: str, path: Path) -> bool:
        written.append(path)
        return write_staged(conn, statement, path)

    monkeypatch.setattr(ingestion, "_write_staged", spy)
    ingestion.ingest_traces(conn, [folder], partition_date=day)
    assert written == []  # a new day has nothing to keep: its rows went straight in
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
    (staging / "killed-run").mkdir(parents=True)  # what a killed ingestion would leave
    (staging / "killed-run" / "traces-000000.parquet").write_bytes(b"PAR1")
    # the day again: the second file fails after the first one's piece is staged, and the day
    # keeps its rows
    write_lines(folder / "a.jsonl", [json.dumps(good("c"))])
    pq.write_table(pa.table({"trace_id": ["x"]}), folder / "b.parquet")
    with pytest.raises(TraceFileError, match="lacks required column"):
        ingestion.ingest_traces(conn, [folder], partition_date=day)
    assert written and all(path.parent == staging for path in written)
    assert sorted(conn.execute("select trace_id from traces").fetchall()) == [("a",), ("b",)]
    assert not staging.exists()


def test_a_failed_ingestion_of_a_new_day_leaves_it_empty(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    day, other = date(2026, 11, 30), date(2026, 11, 29)
    kept = write_lines(tmp_path / "other.jsonl", [json.dumps(good("o"))])
    ingestion.ingest_traces(conn, [kept], partition_date=other)
    folder = tmp_path / "day"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [json.dumps(good("a")), "{bad"])
    pq.write_table(pa.table({"trace_id": ["x"]}), folder / "b.parquet")
    with pytest.raises(TraceFileError, match="lacks required column"):
        ingestion.ingest_traces(conn, [folder], partition_date=day)
    # a.jsonl's rows went in before b.parquet failed, and were taken out again
    assert conn.execute("select partition_date, trace_id from traces").fetchall() == [(other, "o")]
    assert conn.execute("select count(*) from quarantine").fetchone() == (0,)
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)


@pytest.mark.parametrize("stored_before", [False, True])
def test_a_piece_that_cannot_be_written_fails_the_ingestion_and_keeps_the_day(
    tmp_path: Path,
    conn: duckdb.DuckDBPyConnection,
    monkeypatch: pytest.MonkeyPatch,
    stored_before: bool,
) -> None:
    """Pieces are written in a second thread while the next one is validated: a write that
    fails is raised by `ingest_traces`, nothing is written after it, and the day holds what it
    held before (straight in for a new day, staged for one that holds rows)."""
    day = date(2026, 11, 30)
    folder = tmp_path / "day"
    folder.mkdir()
    if stored_before:
        write_lines(folder / "a.jsonl", [json.dumps(good("old"))])
        ingestion.ingest_traces(conn, [folder], partition_date=day)
    write_lines(folder / "a.jsonl", [json.dumps(good(f"t{i}")) for i in range(6)])
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 1)  # a line a piece
    monkeypatch.setattr(jsonl, "_READ_BYTES", 1)
    monkeypatch.setattr(ingestion, "ROW_GROUP_ROWS", 1)  # straight in: each piece written
    name = "_write_piece" if stored_before else "_insert_piece"
    write_piece = getattr(ingestion, name)
    threads: list[str] = []

    def fail_the_third(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        if len(threads) == 3:
            raise OSError("No space left on device")
        return write_piece(*args)

    monkeypatch.setattr(ingestion, name, fail_the_third)
    with pytest.raises(OSError, match="No space left on device"):
        ingestion.ingest_traces(conn, [folder], partition_date=day)
    assert len(threads) == 3 and all(name.startswith("write-behind") for name in threads)
    stored = conn.execute("select trace_id from traces").fetchall()
    assert stored == ([("old",)] if stored_before else [])
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
    assert not (tmp_path / "w.duckdb.staging").exists()


def _ingest_then_die(database: str, folder: str, day: date) -> None:
    """In a child process: ingest `folder` a line a piece, killed by SIGKILL after the second
    piece went in (no clean-up runs)."""
    import signal

    default_signals()  # a spawned process: no preexec_fn, so it resets them itself
    jsonl.PIECE_BYTES = jsonl._READ_BYTES = 1
    ingestion.ROW_GROUP_ROWS = 1  # each piece written as it comes
    pieces = 0
    insert_piece = ingestion._insert_piece

    def insert_then_die(conn: duckdb.DuckDBPyConnection) -> None:
        nonlocal pieces
        insert_piece(conn)
        pieces += 1
        if pieces == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    ingestion._insert_piece = insert_then_die
    ingestion.ingest_traces(connection.connect(database), [Path(folder)], partition_date=day)


def test_a_killed_ingestion_of_a_new_day_is_undone_when_the_warehouse_is_next_opened(
    tmp_path: Path,
) -> None:
    day = date(2026, 11, 30)
    folder = tmp_path / "day"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [json.dumps(good(f"t{i}")) for i in range(5)] + ["{bad"])
    database = tmp_path / "w.duckdb"
    connection.connect(database).close()
    child = multiprocessing.get_context("spawn").Process(
        target=_ingest_then_die, args=(str(database), str(folder), day)
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -9  # killed, after two pieces
    raw = duckdb.connect(str(database))  # as it was left: two traces in, the day pending
    assert raw.execute("select count(*) from traces").fetchone() == (2,)
    assert raw.execute("select partition_date from pending_ingestions").fetchall() == [(day,)]
    raw.close()
    conn = connection.connect(database)  # opening it takes them out again
    assert conn.execute("select count(*) from traces").fetchone() == (0,)
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
    counts = ingestion.ingest_traces(conn, [folder], partition_date=day)
    assert (counts.valid, counts.quarantined) == (5, 1)
    assert conn.execute("select count(*) from traces").fetchone() == (5,)


def test_without_the_retrieved_ids_every_other_column_is_stored_the_same(tmp_path: Path) -> None:
    lines = [
        json.dumps(good("t0")),
        # a repeated id (dropped), labels retrieved after it, one not retrieved
        json.dumps(
            good(
                "t1",
                retrieved_ids=["a", "b", "a", "c", "d"],
                relevance_scores={"c": 2, "d": 0, "z": 3},
            )
        ),
        json.dumps(good("t2", retrieved_ids=["x"], relevant_ids=[])),
        json.dumps(good("t0")),  # a repeated trace_id: quarantined either way
    ]
    path = write_lines(tmp_path / "t.jsonl", lines)
    stored = {}
    for keep in (True, False):
        conn = connection.connect(tmp_path / f"w{keep}.duckdb")
        # the second time the day holds rows: its pieces are staged, then swapped in
        for _ in range(2):
            counts = ingestion.ingest_traces(conn, [path], keep_retrieved_ids=keep)
            assert (counts.valid, counts.quarantined, counts.duplicate_ids_dropped) == (3, 1, 1)
        stored[keep] = conn.execute("select * from traces order by trace_id").df()
        conn.close()
    assert stored[False]["retrieved_ids"].map(list).tolist() == [[], [], []]
    assert stored[True]["retrieved_ids"].map(list).tolist() == [
        ["a", "b"],
        ["a", "b", "c", "d"],
        ["x"],
    ]
    assert stored[False]["n_retrieved"].tolist() == [2, 4, 1]
    t1_ranks = {label["doc_id"]: label["rank"] for label in stored[False]["labels"][1]}
    # c is 4th as given, 3rd once the repeated "a" is dropped; b comes from relevant_ids
    assert t1_ranks == {"c": 3, "d": 4, "z": None, "b": 2}
    others = [c for c in stored[True].columns if c != "retrieved_ids"]
    pd.testing.assert_frame_equal(stored[False][others], stored[True][others])


def test_a_piece_is_inserted_in_one_batch_per_thread_with_its_rows_unchanged() -> None:
    table = pa.concat_tables([pa.table({"x": range(n, n + 5)}) for n in (0, 5, 10)])
    for threads, sizes in ((2, [8, 7]), (1, [15]), (4, [4, 4, 4, 3]), (32, [1] * 15)):
        batched = ingestion._in_batches_per_thread(table, threads)
        assert [batch.num_rows for batch in batched.to_batches()] == sizes
        assert batched.column("x").to_pylist() == list(range(15))
