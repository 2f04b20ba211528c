"""A day scored in shards and merged equals the day scored in one process: every row of
`traces`, `quarantine`, `labels` and `query_metrics`, repeated trace_ids across shards included."""

from pathlib import Path

import duckdb
import pytest

from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.shards import day_files, deal, shard_folder
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.corpus import load_corpus
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.shards import ShardOutputError, merge_shards, run_shard
from retrieval_pipeline.warehouse.steps import build_labels, compute_query_metrics
from tests.defs.moto_s3 import s3_server
from tests.shard_days import DAY, write_day

METRICS = parse_metrics("ndcg@10,mrr,precision@5,recall@20,map")
TABLES = {
    "traces": "select * exclude (retrieved_ids) from traces order by all",
    "quarantine": "select * from quarantine order by all",
    "labels": "select * from labels order by all",
    "query_metrics": "select * from query_metrics order by all",
}


def _rows(database: Path) -> dict[str, list[tuple[object, ...]]]:
    with duckdb.connect(str(database), read_only=True) as conn:
        return {table: conn.execute(sql).fetchall() for table, sql in TABLES.items()}


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    store = tmp_path_factory.mktemp("store")
    return store, write_day(store)


@pytest.fixture(scope="module")
def one_process(day: tuple[Path, list[Path]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    store, files = day
    database = tmp_path_factory.mktemp("single") / "warehouse.duckdb"
    conn = connect(database)
    ingest_traces(conn, files, partition_date=DAY, keep_retrieved_ids=False)
    load_corpus(conn, store / "corpus" / "corpus.parquet")
    build_labels(conn, DAY, DAY, use_corpus=True)
    compute_query_metrics(conn, METRICS, DAY, DAY)
    conn.close()
    return database


# records valid in one shard whose trace_id another shard holds earlier, by the shards' files:
# 2 shards {a, b} {c, d, e}: t045 (b, c); 4 and 7: also t005 (a, b) and t100 (c, d)
REPEATED_ACROSS = {1: 0, 2: 1, 4: 3, 7: 3}


def _sharded(store: Path, files: list[Path], shards: int, folder: Path) -> Path:
    dealt = deal(day_files(files), shards)
    manifests = [
        run_shard(
            share,
            DAY,
            store / "corpus" / "corpus.parquet",
            METRICS,
            "exponential",
            1.0,
            shard_folder(str(folder / "shards"), DAY, "run-1", index, shards),
            index,
        )
        for index, share in enumerate(dealt)
    ]
    database = folder / "warehouse.duckdb"
    conn = connect(database)
    merged = merge_shards(conn, DAY, manifests)
    conn.close()
    assert (merged.shards, merged.files) == (shards, len(files))
    assert merged.shards_with_files == min(shards, len(files))
    assert merged.repeated_across_shards == REPEATED_ACROSS[shards]
    with duckdb.connect(str(database), read_only=True) as check:
        ((valid, quarantined),) = check.execute(
            "select (select count(*) from traces), (select count(*) from quarantine)"
        ).fetchall()
    assert (merged.valid, merged.quarantined) == (valid, quarantined)
    return database


@pytest.mark.parametrize("shards", [1, 2, 4, 7])
def test_the_merged_rows_are_one_process_rows(
    day: tuple[Path, list[Path]], one_process: Path, tmp_path: Path, shards: int
) -> None:
    store, files = day
    expected = _rows(one_process)
    got = _rows(_sharded(store, files, shards, tmp_path))
    for table in TABLES:
        assert got[table] == expected[table], table


def test_the_day_has_every_case(one_process: Path) -> None:
    rows = _rows(one_process)
    reasons = [str(row[5]) for row in rows["quarantine"]]
    # t005 (a.jsonl, b.jsonl.gz), t045 (b.jsonl.gz, c.parquet), t100 (c.parquet, d.jsonl twice)
    repeated = sorted(r.split(" (")[0] for r in reasons if r.startswith("duplicate trace_id"))
    # t045 twice in b.jsonl.gz, once in c.parquet; t100 in c.parquet, twice in d.jsonl
    assert repeated == [f"duplicate trace_id {t}" for t in ("t005", "t045", "t045", "t100", "t100")]
    assert any("c.parquet line" in r for r in reasons if "t100" in r)
    assert any(row[4] is not None for row in rows["labels"])  # stale labels
    assert len(rows["traces"]) == 140 + 5


def test_a_missing_shard_manifest_fails_the_merge(
    day: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    _store, files = day
    folder = shard_folder(str(tmp_path / "shards"), DAY, "run-1", 0, 1)
    manifest = run_shard(day_files(files), DAY, None, METRICS, "exponential", 1.0, folder, 0)
    (Path(folder) / "manifest.json").unlink()
    conn = connect(tmp_path / "warehouse.duckdb")
    with pytest.raises(ShardOutputError, match="no readable shard manifest"):
        merge_shards(conn, DAY, [manifest])
    conn.close()


def test_shard_outputs_on_an_s3_server(
    day: tuple[Path, list[Path]], one_process: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, files = day
    with s3_server(tmp_path) as env:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        dealt = deal(day_files(files), 4)
        manifests = [
            run_shard(
                share,
                DAY,
                store / "corpus" / "corpus.parquet",
                METRICS,
                "exponential",
                1.0,
                shard_folder("s3://shards/nightly", DAY, "run-1", index, 4),
                index,
            )
            for index, share in enumerate(dealt)
        ]
        assert all(str(m["folder"]).startswith("s3://shards/nightly/date=") for m in manifests)
        conn = connect(tmp_path / "warehouse.duckdb")
        merged = merge_shards(conn, DAY, manifests)
        conn.close()
    assert merged.repeated_across_shards == REPEATED_ACROSS[4]
    assert _rows(tmp_path / "warehouse.duckdb") == _rows(one_process)
