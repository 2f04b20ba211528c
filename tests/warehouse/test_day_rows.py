"""A day's traces written beside the warehouse file by its ingestion (the nightly's), not
inserted: read under the name `traces` exactly as inserted rows, registered only when the day is
complete, replaced whole, and never read or kept when the ingestion fails."""

from __future__ import annotations

import contextlib
import json
import shutil
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from retrieval_pipeline.ingest import jsonl
from retrieval_pipeline.warehouse import connection, ingestion
from retrieval_pipeline.warehouse.day_rows import TracesFile
from retrieval_pipeline.warehouse.merged_days import qualified
from tests.trace_records import good, write_lines

DAY = date(2026, 11, 30)


def _lines(prefix: str, n: int) -> list[str]:
    """`n` good records (one repeating an id in its list), a repeated trace_id and a bad line."""
    records = [
        json.dumps(
            good(
                f"{prefix}{i}",
                query_id=f"q{i % 3}",
                retrieved_ids=["a", "b", "a", "c"] if i == 1 else [f"d{i}", "b", "a"],
                relevance_scores={"a": 2, f"d{i}": 3},
            )
        )
        for i in range(n)
    ]
    return [*records, json.dumps(good(f"{prefix}0")), "{bad"]


def _day_folder(tmp_path: Path, prefix: str = "t", n: int = 7) -> Path:
    folder = tmp_path / f"day-{prefix}"
    folder.mkdir(exist_ok=True)
    write_lines(folder / "a.jsonl", _lines(prefix, n))
    return folder


def _rows(conn: duckdb.DuckDBPyConnection, table: str) -> pd.DataFrame:
    frame = conn.execute(f"select * from {table} order by all").df()
    return frame.drop(columns=[c for c in ("ingested_at",) if c in frame.columns])


def _stored(conn: duckdb.DuckDBPyConnection) -> int:
    ((count,),) = conn.execute(f"select count(*) from {qualified(conn, 'traces')}").fetchall()
    return int(count)


def _run_folders(database: Path) -> list[Path]:
    return sorted(database.with_name(database.name + ".merged").glob("traces/*/run=*"))


