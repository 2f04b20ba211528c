"""Ingestion: every record read is scored or quarantined with its file, line, field and reason."""

from __future__ import annotations

import gzip
import json
import math
import multiprocessing
import os
import threading
from datetime import date
from pathlib import Path
from typing import Any
from unittest import mock

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from retrieval_pipeline import cli, engine, readers
from retrieval_pipeline.evaluation import run_evaluation
from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.readers import TraceFileError
from retrieval_pipeline.records import RecordError, parse_line

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


# (line, field, reason) for one bad record each; the reasons are what a user reads.
BAD_RECORDS = [
    ('{"trace_id": "x", ', None, "malformed JSON"),
    ("[1, 2]", None, "not a JSON object (got a list)"),
    (
        json.dumps({k: v for k, v in GOOD.items() if k != "trace_id"}),
        "trace_id",
        "missing required field trace_id",
    ),
    (json.dumps(good(None)), "trace_id", "missing required field trace_id"),  # type: ignore[arg-type]
    (
        json.dumps(good("")),
        "trace_id",
        "trace_id must be a non-empty string or an integer (got an empty string)",
    ),
    (
        json.dumps(good(1.5)),
        "trace_id",  # type: ignore[arg-type]
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


def test_bom_blank_lines_crlf_and_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    body = (
        b"\xef\xbb\xbf" + json.dumps(good("bom")).encode() + b"\r\n"
        b"\n   \n"
        + json.dumps(good("latin-\xff")).encode().replace(b"\\u00ff", b"\xff")
        + b"\n"
        + json.dumps(good("unicode-\u00e9\u4e2d")).encode()
        + b"\n"
    )
    path.write_bytes(body)
    run = run_evaluation(path, "mrr")
    assert run.ingest.read == 3  # blank lines are not records
    assert sorted(run.per_query.trace_id) == ["bom", "unicode-\u00e9\u4e2d"]
    bad = run.quarantine.iloc[0]
    assert bad.source_line == 4
    assert bad.reason.startswith("invalid UTF-8 at byte ")


# Pieces of JSON-lines files: clean lines, and each kind that needs the line-by-line reader.
_LINE_PIECES = [
    b'{"trace_id": "a"}',
    b"",
    b"  ",
    b'\t{"b": 2}',
    b"x\xff",
    b"\xef\xbb\xbf{}",
    b'{"c": "\xc3\xa9\xe4\xb8\xad"}',
    b"{}\r",
    b"[]",
    b"not json",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_LINE_PIECES), max_size=8),
    st.booleans(),
)
def test_clean_file_reader_gives_the_rows_of_the_line_by_line_reader(
    pieces: list[bytes], final_newline: bool
) -> None:
    data = b"\n".join(pieces) + (b"\n" if final_newline else b"")
    expected = [
        (line, text, error) for _, _, line, text, error in readers._jsonl_rows(data, "f", 3, None)
    ]
    piece = readers.jsonl_piece(data, "f", 3)
    table = piece.records
    # a clean piece's rows end with their newlines (readers.RAW_SCHEMA), which the SQL trims
    texts = [text.rstrip("\n") for text in table.column("raw_record").to_pylist()]
    if piece.jsonl is not None:  # the text the plain lane parses: the records' lines, in order
        assert [line.decode() for line in piece.jsonl.split(b"\n") if line] == texts
        assert not any(table.column("read_error").to_pylist())
    got = list(
        zip(
            table.column("source_line").to_pylist(),
            texts,
            table.column("read_error").to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    assert set(table.column("source_file").to_pylist()) <= {"f"}
    assert set(table.column("file_order").to_pylist()) <= {3}


def test_clean_file_reader_takes_only_files_it_reads_exactly() -> None:
    clean = b'{"a": 1}\n\n{"b": "\xc3\xa9"}\n[3]'
    table = readers._clean_jsonl_table(clean, "f", 0)
    assert table is not None
    assert table.column("source_line").to_pylist() == [1, 3, 4]
    # each row a view of the piece: its line, its newline and the blank line after it
    assert table.column("raw_record").to_pylist() == ['{"a": 1}\n\n', '{"b": "\u00e9"}\n', "[3]"]
    # a byte-order mark, a carriage return, a line that starts with whitespace, invalid UTF-8
    for other in (b"\xef\xbb\xbf{}\n", b"{}\r\n", b"{}\n\t{}\n", b"{}\n\xff\n"):
        assert readers._clean_jsonl_table(other, "f", 0) is None, other


def test_empty_file_and_only_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_bytes(b"\n\n  \n")
    run = run_evaluation(tmp_path, "mrr")
    assert (run.ingest.files, run.ingest.read, run.ingest.valid) == (2, 0, 0)
    assert run.per_query.empty


def test_truncated_gzip_keeps_complete_lines_and_quarantines_the_cut_one(tmp_path: Path) -> None:
    lines = [
        json.dumps(good(f"t{i}", retrieved_ids=[f"d{j}" for j in range(50)])) for i in range(200)
    ]
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])
    run = run_evaluation(path, "mrr")
    assert run.ingest.read == run.ingest.valid + run.ingest.quarantined
    assert run.ingest.valid > 0
    assert run.ingest.quarantined == 1
    assert "gzip stream is truncated" in run.quarantine.iloc[0].reason


