"""The corpus snapshot in the warehouse: read once per version of the file, its unreadable rows
rejected with their line and reason; and a shard's corpus, only the documents its labels name,
which marks the labels stale as the whole snapshot does.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, date, datetime
from pathlib import Path
from unittest import mock

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.cli import evaluate as evaluate_cli
from retrieval_pipeline.ingest import corpus as icorpus
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.warehouse import corpus as wcorpus
from retrieval_pipeline.warehouse import sql
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.steps import build_labels
from tests.trace_records import good, write_lines


def test_an_unchanged_corpus_snapshot_is_not_read_again(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("doc_id,deleted_at\na,\nb,\nold,2020-01-01T00:00:00Z\n")

    def documents() -> list[str]:
        return [row[0] for row in conn.execute("select doc_id from corpus order by 1").fetchall()]

    first = wcorpus.load_corpus(conn, corpus)
    assert (first.documents, first.rejected, first.kept) == (3, 0, False)
    with mock.patch.object(wcorpus, "corpus_table", side_effect=AssertionError("read again")):
        assert wcorpus.load_corpus(conn, corpus) == wcorpus.CorpusLoad(3, 0, True, first.loaded_at)
    assert documents() == ["a", "b", "old"]
    # rewritten at the same size, its modification time put back (as `cp -p` does)
    before = corpus.stat()
    corpus.write_text("doc_id,deleted_at\na,\nc,\nold,2020-01-01T00:00:00Z\n")
    os.utime(corpus, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = corpus.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert not wcorpus.load_corpus(conn, corpus).kept
    assert documents() == ["a", "c", "old"]
    # the table changed behind the loader's back
    conn.execute("delete from corpus where doc_id = 'c'")
    assert not wcorpus.load_corpus(conn, corpus).kept
    assert documents() == ["a", "c", "old"]
    # a loader whose SQL changed (a new release)
    names = ("stg_corpus_rows", "int_corpus", "stg_corpus_kept")
    statements = {name: sql.load_sql(name) for name in names}
    statements["int_corpus"] += "\n-- changed"
    with mock.patch.object(wcorpus, "load_sql", statements.__getitem__):
        assert not wcorpus.load_corpus(conn, corpus).kept
    # no snapshot empties the table and forgets the file
    assert wcorpus.load_corpus(conn, None) == wcorpus.CorpusLoad(0, 0, False, None)
    assert documents() == []
    assert not wcorpus.load_corpus(conn, corpus).kept
    assert wcorpus.load_corpus(conn, corpus).kept
    with pytest.raises(TraceFileError, match=r"nope\.csv: no such corpus file"):
        wcorpus.load_corpus(conn, tmp_path / "nope.csv")


def test_corpus_rows_that_cannot_be_read_are_rejected_with_their_line_and_reason(
    tmp_path: Path,
    conn: duckdb.DuckDBPyConnection,
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
    text = evaluate_cli.summary_text(run)
    assert "Corpus rows that could not be read: 4; their documents are left out" in text
    assert f'  {corpus}:3: deleted_at is not a timestamp: "last week"' in text.splitlines()
    assert evaluate_cli.summary(run)["corpus_rows_rejected"] == 4

    wcorpus.load_corpus(conn, corpus)
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
    loaded = wcorpus.load_corpus(conn, snapshot)
    assert (loaded.documents, loaded.first_rejects) == (2, (f"{snapshot}:2: doc_id is empty",))
    assert conn.execute("select count(*) from corpus_rejects").fetchone() == (1,)


DAY = date(2026, 11, 30)
ROWS = {
    "labels": "select * from labels order by all",
    "corpus": "select * from corpus order by all",
    "corpus_rejects": "select * from corpus_rejects order by all",
}


def _traces(tmp_path: Path, labelled: list[list[str]]) -> tuple[Path, set[str]]:
    """A trace of DAY per list of labelled documents, and the documents they name."""
    records = [
        json.dumps(good(f"t{n}", retrieved_ids=docs[:2], relevant_ids=docs))
        for n, docs in enumerate(labelled)
    ]
    return write_lines(tmp_path / "traces.jsonl", records), {d for docs in labelled for d in docs}


def _whole_snapshot(folder: Path, traces: Path, corpus: Path) -> dict[str, list[tuple]]:
    """The labels, corpus and rejected rows of the nightly's steps, on a warehouse of their own:
    the whole snapshot loaded, the labels checked against it when it has a document."""
    conn = connect(folder / "whole.duckdb")
    ingest_traces(conn, [traces], partition_date=DAY)
    documents = wcorpus.load_corpus(conn, corpus).documents
    build_labels(conn, DAY, DAY, use_corpus=documents > 0)
    rows = {table: conn.execute(statement).fetchall() for table, statement in ROWS.items()}
    conn.close()
    return rows


def test_a_shard_loads_only_the_documents_its_labels_name(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(icorpus, "STREAM_ROWS", 64)  # read in parts of 90 rows, as many as named
    june, december = datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 12, 10, tzinfo=UTC)
    # d0..d999 but every 13th; deleted before the day (n % 10 == 3) or after it (4), added after
    # it (5); d9 listed again last, deleted by that row only (so not deleted)
    deleted = {3: june, 4: datetime(2026, 12, 15, tzinfo=UTC)}
    rows = [
        (f"d{n}", december if n % 10 == 5 else None, deleted.get(n % 10))
        for n in range(1000)
        if n % 13
    ]
    doc_ids, added_at, deleted_at = zip(*[*rows, ("d9", None, june)], strict=True)
    utc = pa.timestamp("us", tz="UTC")
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(
        pa.table(
            {
                "doc_id": list(doc_ids),
                "added_at": pa.array(added_at, utc),
                "deleted_at": pa.array(deleted_at, utc),
            }
        ),
        corpus,
    )
    traces, named = _traces(
        tmp_path, [[f"d{n}", f"d{n + 1}", f"d{3 * n + 400}"] for n in range(0, 120, 4)]
    )
    ingest_traces(conn, [traces], partition_date=DAY)

    loaded = wcorpus.load_needed_corpus(conn, corpus, DAY, DAY)
    # counted another way: the snapshot's documents among those the traces' labels name
    in_snapshot = set(pq.read_table(corpus, columns=["doc_id"]).column("doc_id").to_pylist())
    needed = named & in_snapshot
    assert len(needed) < len(named) and len(needed) < len(in_snapshot) / 5
    assert loaded == wcorpus.NeededCorpus(len(needed), 0, True)
    assert {row[0] for row in conn.execute("select doc_id from corpus").fetchall()} == needed
    assert conn.execute("select deleted_at from corpus where doc_id = 'd9'").fetchall() == [(None,)]
    build_labels(conn, DAY, DAY, use_corpus=loaded.snapshot_has_documents)

    whole = _whole_snapshot(tmp_path, traces, corpus)
    assert conn.execute(ROWS["labels"]).fetchall() == whole["labels"]
    assert conn.execute(ROWS["corpus"]).fetchall() == [
        row for row in whole["corpus"] if row[0] in needed
    ]
    reasons = {row[4] for row in whole["labels"]}
    assert reasons == {
        None,
        "not in corpus",
        "deleted before the query was served",
        "added after the query was served",
    }
    # the shard's corpus is no loaded snapshot: the whole one is read again
    assert conn.execute("select count(*) from corpus_snapshot").fetchone() == (0,)
    assert not wcorpus.load_corpus(conn, corpus).kept


@pytest.mark.parametrize("filler", [0, 40_000])
def test_a_shard_rejects_the_unreadable_rows_of_its_documents_as_the_warehouse_does(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection, filler: int
) -> None:
    # 40,000 lines fill the streaming reader's first block of 1 MiB, whose column types it keeps:
    # the bad times after it do not fit them, and the file is read whole as the warehouse reads it
    corpus = tmp_path / "corpus.csv"
    corpus.write_text(
        "doc_id,added_at,deleted_at\n"
        + "".join(f"f{n},2026-01-01T00:00:00Z,\n" for n in range(filler))
        + "d0,2026-01-01T00:00:00Z,last week\n"  # needed, rejected
        ",2026-01-01T00:00:00Z,\n"  # no doc_id: no document the shard needs
        "\n"
        "d1,yesterday,\n"  # needed, rejected, but d1 has a readable row too
        "d1,2026-01-01T00:00:00Z,\n"
        "zz,yesterday,\n"  # not needed: rejected by the warehouse only
        "d2,2026-01-01T00:00:00Z,2026-06-01T00:00:00Z\n"
    )
    traces, named = _traces(tmp_path, [["d0", "d1"], ["d2", "d3"]])
    ingest_traces(conn, [traces], partition_date=DAY)
    with mock.patch.object(icorpus, "corpus_table", wraps=icorpus.corpus_table) as whole_file:
        loaded = wcorpus.load_needed_corpus(conn, corpus, DAY, DAY)
    assert whole_file.called == bool(filler)
    assert loaded == wcorpus.NeededCorpus(2, 2, True)
    build_labels(conn, DAY, DAY, use_corpus=loaded.snapshot_has_documents)

    whole = _whole_snapshot(tmp_path, traces, corpus)
    assert len(whole["corpus_rejects"]) == 5
    for table, doc_id in (("corpus", 0), ("corpus_rejects", 2)):
        kept = [row for row in whole[table] if row[doc_id] in named]
        assert conn.execute(ROWS[table]).fetchall() == kept, table
    assert [row[3:] for row in conn.execute(ROWS["corpus_rejects"]).fetchall()] == [
        (
            "deleted_at",
            'deleted_at is not a timestamp: "last week"',
            "2026-01-01T00:00:00Z",
            "last week",
        ),
        ("added_at", 'added_at is not a timestamp: "yesterday"', "yesterday", None),
    ]
    assert conn.execute(ROWS["labels"]).fetchall() == whole["labels"]


def test_a_shard_checks_its_labels_against_a_snapshot_without_their_documents(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    traces, _ = _traces(tmp_path, [["gone", "lost"]])
    ingest_traces(conn, [traces], partition_date=DAY)
    for text, has_documents in (
        ("doc_id\nd0\n", True),  # the labels are stale: not in the corpus
        ("doc_id,added_at\n,2026-01-01\nd0,yesterday\n", False),  # no document: not checked
    ):
        corpus = tmp_path / "corpus.csv"
        corpus.write_text(text)
        loaded = wcorpus.load_needed_corpus(conn, corpus, DAY, DAY)
        assert loaded == wcorpus.NeededCorpus(0, 0, has_documents)
        build_labels(conn, DAY, DAY, use_corpus=loaded.snapshot_has_documents)
        whole = _whole_snapshot(tmp_path, traces, corpus)
        assert conn.execute(ROWS["labels"]).fetchall() == whole["labels"]
        reason = "not in corpus" if has_documents else None
        assert [row[4] for row in whole["labels"]] == [reason, reason]
        (tmp_path / "whole.duckdb").unlink()
    assert wcorpus.load_needed_corpus(conn, None, DAY, DAY) == wcorpus.NeededCorpus(0, 0, False)