@pytest.fixture(autouse=True)
def _small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few lines a piece: the file is written a piece at a time."""
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 400)
    monkeypatch.setattr(jsonl, "_READ_BYTES", 400)


def test_the_days_traces_are_written_beside_the_file_and_read_as_inserted_ones(
    tmp_path: Path,
) -> None:
    """The same records ingested with their traces inserted and beside the file: equal
    `traces` (id lists, labels and their ranks, repeats dropped), `quarantine` and counts; the
    file holds no stored trace, one registered file does."""
    folder = _day_folder(tmp_path)
    inserted_db, beside_db = tmp_path / "inserted.duckdb", tmp_path / "beside.duckdb"
    with contextlib.closing(connection.connect(inserted_db)) as conn:
        inserted = ingestion.ingest_traces(conn, [folder], partition_date=DAY)
        expected = _rows(conn, "traces"), _rows(conn, "quarantine")
    with contextlib.closing(connection.connect(beside_db)) as conn:
        beside = ingestion.ingest_traces(conn, [folder], partition_date=DAY, traces_beside=True)
        assert _stored(conn) == 0
        got = _rows(conn, "traces"), _rows(conn, "quarantine")
        parts = conn.execute("select table_name, partition_date from merged_parts").fetchall()
    assert beside == inserted
    assert (inserted.valid, inserted.quarantined, inserted.duplicate_ids_dropped) == (7, 2, 1)
    pd.testing.assert_frame_equal(got[0], expected[0])
    pd.testing.assert_frame_equal(got[1], expected[1])
    assert parts == [("traces", DAY)]
    (run,) = _run_folders(beside_db)
    assert [p.name for p in run.iterdir()] == ["shard-0000.parquet"]
    # a session opened afterwards reads them the same
    with contextlib.closing(connection.connect(beside_db)) as conn:
        pd.testing.assert_frame_equal(_rows(conn, "traces"), expected[0])


def test_a_day_ingested_again_is_replaced_whole_and_its_earlier_file_removed(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    database = tmp_path / "w.duckdb"
    ingestion.ingest_traces(conn, [_day_folder(tmp_path)], partition_date=DAY, traces_beside=True)
    (first,) = _run_folders(database)
    other = date(2026, 11, 29)
    ingestion.ingest_traces(
        conn, [_day_folder(tmp_path, "o", 2)], partition_date=other, traces_beside=True
    )
    counts = ingestion.ingest_traces(
        conn, [_day_folder(tmp_path, "u", 3)], partition_date=DAY, traces_beside=True
    )
    assert counts.valid == 3
    assert not first.exists()
    assert len(_run_folders(database)) == 2  # the new run of DAY, and the other day's
    ids = conn.execute("select partition_date, trace_id from traces order by all").fetchall()
    assert ids == [(other, "o0"), (other, "o1"), (DAY, "u0"), (DAY, "u1"), (DAY, "u2")]
    quarantined = conn.execute(
        "select partition_date, count(*) from quarantine group by all order by all"
    ).fetchall()
    assert quarantined == [(other, 2), (DAY, 2)]
    # one process's day written over rows stored by an earlier release: they go
    conn.execute(f"insert into {qualified(conn, 'traces')} by name select * from traces")
    ingestion.ingest_traces(
        conn, [_day_folder(tmp_path, "u", 3)], partition_date=DAY, traces_beside=True
    )
    assert conn.execute(
        "select count(*) from traces where partition_date = $d", {"d": DAY}
    ).fetchone() == (3,)
    assert _stored(conn) == 2  # the other day's, stored above: not replaced


@pytest.mark.parametrize("stored_before", [False, True])
def test_a_failed_ingestion_keeps_the_day_and_leaves_no_file(
    tmp_path: Path,
    conn: duckdb.DuckDBPyConnection,
    monkeypatch: pytest.MonkeyPatch,
    stored_before: bool,
) -> None:
    """A write of the file that fails (a full disk) fails the ingestion in words; the day holds
    what it held, and the file written so far is gone."""
    database = tmp_path / "w.duckdb"
    if stored_before:
        ingestion.ingest_traces(
            conn, [_day_folder(tmp_path, "old", 2)], partition_date=DAY, traces_beside=True
        )
    before = _rows(conn, "traces"), _rows(conn, "quarantine"), _run_folders(database)
    writes = 0
    write = TracesFile._write

    def fail_the_third(self: TracesFile, valid: object) -> None:
        nonlocal writes
        writes += 1
        if writes == 3:
            raise self._error(OSError(28, "No space left on device"))
        write(self, valid)

    monkeypatch.setattr(TracesFile, "_write", fail_the_third)
    with pytest.raises(OSError, match="cannot write the day's traces beside the warehouse file"):
        ingestion.ingest_traces(
            conn, [_day_folder(tmp_path)], partition_date=DAY, traces_beside=True
        )
    assert writes == 3
    pd.testing.assert_frame_equal(_rows(conn, "traces"), before[0])
    pd.testing.assert_frame_equal(_rows(conn, "quarantine"), before[1])
    assert _run_folders(database) == before[2]
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)


def test_a_file_a_killed_ingestion_left_is_never_read_and_goes_at_the_next(
    tmp_path: Path,
) -> None:
    """Its run was never registered: no session reads it, and the next ingestion removes it."""
    database = tmp_path / "w.duckdb"
    with contextlib.closing(connection.connect(database)) as conn:
        ingestion.ingest_traces(
            conn, [_day_folder(tmp_path)], partition_date=DAY, traces_beside=True
        )
    (run,) = _run_folders(database)
    left = run.with_name("run=killed")
    shutil.copytree(run, left)
    with contextlib.closing(connection.connect(database)) as conn:
        assert conn.execute("select count(*) from traces").fetchone() == (7,)
        ingestion.ingest_traces(
            conn,
            [_day_folder(tmp_path, "o", 2)],
            partition_date=date(2026, 11, 29),
            traces_beside=True,
        )
        assert conn.execute("select count(*) from traces").fetchone() == (9,)
    assert not left.exists() and run.exists()


def test_a_day_without_a_valid_trace_registers_no_file(tmp_path: Path) -> None:
    database = tmp_path / "w.duckdb"
    folder = tmp_path / "bad"
    folder.mkdir()
    write_lines(folder / "a.jsonl", ["{bad", json.dumps(good(""))])
    with contextlib.closing(connection.connect(database)) as conn:
        counts = ingestion.ingest_traces(conn, [folder], partition_date=DAY, traces_beside=True)
        assert conn.execute("select count(*) from merged_parts").fetchone() == (0,)
    assert (counts.valid, counts.quarantined) == (0, 2)
    assert _run_folders(database) == []
    with contextlib.closing(connection.connect(database)) as conn:  # not refused
        assert conn.execute("select count(*) from quarantine").fetchone() == (2,)


def test_an_in_memory_database_or_records_dated_by_their_timestamps_insert_them(
    tmp_path: Path, conn: duckdb.DuckDBPyConnection
) -> None:
    """No file to write beside, or many days in one ingestion: the traces are inserted."""
    folder = _day_folder(tmp_path)
    with contextlib.closing(connection.connect()) as memory:
        ingestion.ingest_traces(memory, [folder], partition_date=DAY, traces_beside=True)
        assert _stored(memory) == 7
    ingestion.ingest_traces(conn, [folder], traces_beside=True)
    assert _stored(conn) == 7
    assert _run_folders(tmp_path / "w.duckdb") == []


def test_a_warehouse_folder_named_like_a_file_pattern_reads_its_own_files(tmp_path: Path) -> None:
    """`*` and `[` in the warehouse's path are read as themselves, not as wildcards (DuckDB
    itself opens no database whose path holds a `?`)."""
    database = tmp_path / "w[1]*" / "w.duckdb"
    with contextlib.closing(connection.connect(database)) as conn:
        ingestion.ingest_traces(
            conn, [_day_folder(tmp_path)], partition_date=DAY, traces_beside=True
        )
    with contextlib.closing(connection.connect(database)) as conn:
        assert conn.execute("select count(*) from traces").fetchone() == (7,)


@pytest.mark.parametrize("stored_before", [False, True])
def test_a_file_that_cannot_be_finished_fails_the_ingestion_and_keeps_the_day(
    tmp_path: Path,
    conn: duckdb.DuckDBPyConnection,
    monkeypatch: pytest.MonkeyPatch,
    stored_before: bool,
) -> None:
    """The last step, closing the file under its name, fails (a full disk): the quarantined
    rows already in (a new day's go straight in) are taken out again, and the day holds what it
    held."""
    database = tmp_path / "w.duckdb"
    if stored_before:
        ingestion.ingest_traces(
            conn, [_day_folder(tmp_path, "old", 2)], partition_date=DAY, traces_beside=True
        )
    before = _rows(conn, "traces"), _rows(conn, "quarantine"), _run_folders(database)

    def cannot_finish(self: TracesFile) -> bool:
        raise self._error(OSError(28, "No space left on device"))

    monkeypatch.setattr(TracesFile, "_finish", cannot_finish)
    with pytest.raises(OSError, match="No space left on device"):
        ingestion.ingest_traces(
            conn, [_day_folder(tmp_path)], partition_date=DAY, traces_beside=True
        )
    pd.testing.assert_frame_equal(_rows(conn, "traces"), before[0])
    pd.testing.assert_frame_equal(_rows(conn, "quarantine"), before[1])
    assert _run_folders(database) == before[2]
    assert conn.execute("select count(*) from pending_ingestions").fetchone() == (0,)