def test_gzip_name_without_gzip_content_is_a_file_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl.gz", [json.dumps(good("x"))])
    with pytest.raises(TraceFileError, match="not a gzip file"):
        run_evaluation(path, "mrr")


def test_unreadable_paths_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file or directory"):
        run_evaluation(tmp_path / "missing.jsonl", "mrr")
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(TraceFileError, match=r"notes\.txt: not a trace file"):
        run_evaluation(other, "mrr")
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet")
    with pytest.raises(TraceFileError, match=r"fake\.parquet: not a readable Parquet file"):
        run_evaluation(fake, "mrr")


def test_parquet_rows_follow_the_same_rules(tmp_path: Path) -> None:
    table = pa.table(
        {
            "trace_id": ["p1", "p2", "p3"],
            "query_id": ["q", "q", "q"],
            "timestamp": ["2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z", "bad"],
            "retrieved_ids": [["a", "b"], ["b", None], ["a"]],
            "relevance_scores": pa.array(
                [[("b", 2.0)], [("a", 1.0)], []], type=pa.map_(pa.string(), pa.float64())
            ),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    run = run_evaluation(path, "mrr")
    assert (run.ingest.read, run.ingest.valid) == (3, 1)
    assert run.per_query.iloc[0]["mrr"] == pytest.approx(1 / 2)
    reasons = dict(zip(run.quarantine.source_line, run.quarantine.reason, strict=True))
    assert reasons == {
        2: "retrieved_ids[1] is null; ids must be non-empty strings or integers",
        3: 'unparsable timestamp "bad"',
    }


@pytest.mark.parametrize("name", readers.ROW_NUMBER_COLUMNS)
def test_a_parquet_column_named_as_the_row_numbers_is_a_file_error(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{**good("a"), name: 1}]), path)
    with pytest.raises(TraceFileError, match=f"t.parquet: column name {name} is reserved"):
        run_evaluation(path, "mrr")


def test_parquet_without_a_required_column_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"trace_id": ["a"], "query_id": ["q"], "timestamp": ["x"]}), path)
    with pytest.raises(TraceFileError, match="lacks required column\\(s\\) retrieved_ids"):
        run_evaluation(path, "mrr")


def test_a_parquet_file_is_read_without_holding_the_whole_file(tmp_path: Path) -> None:
    """Memory does not grow with the rows of a Parquet file: pyarrow's pre-buffering read row
    groups ahead and kept them until the file was closed (1.3 GiB for 1M traces)."""
    rows, ids_per_row = 4_000, 100
    ids = [os.urandom(8).hex() for _ in range(rows * ids_per_row)]  # 16 bytes, incompressible
    table = pa.table(
        {
            "trace_id": [f"t{i}" for i in range(rows)],
            "query_id": ["q"] * rows,
            "timestamp": ["2026-11-30T10:00:00Z"] * rows,
            "retrieved_ids": [ids[i : i + ids_per_row] for i in range(0, len(ids), ids_per_row)],
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=100, compression="none", use_dictionary=False)
    del table, ids
    held = []
    for first_row, piece in readers.parquet_pieces(path, 100):
        assert first_row == len(held) * 100 + 1
        del piece
        held.append(pa.total_allocated_bytes())
    assert len(held) == 40
    # the file is 4,000 * 100 * (16 + 4) bytes = 8 MB, a piece 0.2 MB (pre-buffered: 8.4 MB held
    # from the first piece on); read as a stream, about 0.5 MB
    assert path.stat().st_size > 8_000_000
    assert max(held) < 2_000_000


def test_stale_labels_are_dropped_and_counted(tmp_path: Path) -> None:
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("fresh", retrieved_ids=["a", "b"], relevant_ids=["a", "gone"])),
            json.dumps(good("all-stale", retrieved_ids=["a"], relevant_ids=["gone", "late"])),
            json.dumps(good("deleted", retrieved_ids=["old"], relevant_ids=["old", "a"])),
        ],
    )
    corpus = tmp_path / "corpus.csv"
    corpus.write_text(
        "doc_id,added_at,deleted_at\n"
        "a,,\n"
        "b,2026-01-01T00:00:00Z,\n"
        "late,2026-12-01T00:00:00Z,\n"  # added after the traces were served
        "old,2020-01-01T00:00:00Z,2026-11-29T00:00:00Z\n"  # deleted before
    )
    run = run_evaluation(traces, "recall@10,mrr", corpus=corpus)
    rows = run.per_query.set_index("trace_id")
    assert rows.loc["fresh", "n_stale_labels"] == 1
    assert rows.loc["fresh", "recall@10"] == pytest.approx(1 / 1)  # not 1/2: gone is stale
    assert pd.isna(rows.loc["all-stale", "mrr"])  # every label stale: unannotated
    assert rows.loc["deleted", "n_stale_labels"] == 1
    assert rows.loc["deleted", "mrr"] == 0  # "old" was retrieved but its label is stale
    assert (run.labels.labels, run.labels.stale, run.labels.traces_with_stale) == (6, 4, 3)
    assert (run.traces.annotated, run.traces.unannotated) == (2, 1)


