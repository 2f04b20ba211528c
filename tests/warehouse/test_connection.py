"""Opening the warehouse: the migration of older files, scratch databases and string compression."""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.warehouse import connection, ingestion, partitions, steps
from tests.trace_records import good, write_lines


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
    conn = connection.connect(database)
    (row,) = conn.execute("select labels, n_retrieved from traces").fetchall()
    assert row == (
        [{"doc_id": "d1", "grade": 3.0, "rank": 2}, {"doc_id": "d2", "grade": 2.0, "rank": None}],
        3,
    )
    day = date(2026, 11, 30)
    steps.build_labels(conn, day, day, use_corpus=False)
    steps.compute_query_metrics(conn, parse_metrics("mrr,ndcg@5"), day, day, gain="linear")
    values = dict(conn.execute("select metric, value from query_metrics").fetchall())
    # d1 (grade 3) at rank 2 of 3; the ideal puts grades 3 then 2 first
    ideal = 3 / math.log2(2) + 2 / math.log2(3)
    assert values == pytest.approx({"mrr": 1 / 2, "ndcg@5": (3 / math.log2(3)) / ideal})
    conn.close()
    connection.connect(database).close()  # once brought up to date, opening it changes nothing


def test_a_scratch_database_keeps_no_log_and_is_not_written_out_when_closed(
    tmp_path: Path,
) -> None:
    database = tmp_path / "scratch.duckdb"
    conn = connection.connect(database, scratch=True)
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(good(f"t{i}")) for i in range(50)])
    ingestion.ingest_traces(conn, [path])
    assert conn.execute("select count(*) from traces").fetchone() == (50,)
    assert not Path(f"{database}.wal").exists()  # no write-ahead log
    size = database.stat().st_size
    connection.close_scratch(conn)
    assert database.stat().st_size == size  # no checkpoint wrote the traces out on closing


def disabled_compression(conn: duckdb.DuckDBPyConnection) -> str:
    row = conn.execute("select current_setting('disabled_compression_methods')").fetchone()
    return str(row[0] if row else "").lower()


def test_dict_fsst_string_compression_is_off_unless_asked_for(tmp_path: Path) -> None:
    def disabled(compact: bool) -> str:
        conn = connection.connect(tmp_path / f"w{compact}.duckdb")
        connection.prepare(conn, compact_strings=compact)
        setting = disabled_compression(conn)
        conn.close()
        return setting

    assert disabled(False) == "dict_fsst"
    assert disabled(True) == ""


def test_query_metrics_are_stored_with_their_strings_compressed(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    # 4,000 traces: 20,000 metric rows, more than a row group (connection.ROW_GROUP_ROWS), so the
    # insert writes them out itself rather than leaving them to the next checkpoint
    traces = pd.DataFrame([good(f"t{i}", query_id=f"q{i % 700}") for i in range(4000)])
    ingestion.ingest_traces(conn, traces)
    start, end = partitions.ALL_DATES
    steps.build_labels(conn, start, end, use_corpus=False)
    steps.compute_query_metrics(conn, parse_metrics("P@1,mrr,ndcg@2,recall@2,map"), start, end)
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
    conn = connection.connect(tmp_path / "w.duckdb", compact_strings=compact)
    before = disabled_compression(conn)
    with pytest.raises(RuntimeError), connection.strings_compressed(conn):
        assert disabled_compression(conn) == ""
        raise RuntimeError("the metric step failed")
    assert disabled_compression(conn) == before == ("" if compact else "dict_fsst")
    conn.close()
