"""A new day's pieces go into `traces` as whole row groups (`ingestion.RowGroupAligner`): every
row group but the last is full, so the next checkpoint has no part-filled row groups to merge
and write again; the rows, their order and the quarantine are those of an ingestion without it."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.warehouse import connection, ingestion
from retrieval_pipeline.warehouse.ingestion import RowGroupAligner
from tests.trace_records import good, write_lines

DAY = date(2026, 11, 30)


def _staged(ids: list[str], quarantined: frozenset[str] = frozenset()) -> pa.Table:
    """Staged rows as the aligner reads them: a trace_id and a reason (null: valid)."""
    return pa.table(
        {
            "trace_id": ids,
            "reason": [("bad" if i in quarantined else None) for i in ids],
        }
    )


def test_each_insert_holds_whole_row_groups_of_valid_rows_in_order() -> None:
    aligner = RowGroupAligner(row_group_rows=4, threads=2)
    # 6 valid and 1 quarantined: one row group of 4 valid now, then the quarantined row; 2 wait
    first = aligner.rows_to_store(_staged(["a", "b", "x", "c", "d", "e", "f"], frozenset({"x"})))
    assert first is not None
    assert first.column("trace_id").to_pylist() == ["a", "b", "c", "d", "x"]
    assert [b.num_rows for b in first.to_batches()] == [5]  # one row group: one batch
    # 2 waiting + 7 = 9 valid: 2 row groups now, a batch each (2 threads); 1 waits
    second = aligner.rows_to_store(_staged(["g", "h", "i", "j", "k", "l", "m"]))
    assert second is not None
    assert second.column("trace_id").to_pylist() == ["e", "f", "g", "h", "i", "j", "k", "l"]
    assert [b.num_rows for b in second.to_batches()] == [4, 4]
    # 1 waiting + 2 = 3 valid: nothing whole yet
    third = aligner.rows_to_store(_staged(["n", "o"]))
    assert third is not None and third.num_rows == 0
    rest = aligner.rows_to_store(None)  # the end: every row still waiting
    assert rest is not None
    assert rest.column("trace_id").to_pylist() == ["m", "n", "o"]
    assert aligner.rows_to_store(None) is None


def test_a_piece_of_quarantined_rows_alone_is_stored_with_its_piece() -> None:
    aligner = RowGroupAligner(row_group_rows=4, threads=2)
    assert aligner.rows_to_store(_staged(["a"])) is not None  # waits: 0 rows now
    only_bad = aligner.rows_to_store(_staged(["x", "y"], frozenset({"x", "y"})))
    assert only_bad is not None
    assert only_bad.column("trace_id").to_pylist() == ["x", "y"]
    rest = aligner.rows_to_store(None)
    assert rest is not None and rest.column("trace_id").to_pylist() == ["a"]


def _row_groups(conn: duckdb.DuckDBPyConnection) -> list[int]:
    """The rows of each of `traces`' row groups, in order."""
    rows = conn.execute(
        "select row_group_id, max(count) from pragma_storage_info('traces')"
        " where column_name = 'trace_id' group by row_group_id order by row_group_id"
    ).fetchall()
    return [int(count) for _, count in rows]


@pytest.mark.parametrize("aligned", [True, False])
def test_a_new_day_is_stored_in_full_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aligned: bool
) -> None:
    """20,000 records in pieces of about 3,100 (each more than a row group, so DuckDB writes
    each insert's rows out as it goes), row groups of 2,048 (its smallest): aligned, every row
    group but the last is full; without the aligner (each piece inserted as it comes) each
    piece leaves a part-filled one, so the test can fail. The rows are the same."""
    monkeypatch.setattr(connection, "ROW_GROUP_ROWS", 2048)
    monkeypatch.setattr(ingestion, "ROW_GROUP_ROWS", 2048)
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 400_000)
    monkeypatch.setattr(jsonl, "FIRST_PIECE_BYTES", 400_000)
    if not aligned:
        monkeypatch.setattr(ingestion.RowGroupAligner, "rows_to_store", _as_it_comes)
    lines = [json.dumps(good(f"t{i:05d}")) for i in range(20_000)]
    lines[10] = lines[4000] = "{bad"
    write_lines(tmp_path / "day.jsonl", lines)
    conn = connection.connect(tmp_path / "w.duckdb")
    counts = ingestion.ingest_traces(conn, [tmp_path / "day.jsonl"], partition_date=DAY)
    assert (counts.valid, counts.quarantined) == (19_998, 2)
    groups = _row_groups(conn)
    assert sum(groups) == 19_998
    if aligned:
        assert groups == [2048] * 9 + [19_998 - 9 * 2048]
    else:
        assert sum(1 for g in groups[:-1] if g < 2048) >= 3
    stored = conn.execute("select trace_id from traces order by source_line").fetchall()
    assert [row[0] for row in stored] == [f"t{i:05d}" for i in range(20_000) if i not in (10, 4000)]
    assert conn.execute("select source_line from quarantine order by 1").fetchall() == [
        (11,),
        (4001,),
    ]
    conn.close()


def _as_it_comes(self: RowGroupAligner, staged: pa.Table | None) -> pa.Table | None:
    """Each piece's rows as they come (the ingestion before the aligner)."""
    return staged