def test_metric_counts_count_each_trace_once_whatever_the_metrics(tmp_path: Path) -> None:
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("hit", retrieved_ids=["a", "b"], relevant_ids=["a"])),
            # graded, but nothing reaches the relevance level of 1: annotated, no relevant label
            json.dumps(unjudged("all-zero") | {"relevance_scores": {"a": 0}}),
            json.dumps(unjudged("unjudged")),
        ],
    )
    run = run_evaluation(traces, "P@1,mrr,ndcg@2")
    assert run.per_query.set_index("trace_id").loc["all-zero", "mrr"] == 0
    # 3 traces scored for 3 metrics: 9 metric rows, but 3 traces
    assert (run.traces.traces, run.traces.annotated) == (3, 2)
    assert (run.traces.unannotated, run.traces.no_relevant) == (1, 1)


def test_an_unchanged_corpus_snapshot_is_not_read_again(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("doc_id,deleted_at\na,\nb,\nold,2020-01-01T00:00:00Z\n")
    conn = engine.connect(tmp_path / "w.duckdb")

    def documents() -> list[str]:
        return [row[0] for row in conn.execute("select doc_id from corpus order by 1").fetchall()]

    first = engine.load_corpus(conn, corpus)
    assert (first.documents, first.rejected, first.kept) == (3, 0, False)
    with mock.patch.object(readers, "corpus_table", side_effect=AssertionError("read again")):
        assert engine.load_corpus(conn, corpus) == engine.CorpusLoad(3, 0, True, first.loaded_at)
    assert documents() == ["a", "b", "old"]
    # rewritten at the same size, its modification time put back (as `cp -p` does)
    before = corpus.stat()
    corpus.write_text("doc_id,deleted_at\na,\nc,\nold,2020-01-01T00:00:00Z\n")
    os.utime(corpus, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = corpus.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert not engine.load_corpus(conn, corpus).kept
    assert documents() == ["a", "c", "old"]
    # the table changed behind the loader's back
    conn.execute("delete from corpus where doc_id = 'c'")
    assert not engine.load_corpus(conn, corpus).kept
    assert documents() == ["a", "c", "old"]
    # a loader whose SQL changed (a new release)
    names = ("stg_corpus_rows", "int_corpus", "stg_corpus_kept")
    statements = {name: engine.load_sql(name) for name in names}
    statements["int_corpus"] += "\n-- changed"
    with mock.patch.object(engine, "load_sql", statements.__getitem__):
        assert not engine.load_corpus(conn, corpus).kept
    # no snapshot empties the table and forgets the file
    assert engine.load_corpus(conn, None) == engine.CorpusLoad(0, 0, False, None)
    assert documents() == []
    assert not engine.load_corpus(conn, corpus).kept
    assert engine.load_corpus(conn, corpus).kept
    with pytest.raises(TraceFileError, match=r"nope\.csv: no such corpus file"):
        engine.load_corpus(conn, tmp_path / "nope.csv")


def test_corpus_rows_that_cannot_be_read_are_rejected_with_their_line_and_reason(
    tmp_path: Path,
) -> None:
    traces = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps(good("t1", retrieved_ids=["a", "b", "c"], relevant_ids=["a", "b", "c"])),
            json.dumps(good("t2", retrieved_ids=["d"], relevant_ids=["d"])),
        ],
    )
    corpus = tmp_path / "corpus.csv"
    corpus.write_text(
        "doc_id,added_at,deleted_at\n"
        "a,2026-01-01T00:00:00Z,\n"
        "b,2026-01-01T00:00:00Z,last week\n"  # line 3: a deletion time that is no time
        ",2026-01-01T00:00:00Z,\n"  # line 4: no doc_id
        "\n"  # line 5: a blank line is a row without one
        "c,yesterday,\n"  # line 6
        "d,2026-01-01T00:00:00Z,  \n"  # blank: never deleted
        "d,2026-02-01T00:00:00Z,2026-11-01T00:00:00Z\n"  # d listed twice, deleted once
    )
    run = run_evaluation(traces, "recall@10", corpus=corpus)
    assert (run.corpus.documents, run.corpus.rejected) == (2, 4)  # a and d; 7 rows = 3 + 4
    assert run.corpus.first_rejects == (
        f'{corpus}:3: deleted_at is not a timestamp: "last week"',
        f"{corpus}:4: doc_id is missing",
        f"{corpus}:5: doc_id is missing (the row is empty)",
        f'{corpus}:6: added_at is not a timestamp: "yesterday"',
    )
    # b and c are left out, so their labels are stale (not in the corpus): t1 keeps a only;
    # d keeps its earliest addition and is not deleted, since one of its rows says so only
    rows = run.per_query.set_index("trace_id")
    assert rows.loc["t1", "n_stale_labels"] == 2
    assert rows.loc["t1", "recall@10"] == 1.0
    assert rows.loc["t2", "n_stale_labels"] == 0
    text = cli.summary_text(run)
    assert "Corpus rows that could not be read: 4; their documents are left out" in text
    assert f'  {corpus}:3: deleted_at is not a timestamp: "last week"' in text.splitlines()
    assert cli.summary(run)["corpus_rows_rejected"] == 4

    conn = engine.connect(tmp_path / "w.duckdb")
    engine.load_corpus(conn, corpus)
    rejects = conn.execute(
        "select source_line, doc_id, field, added_at, deleted_at from corpus_rejects order by 1"
    ).fetchall()
    assert rejects == [
        (3, "b", "deleted_at", "2026-01-01T00:00:00Z", "last week"),
        (4, None, "doc_id", "2026-01-01T00:00:00Z", None),
        (5, None, "doc_id", None, None),
        (6, "c", "added_at", "yesterday", None),
    ]
    # Parquet rows are numbered from 1, and an empty doc_id is no document either
    snapshot = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "", "b"]}), snapshot)
    loaded = engine.load_corpus(conn, snapshot)
    assert (loaded.documents, loaded.first_rejects) == (2, (f"{snapshot}:2: doc_id is empty",))
    assert conn.execute("select count(*) from corpus_rejects").fetchone() == (1,)


