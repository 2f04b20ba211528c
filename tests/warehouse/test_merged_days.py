"""A sharded day's rows stay in its shards' Parquet, placed beside the warehouse file: the merge
inserts none of them, every statement reads them under the tables' names, and writing the day
again (merged or in one process) replaces them whole."""

from __future__ import annotations

import contextlib
import os
from datetime import date
from pathlib import Path

import duckdb
import pytest

from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.shards import day_files, deal, shard_folder
from retrieval_pipeline.warehouse.connection import UnreadableDatabaseError, connect
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.merged_days import MERGED_TABLES
from retrieval_pipeline.warehouse.shards import merge_shards, run_shard
from retrieval_pipeline.warehouse.steps import build_labels, compute_query_metrics
from tests.shard_days import DAY, write_day

METRICS = parse_metrics("ndcg@10,mrr")
COUNTS = (
    "select (select count(*) from traces), (select count(*) from labels),"
    " (select count(*) from query_metrics), (select count(*) from merged_parts)"
)
STORED = (
    "select (select count(*) from warehouse.main.traces),"
    " (select count(*) from warehouse.main.labels),"
    " (select count(*) from warehouse.main.query_metrics)"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_day(tmp_path_factory.mktemp("store"))


def _shards(files: list[Path], root: Path, run: str) -> list[dict[str, object]]:
    """The day in two shards, without a corpus (no label is stale)."""
    return [
        run_shard(share, DAY, None, METRICS, "exponential", 1.0, folder, index)
        for index, (share, folder) in enumerate(
            (share, shard_folder(str(root), DAY, run, index, 2))
            for index, share in enumerate(deal(day_files(files), 2))
        )
    ]


def _one_process(conn: duckdb.DuckDBPyConnection, files: list[Path]) -> None:
    """The day scored again in one process, as the nightly's assets score it."""
    ingest_traces(conn, files, partition_date=DAY, keep_retrieved_ids=False)
    build_labels(conn, DAY, DAY, use_corpus=False)
    compute_query_metrics(conn, METRICS, DAY, DAY)


def _counts(database: Path) -> tuple[int, ...]:
    with contextlib.closing(connect(database)) as conn:
        ((*counts,),) = conn.execute(COUNTS).fetchall()
        return tuple(counts)


def test_the_merge_inserts_no_rows_and_links_the_shards_files(
    files: list[Path], tmp_path: Path
) -> None:
    manifests = _shards(files, tmp_path / "shards", "run-1")
    database = tmp_path / "warehouse.duckdb"
    with contextlib.closing(connect(database)) as conn:
        merged = merge_shards(conn, DAY, manifests)
        # nothing of the day in the stored tables; a new session reads it under their names
        assert conn.execute(STORED).fetchall() == [(0, 0, 0)]
    shard_rows = [manifest["rows"] for manifest in manifests]
    assert isinstance(shard_rows[0], dict) and isinstance(shard_rows[1], dict)
    # the day's traces less the one record repeated across the two shards (t045)
    assert merged.repeated_across_shards == 1
    traces, labels, metrics, parts = _counts(database)
    assert traces == shard_rows[0]["traces"] + shard_rows[1]["traces"] - 1 == merged.valid
    assert labels == merged.labels
    assert metrics == (traces * len(METRICS))
    assert parts == len(MERGED_TABLES)
    # a shard without the repeated record is linked, not copied: the merge wrote none of its rows
    placed = sorted(database.with_name("warehouse.duckdb.merged").glob("*/*/run=*/*.parquet"))
    assert len(placed) == 2 * len(MERGED_TABLES)
    linked = [p for p in placed if os.stat(p).st_nlink == 2]
    assert len(linked) == len(MERGED_TABLES), "one shard's files linked, the other's rewritten"


def test_a_retried_shard_leaves_the_merged_day_as_it_was(files: list[Path], tmp_path: Path) -> None:
    """A shard writes each file anew (renamed into place), never into a file a merge linked."""
    manifests = _shards(files, tmp_path / "shards", "run-1")
    database = tmp_path / "warehouse.duckdb"
    with contextlib.closing(connect(database)) as conn:
        merge_shards(conn, DAY, manifests)
        before = conn.execute("select * from query_metrics order by all").fetchall()
    other = parse_metrics("precision@5")
    share = deal(day_files(files), 2)[0]
    run_shard(share, DAY, None, other, "exponential", 1.0, str(manifests[0]["folder"]), 0)
    with contextlib.closing(connect(database)) as conn:
        assert conn.execute("select * from query_metrics order by all").fetchall() == before


def test_a_day_merged_again_or_scored_in_one_process_is_replaced_whole(
    files: list[Path], tmp_path: Path
) -> None:
    database = tmp_path / "warehouse.duckdb"
    merged_folder = database.with_name("warehouse.duckdb.merged")
    first = _shards(files, tmp_path / "shards", "run-1")
    with contextlib.closing(connect(database)) as conn:
        merge_shards(conn, DAY, first)
    once = _counts(database)
    # merged again: the same rows once, the first merge's files gone
    again = _shards(files, tmp_path / "shards", "run-2")
    with contextlib.closing(connect(database)) as conn:
        merge_shards(conn, DAY, again)
    assert _counts(database) == once
    assert len(list(merged_folder.glob("*/*/run=*"))) == len(MERGED_TABLES)
    # scored in one process: its stored rows, the merged files forgotten (and removed at the next
    # merge); the traces' count as the merge gave it
    with contextlib.closing(connect(database)) as conn:
        _one_process(conn, files)
        assert conn.execute(STORED).fetchall() == [once[:3]]
    assert _counts(database) == (*once[:3], 0)
    # a merge of another day removes the files no longer registered, and the day stays as it is
    other_day = date(2026, 12, 1)
    with contextlib.closing(connect(database)) as conn:
        manifests = [
            run_shard([], other_day, None, METRICS, "exponential", 1.0, folder, index)
            for index, folder in enumerate(
                shard_folder(str(tmp_path / "shards"), other_day, "run-3", i, 2) for i in range(2)
            )
        ]
        merge_shards(conn, other_day, manifests)
    assert not list(merged_folder.glob(f"*/partition_date={DAY.isoformat()}"))
    assert _counts(database) == (*once[:3], len(MERGED_TABLES))


def test_a_warehouse_whose_merged_rows_are_gone_is_refused_naming_the_fix(
    files: list[Path], tmp_path: Path
) -> None:
    """The `.merged` folder moved away: every session refuses the warehouse (its merged days
    would read as empty), naming the day, the folder and the fix; put back, all is there."""
    database = tmp_path / "warehouse.duckdb"
    with contextlib.closing(connect(database)) as conn:
        merge_shards(conn, DAY, _shards(files, tmp_path / "shards", "run-1"))
    counts = _counts(database)
    merged = database.with_name("warehouse.duckdb.merged")
    merged.rename(tmp_path / "elsewhere")
    expected = rf"rows of {DAY} \(labels, and 2 more table-day\(s\)\) are not in {merged}/labels/"
    with pytest.raises(UnreadableDatabaseError, match=expected) as refused:
        connect(database)
    assert f"Put the folder {merged} back (it goes with the file" in str(refused.value)
    assert "or rebuild the warehouse from the store" in str(refused.value)
    (tmp_path / "elsewhere").rename(merged)
    assert _counts(database) == counts


def test_a_day_is_not_merged_into_an_in_memory_database(files: list[Path], tmp_path: Path) -> None:
    """Its rows would have no folder to stay in: refused before anything is written."""
    manifests = _shards(files, tmp_path / "shards", "run-1")
    with contextlib.closing(connect(":memory:")) as conn:
        with pytest.raises(ValueError, match="into a warehouse file, not an in-memory database"):
            merge_shards(conn, DAY, manifests)
        assert conn.execute(COUNTS).fetchall() == [(0, 0, 0, 0)]
