"""The corpus snapshot in the warehouse: read once per version of the file, its unreadable rows
rejected with their line and reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.cli import evaluate as evaluate_cli
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.warehouse import corpus as wcorpus
from retrieval_pipeline.warehouse import sql
from retrieval_pipeline.warehouse.evaluation import run_evaluation
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