def test_reingesting_a_partition_replaces_it(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(good("a")), "{bad"])
    conn = engine.connect(tmp_path / "w.duckdb")
    for _ in range(3):
        engine.ingest_traces(conn, [path], partition_date=date(2026, 11, 30))
    counts = conn.execute("select (select count(*) from traces), (select count(*) from quarantine)")
    assert counts.fetchone() == (1, 1)


def test_a_warehouse_from_before_label_ranks_is_brought_up_to_date(tmp_path: Path) -> None:
    # `traces` as it was before labels carried their rank, with one trace written then.
    database = tmp_path / "old.duckdb"
    old = duckdb.connect(str(database))
    old.execute(
        "create table traces (partition_date date not null, trace_id varchar not null,"
        " query_id varchar not null, served_at timestamptz not null, segment varchar not null,"
        " variant varchar not null, label_source varchar, retrieved_ids varchar[] not null,"
        " n_duplicate_ids integer not null, is_judged boolean not null,"
        " labels struct(doc_id varchar, grade double)[] not null,"
        " source_file varchar not null, source_line bigint not null)"
    )
    old.execute(
        "insert into traces values ('2026-11-30', 't1', 'q1', '2026-11-30 10:00:00+00', 's',"
        " 'v', null, ['d3', 'd1', 'd9'], 1, true,"
        " [{'doc_id': 'd1', 'grade': 3}, {'doc_id': 'd2', 'grade': 2}], 'a.jsonl', 1)"
    )
    old.close()
    conn = engine.connect(database)
    (row,) = conn.execute("select labels, n_retrieved from traces").fetchall()
    assert row == (
        [{"doc_id": "d1", "grade": 3.0, "rank": 2}, {"doc_id": "d2", "grade": 2.0, "rank": None}],
        3,
    )
    day = date(2026, 11, 30)
    engine.build_labels(conn, day, day, use_corpus=False)
    engine.compute_query_metrics(conn, parse_metrics("mrr,ndcg@5"), day, day, gain="linear")
    values = dict(conn.execute("select metric, value from query_metrics").fetchall())
    # d1 (grade 3) at rank 2 of 3; the ideal puts grades 3 then 2 first
    ideal = 3 / math.log2(2) + 2 / math.log2(3)
    assert values == pytest.approx({"mrr": 1 / 2, "ndcg@5": (3 / math.log2(3)) / ideal})
    conn.close()
    engine.connect(database).close()  # once brought up to date, opening it changes nothing


# ---- accounting on random mixtures --------------------------------------------------------------

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


# Ids that end alike (false alarms for the 8-byte screen), short ones, multi-byte UTF-8.
_IDS = [
    "a",
    "b",
    "7",
    "",
    "doc-00000001",
    "xdoc-00000001",
    "doc-00000002",
    "é",
    "中文-1",
    "12345678",
]


LABEL_TYPE = pa.list_(
    pa.struct([("doc_id", pa.string()), ("grade", pa.float64()), ("rank", pa.int32())])
)


def staged_rows(lists: list[list[str] | None], labelled: list[str]) -> pa.Table:
    """Rows as sql/stg_trace_records.sql stages them: each list with labels on `labelled`,
    ranked where the statement ranks them, at their first position in the list as given."""
    labels = [
        [
            {"doc_id": doc, "grade": 1.0, "rank": ids.index(doc) + 1 if doc in ids else None}
            for doc in labelled
        ]
        for ids in (ids or [] for ids in lists)
    ]
    return pa.table(
        {
            "retrieved_ids": pa.array(lists, pa.list_(pa.string())),
            "labels": pa.array(labels, LABEL_TYPE),
            "x": range(len(lists)),
        }
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.lists(st.sampled_from(_IDS), max_size=12)), max_size=12),
    st.lists(st.sampled_from(_IDS), max_size=4, unique=True),
    st.integers(1, 13),
)
def test_keep_first_occurrences_drops_later_repeats_only(
    lists: list[list[str] | None], labelled: list[str], screened_rows: int
) -> None:
    staged = staged_rows(lists, labelled)
    half = len(lists) // 2  # in two chunks, the second sliced, as DuckDB may hand them over
    chunked = pa.concat_tables([staged.slice(0, half), staged.slice(half)])
    with mock.patch.object(engine, "_SCREENED_ROWS", screened_rows):
        out = engine.keep_first_occurrences(chunked)
        emptied = engine.keep_first_occurrences(chunked, keep_retrieved_ids=False)
    # without the lists kept: each one empty (a null one null), every other column the same
    assert emptied.column("retrieved_ids").to_pylist() == [
        None if ids is None else [] for ids in lists
    ]
    assert emptied.drop_columns("retrieved_ids").equals(out.drop_columns("retrieved_ids"))
    expected = [None if ids is None else list(dict.fromkeys(ids)) for ids in lists]
    assert out.column("retrieved_ids").to_pylist() == expected
    dropped = [0 if ids is None else len(ids) - len(set(ids)) for ids in lists]
    assert out.column("n_duplicate_ids").to_pylist() == dropped
    assert out.column("n_retrieved").to_pylist() == [
        None if e is None else len(e) for e in expected
    ]
    # a label's rank is its place in the list without repeats
    ranks = [[label["rank"] for label in row] for row in out.column("labels").to_pylist()]
    assert ranks == [
        [ids.index(doc) + 1 if doc in ids else None for doc in labelled]
        for ids in (ids or [] for ids in expected)
    ]
    assert out.column("x").to_pylist() == list(range(len(lists)))


@pytest.mark.parametrize("screened_rows", [engine._SCREENED_ROWS, 7])
def test_keep_first_occurrences_screens_lists_of_many_lengths(
    screened_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More distinct lengths than are screened as 2D blocks, so some rows go through the sort
    # keyed by row. Each length has a list without repeats and three that end in a repeat of
    # their first, a middle and their last-but-one item. Screened 7 rows at a time, the blocks
    # start in the middle of a length's rows.
    monkeypatch.setattr(engine, "_SCREENED_ROWS", screened_rows)
    lists: list[list[str] | None] = [None, []]
    for length in range(2, 40):
        unique = [f"doc-{length:02d}-{i:04d}" for i in range(length)]
        lists.append(unique)
        for at in (0, (length - 1) // 2, length - 2):
            lists.append([*unique[: length - 1], unique[at]])
    staged = staged_rows(lists, ["doc-39-0038", "doc-20-0010"])  # last of 39, middle of 20
    staged = staged.set_column(
        0, "retrieved_ids", staged.column(0).cast(pa.list_(pa.large_string()))
    )
    out = engine.keep_first_occurrences(staged.slice(1))
    expected = [None if ids is None else list(dict.fromkeys(ids)) for ids in lists[1:]]
    ranks = [[label["rank"] for label in row] for row in out.column("labels").to_pylist()]
    assert ranks[-4:] == [[39, None], [None, None], [None, None], [None, None]]
    assert ranks[-80:-76] == [[None, 11]] * 4  # length 20: the repeat comes after the label
    assert out.column("retrieved_ids").to_pylist() == expected
    dropped = [0 if ids is None else len(ids) - len(set(ids)) for ids in lists[1:]]
    assert out.column("n_duplicate_ids").to_pylist() == dropped
    assert sum(dropped) == 3 * 38  # lengths 2..39, three lists with one repeat each


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    last_newline=st.booleans(),
    gzipped=st.booleans(),
    read_bytes=st.integers(min_value=1, max_value=64),
    piece_bytes=st.integers(min_value=1, max_value=200),
)
def test_pieces_are_whole_lines_numbered_from_the_file_start(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    last_newline: bool,
    gzipped: bool,
    read_bytes: int,
    piece_bytes: int,
) -> None:
    # Reads of any size (a line across many reads, many lines in one) and pieces of any size:
    # the pieces hold the file's bytes in order, each ends at a newline but the last, and each
    # starts at the line its number says.
    text = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    path = tmp_path_factory.mktemp("pieces") / ("t.jsonl.gz" if gzipped else "t.jsonl")
    path.write_bytes(gzip.compress(text) if gzipped else text)
    with mock.patch.object(readers, "_READ_BYTES", read_bytes):
        pieces = list(readers.jsonl_pieces(path, piece_bytes=piece_bytes))
    assert b"".join(p.data for p in pieces) == text
    assert all(p.data.endswith(b"\n") for p in pieces[:-1])
    assert all(p.data for p in pieces[1:])  # only an empty file's one piece is empty
    assert all(p.stream_error is None for p in pieces)
    assert [p.at_file_start for p in pieces] == [True] + [False] * (len(pieces) - 1)
    before = 0
    for piece in pieces:
        assert piece.first_line == 1 + before
        before += piece.data.count(b"\n")


def _outcome(path: Path) -> tuple[object, ...]:
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
    monkeypatch.setattr(readers, "PIECE_BYTES", 300)  # a few lines a piece
    monkeypatch.setattr(engine, "ROWS_PER_PIECE", 7)
    assert _outcome(tmp_path) == whole
    ingest = whole[0]
    assert isinstance(ingest, engine.IngestCounts)
    assert ingest.read == ingest.valid + ingest.quarantined
    assert ingest.duplicate_ids_dropped > 0
    reasons = whole[2]["reason"]  # type: ignore[index]
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
    monkeypatch.setattr(engine, "ROWS_PER_PIECE", 7)
    pieces = [
        piece.records.column("source_line").to_pylist() for piece in engine._frame_pieces(frame)
    ]
    assert pieces == [list(range(1, 8)), list(range(8, 15)), list(range(15, 21))]
    assert outcome() == whole
    ingest, per_query, quarantine = whole
    assert isinstance(ingest, engine.IngestCounts)
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    day = date(2026, 11, 30)
    folder = tmp_path / "day"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [json.dumps(good("a")), json.dumps(good("b"))])
    conn = engine.connect(tmp_path / "w.duckdb")
    staging = tmp_path / "w.duckdb.staging"
    written: list[Path] = []
    write_staged = engine._write_staged

    def spy(conn: object, statement: str, path: Path) -> bool:
        written.append(path)
        return write_staged(conn, statement, path)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "_write_staged", spy)
    engine.ingest_traces(conn, [folder], partition_date=day)
    assert written == []  # a new day has nothing to keep: its rows went straight in
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
    (staging / "killed-run").mkdir(parents=True)  # what a killed ingestion would leave
    (staging / "killed-run" / "traces-000000.parquet").write_bytes(b"PAR1")
    # the day again: the second file fails after the first one's piece is staged, and the day
    # keeps its rows
    write_lines(folder / "a.jsonl", [json.dumps(good("c"))])
    pq.write_table(pa.table({"trace_id": ["x"]}), folder / "b.parquet")
    with pytest.raises(TraceFileError, match="lacks required column"):
        engine.ingest_traces(conn, [folder], partition_date=day)
    assert written and all(path.parent == staging for path in written)
    assert sorted(conn.execute("select trace_id from traces").fetchall()) == [("a",), ("b",)]
    assert not staging.exists()


def test_a_failed_ingestion_of_a_new_day_leaves_it_empty(tmp_path: Path) -> None:
    day, other = date(2026, 11, 30), date(2026, 11, 29)
    conn = engine.connect(tmp_path / "w.duckdb")
    kept = write_lines(tmp_path / "other.jsonl", [json.dumps(good("o"))])
    engine.ingest_traces(conn, [kept], partition_date=other)
    folder = tmp_path / "day"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [json.dumps(good("a")), "{bad"])
    pq.write_table(pa.table({"trace_id": ["x"]}), folder / "b.parquet")
    with pytest.raises(TraceFileError, match="lacks required column"):
        engine.ingest_traces(conn, [folder], partition_date=day)
    # a.jsonl's rows went in before b.parquet failed, and were taken out again
    assert conn.execute("select partition_date, trace_id from traces").fetchall() == [(other, "o")]
    assert conn.execute("select count(*) from quarantine").fetchone() == (0,)
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)


@pytest.mark.parametrize("stored_before", [False, True])
def test_a_piece_that_cannot_be_written_fails_the_ingestion_and_keeps_the_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored_before: bool
) -> None:
    """Pieces are written in a second thread while the next one is validated: a write that
    fails is raised by `ingest_traces`, nothing is written after it, and the day holds what it
    held before (straight in for a new day, staged for one that holds rows)."""
    day = date(2026, 11, 30)
    conn = engine.connect(tmp_path / "w.duckdb")
    folder = tmp_path / "day"
    folder.mkdir()
    if stored_before:
        write_lines(folder / "a.jsonl", [json.dumps(good("old"))])
        engine.ingest_traces(conn, [folder], partition_date=day)
    write_lines(folder / "a.jsonl", [json.dumps(good(f"t{i}")) for i in range(6)])
    monkeypatch.setattr(readers, "PIECE_BYTES", 1)  # a line a piece
    monkeypatch.setattr(readers, "_READ_BYTES", 1)
    name = "_write_piece" if stored_before else "_insert_piece"
    write_piece = getattr(engine, name)
    threads: list[str] = []

    def fail_the_third(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        if len(threads) == 3:
            raise OSError("No space left on device")
        return write_piece(*args)

    monkeypatch.setattr(engine, name, fail_the_third)
    with pytest.raises(OSError, match="No space left on device"):
        engine.ingest_traces(conn, [folder], partition_date=day)
    assert len(threads) == 3 and all(name.startswith("write-behind") for name in threads)
    stored = conn.execute("select trace_id from traces").fetchall()
    assert stored == ([("old",)] if stored_before else [])
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
    assert not (tmp_path / "w.duckdb.staging").exists()


def _ingest_then_die(database: str, folder: str, day: date) -> None:
    """In a child process: ingest `folder` a line a piece, killed by SIGKILL after the second
    piece went in (no clean-up runs)."""
    import signal

    readers.PIECE_BYTES = readers._READ_BYTES = 1
    pieces = 0
    insert_piece = engine._insert_piece

    def insert_then_die(conn: duckdb.DuckDBPyConnection) -> None:
        nonlocal pieces
        insert_piece(conn)
        pieces += 1
        if pieces == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    engine._insert_piece = insert_then_die  # type: ignore[assignment]
    engine.ingest_traces(engine.connect(database), [Path(folder)], partition_date=day)


def test_a_killed_ingestion_of_a_new_day_is_undone_when_the_warehouse_is_next_opened(
    tmp_path: Path,
) -> None:
    day = date(2026, 11, 30)
    folder = tmp_path / "day"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [json.dumps(good(f"t{i}")) for i in range(5)] + ["{bad"])
    database = tmp_path / "w.duckdb"
    engine.connect(database).close()
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
    conn = engine.connect(database)  # opening it takes them out again
    assert conn.execute("select count(*) from traces").fetchone() == (0,)
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
    counts = engine.ingest_traces(conn, [folder], partition_date=day)
    assert (counts.valid, counts.quarantined) == (5, 1)
    assert conn.execute("select count(*) from traces").fetchone() == (5,)


def test_a_scratch_database_keeps_no_log_and_is_not_written_out_when_closed(
    tmp_path: Path,
) -> None:
    database = tmp_path / "scratch.duckdb"
    conn = engine.connect(database, scratch=True)
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(good(f"t{i}")) for i in range(50)])
    engine.ingest_traces(conn, [path])
    assert conn.execute("select count(*) from traces").fetchone() == (50,)
    assert not Path(f"{database}.wal").exists()  # no write-ahead log
    size = database.stat().st_size
    engine.close_scratch(conn)
    assert database.stat().st_size == size  # no checkpoint wrote the traces out on closing


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
        conn = engine.connect(tmp_path / f"w{keep}.duckdb")
        # the second time the day holds rows: its pieces are staged, then swapped in
        for _ in range(2):
            counts = engine.ingest_traces(conn, [path], keep_retrieved_ids=keep)
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


def disabled_compression(conn: duckdb.DuckDBPyConnection) -> str:
    row = conn.execute("select current_setting('disabled_compression_methods')").fetchone()
    return str(row[0] if row else "").lower()


def test_dict_fsst_string_compression_is_off_unless_asked_for(tmp_path: Path) -> None:
    def disabled(compact: bool) -> str:
        conn = engine.connect(tmp_path / f"w{compact}.duckdb")
        engine.prepare(conn, compact_strings=compact)
        setting = disabled_compression(conn)
        conn.close()
        return setting

    assert disabled(False) == "dict_fsst"
    assert disabled(True) == ""


def test_query_metrics_are_stored_with_their_strings_compressed(tmp_path: Path) -> None:
    # 4,000 traces: 20,000 metric rows, more than a row group (engine.ROW_GROUP_ROWS), so the
    # insert writes them out itself rather than leaving them to the next checkpoint
    traces = pd.DataFrame([good(f"t{i}", query_id=f"q{i % 700}") for i in range(4000)])
    conn = engine.connect(tmp_path / "w.duckdb")
    engine.ingest_traces(conn, traces)
    start, end = engine.ALL_DATES
    engine.build_labels(conn, start, end, use_corpus=False)
    engine.compute_query_metrics(conn, parse_metrics("P@1,mrr,ndcg@2,recall@2,map"), start, end)
    setting = disabled_compression(conn)
    conn.close()
    assert setting == "dict_fsst"  # the traces' setting again
    read = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    stored = read.execute(
        "select column_name, list(distinct compression order by compression)"
        " from pragma_storage_info('query_metrics') where segment_type = 'VARCHAR'"
        " group by column_name order by column_name"
    ).fetchall()
    # every trace retrieves a, b with b relevant: P@1 = 0, mrr = map = 1/2, ndcg@2 = 1 / log2(3)
    means = read.execute("select metric, avg(value) from query_metrics group by metric").fetchall()
    read.close()
    columns = ("metric", "query_id", "segment", "trace_id", "variant")
    assert stored == [(column, ["DICT_FSST"]) for column in columns]
    expected = {"precision@1": 0.0, "mrr": 0.5, "ndcg@2": 1 / math.log2(3), "recall@2": 1.0}
    assert dict(means) == pytest.approx(expected | {"map": 0.5}, abs=1e-12)


@pytest.mark.parametrize("compact", [False, True])
def test_strings_compressed_puts_the_setting_back_after_a_failure(
    tmp_path: Path, compact: bool
) -> None:
    conn = engine.connect(tmp_path / "w.duckdb", compact_strings=compact)
    before = disabled_compression(conn)
    with pytest.raises(RuntimeError), engine.strings_compressed(conn):
        assert disabled_compression(conn) == ""
        raise RuntimeError("the metric step failed")
    assert disabled_compression(conn) == before == ("" if compact else "dict_fsst")
    conn.close()


def test_a_piece_is_inserted_in_one_batch_per_thread_with_its_rows_unchanged() -> None:
    table = pa.concat_tables([pa.table({"x": range(n, n + 5)}) for n in (0, 5, 10)])
    for threads, sizes in ((2, [8, 7]), (1, [15]), (4, [4, 4, 4, 3]), (32, [1] * 15)):
        batched = engine._in_batches_per_thread(table, threads)
        assert [batch.num_rows for batch in batched.to_batches()] == sizes
        assert batched.column("x").to_pylist() == list(range(15))
