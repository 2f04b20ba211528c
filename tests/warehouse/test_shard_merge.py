"""A day scored in shards and merged equals the day scored in one process: every row of
`traces`, `quarantine`, `labels` and `query_metrics`, repeated trace_ids across shards included;
each shard with only the corpus documents its labels name."""

import contextlib
import gzip
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.metrics import Metric, parse_metrics
from retrieval_pipeline.shards import day_files, deal, shard_folder
from retrieval_pipeline.warehouse import shards as wshards
from retrieval_pipeline.warehouse.connection import connect
from retrieval_pipeline.warehouse.corpus import load_corpus
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.shards import ShardOutputError, merge_shards, run_shard
from retrieval_pipeline.warehouse.steps import (
    LabelCounts,
    build_labels,
    build_segment_statistics,
    compute_query_metrics,
)
from tests.defs.moto_s3 import s3_server
from tests.shard_days import DAY, DOCS, write_day
from tests.warehouse_snapshots import copy_warehouse

METRICS = parse_metrics("ndcg@10,mrr,precision@5,recall@20,map")
TABLES = {
    "traces": "select * exclude (retrieved_ids) from traces order by all",
    "quarantine": "select * from quarantine order by all",
    "labels": "select * from labels order by all",
    "query_metrics": "select * from query_metrics order by all",
}


def _rows(database: Path) -> dict[str, list[tuple[object, ...]]]:
    with contextlib.closing(connect(database)) as conn:
        return {table: conn.execute(sql).fetchall() for table, sql in TABLES.items()}


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    store = tmp_path_factory.mktemp("store")
    return store, write_day(store)


@pytest.fixture(scope="module")
def one_process(day: tuple[Path, list[Path]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    store, files = day
    return _single(files, store / "corpus" / "corpus.parquet", tmp_path_factory.mktemp("single"))


def _single(files: list[Path], corpus: Path, folder: Path) -> Path:
    """The day scored in one process, as the nightly's assets score it."""
    database = folder / "warehouse.duckdb"
    conn = connect(database)
    ingest_traces(conn, files, partition_date=DAY, keep_retrieved_ids=False)
    load_corpus(conn, corpus)
    build_labels(conn, DAY, DAY, use_corpus=True)
    compute_query_metrics(conn, METRICS, DAY, DAY)
    conn.close()
    return database


# records valid in one shard whose trace_id another shard holds earlier, by the shards' files:
# 2 shards {a, b} {c, d, e}: t045 (b, c); 4 and 7: also t005 (a, b) and t100 (c, d)
REPEATED_ACROSS = {1: 0, 2: 1, 4: 3, 7: 3}


def _sharded(
    store: Path, files: list[Path], shards: int, folder: Path, corpus: Path | None = None
) -> Path:
    dealt = deal(day_files(files), shards)
    manifests = [
        run_shard(
            share,
            DAY,
            corpus or store / "corpus" / "corpus.parquet",
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
    with contextlib.closing(connect(database)) as check:
        ((valid, quarantined),) = check.execute(
            "select (select count(*) from traces), (select count(*) from quarantine)"
        ).fetchall()
    assert (merged.valid, merged.quarantined) == (valid, quarantined)
    # the merge's counts (the manifests' less the repeated records') are the merged rows' counts
    with contextlib.closing(connect(database)) as check:
        ((labels, stale, annotated),) = check.execute(
            "select (select count(*) from labels),"
            " (select count(*) from labels where stale_reason is not null),"
            " (select count(distinct trace_id) from query_metrics where is_annotated)"
        ).fetchall()
    assert (merged.labels, merged.stale_labels, merged.annotated) == (labels, stale, annotated)
    if merged.repeated_across_shards:  # the repeated records' labels were taken off
        assert sum(int(str(m["labels"])) for m in manifests) > merged.labels
        assert sum(int(str(m["annotated"])) for m in manifests) > merged.annotated
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


STATISTICS = (
    "select segment, variant, metric, traces, annotated_traces, judged_traces, n_values,"
    " not_a_number, mean, sd, shards from segment_statistics order by all"
)


def _statistics(database: Path) -> dict[tuple[str, str, str], tuple[object, ...]]:
    with contextlib.closing(connect(database)) as conn:
        return {row[:3]: row[3:] for row in conn.execute(STATISTICS).fetchall()}


@pytest.mark.parametrize("shards", [2, 7])
def test_the_merged_statistics_are_one_process_statistics(
    day: tuple[Path, list[Path]], one_process: Path, tmp_path: Path, shards: int
) -> None:
    """The merge writes the day's `segment_statistics` (what `segment_metrics` reads) by pooling
    the shards' own, less the records repeated across them, not from the merged rows: equal to
    one process's from its rows, counts exactly, means and deviations to 1e-12."""
    store, files = day
    single = tmp_path / "single.duckdb"
    copy_warehouse(one_process, single)
    conn = connect(single)
    build_segment_statistics(conn, DAY, DAY)
    conn.close()
    expected = _statistics(single)
    got = _statistics(_sharded(store, files, shards, tmp_path))
    assert set(got) == set(expected)
    assert any(key[0] == "__all__" for key in got)
    for key, (*counts, mean, sd, pooled_from) in got.items():
        *expected_counts, expected_mean, expected_sd, from_rows = expected[key]
        assert counts == expected_counts, key
        assert (pooled_from, from_rows) == (shards, 0)
        for value, wanted in ((mean, expected_mean), (sd, expected_sd)):
            assert (value is None) == (wanted is None), key
            if wanted is not None:
                assert value == pytest.approx(wanted, rel=1e-12, abs=1e-15), key


def test_segment_metrics_keep_a_sharded_day_s_statistics(
    day: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """Rebuilding `segment_metrics` computes the statistics of a day from its rows again, unless
    the merge pooled them; scoring the day again (`compute_query_metrics`) drops the pooled ones
    with the rows they stood for."""
    store, files = day
    database = _sharded(store, files, 2, tmp_path)
    pooled = _statistics(database)
    conn = connect(database)
    build_segment_statistics(conn, DAY, DAY)
    conn.close()
    assert _statistics(database) == pooled
    conn = connect(database)
    compute_query_metrics(conn, METRICS, DAY, DAY)
    ((left,),) = conn.execute("select count(*) from segment_statistics").fetchall()
    build_segment_statistics(conn, DAY, DAY)
    conn.close()
    assert left == 0
    assert {row[-1] for row in _statistics(database).values()} == {0}


def _two_shards(
    files: list[Path], folder: Path, metrics: list[tuple[Metric, ...]] | None = None
) -> tuple[list[str], list[dict[str, object]]]:
    """The day's files scored in two shards under `folder` (each with its own metrics, if
    given): the shard folders and their manifests."""
    dealt = deal(day_files(files), 2)
    folders = [shard_folder(str(folder / "shards"), DAY, "run-1", i, 2) for i in range(2)]
    manifests = [
        run_shard(
            share, DAY, None, (metrics or [METRICS, METRICS])[index], "exponential", 1.0, f, index
        )
        for index, (share, f) in enumerate(zip(dealt, folders, strict=True))
    ]
    return folders, manifests


def _left_as_it_was(database: Path) -> None:
    """Nothing of the day in the warehouse, and no file left beside it."""
    with contextlib.closing(connect(database)) as conn:
        ((traces, statistics, parts),) = conn.execute(
            "select (select count(*) from traces), (select count(*) from segment_statistics),"
            " (select count(*) from merged_parts)"
        ).fetchall()
    assert (traces, statistics, parts) == (0, 0, 0)
    merged = database.with_name(database.name + ".merged")
    assert not list(merged.glob("*/*/run=*")), "a failed merge's files are removed"


def test_a_shard_output_cut_short_fails_the_merge(
    day: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """A shard file holding fewer rows than its manifest says (cut short, or written again
    since): the merge names the shard, the file and the fix, and leaves the warehouse as it
    was. Read from the files' footers: the merge reads no shard's rows."""
    _store, files = day
    folders, manifests = _two_shards(files, tmp_path)
    path = Path(folders[1]) / "query_metrics.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 5), path)
    database = tmp_path / "warehouse.duckdb"
    conn = connect(database)
    expected = f"query_metrics.parquet holds {table.num_rows - 5} rows where the shard's manifest"
    with pytest.raises(ShardOutputError, match=rf"shard=1-of-2: {expected}.*run the day again"):
        merge_shards(conn, DAY, manifests)
    conn.close()
    _left_as_it_was(database)


def test_shards_of_two_configurations_fail_the_merge(
    day: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """One shard scored with other metrics: the merge names it and both configurations."""
    _store, files = day
    other = parse_metrics("ndcg@10,mrr")
    _folders, manifests = _two_shards(files, tmp_path, [METRICS, other])
    database = tmp_path / "warehouse.duckdb"
    conn = connect(database)
    with pytest.raises(ShardOutputError, match=r"shard=1-of-2: the shard scored with .*'mrr'\]"):
        merge_shards(conn, DAY, manifests)
    conn.close()
    _left_as_it_was(database)


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


def _label_doc_ids(files: list[str]) -> set[str]:
    """The documents the records in `files` label, read from the files as they are written."""
    named: set[str] = set()
    for path in map(Path, files):
        if path.suffix == ".parquet":
            for scores in pq.read_table(path, columns=["relevance_scores"])[0].to_pylist():
                named.update(doc for doc, _grade in scores or [])
            continue
        with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as lines:
            for line in lines:
                with contextlib.suppress(json.JSONDecodeError):  # the broken record
                    named.update(json.loads(line).get("relevance_scores") or {})
    return named


def test_each_shard_loads_only_the_corpus_documents_its_labels_name(
    day: tuple[Path, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, files = day
    # the day's corpus less every 7th document: labels name documents it does not hold
    table = pq.read_table(store / "corpus" / "corpus.parquet")
    gone = pa.array([f"d{n}" for n in range(0, DOCS, 7)])
    table = table.filter(pc.invert(pc.is_in(table["doc_id"], value_set=gone)))
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(table, corpus)
    loaded: list[tuple[set[str], bool]] = []

    def labels_seeing_corpus(
        conn: duckdb.DuckDBPyConnection, start: object, end: object, use_corpus: bool
    ) -> LabelCounts:
        documents = {row[0] for row in conn.execute("select doc_id from corpus").fetchall()}
        loaded.append((documents, use_corpus))
        return build_labels(conn, DAY, DAY, use_corpus)

    monkeypatch.setattr(wshards, "build_labels", labels_seeing_corpus)
    got = _rows(_sharded(store, files, 4, tmp_path, corpus))
    in_snapshot = set(table["doc_id"].to_pylist())
    dealt = deal(day_files(files), 4)
    assert [documents for documents, _ in loaded] == [
        _label_doc_ids([file.path for file in share]) & in_snapshot for share in dealt
    ]
    assert all(use_corpus for _, use_corpus in loaded)
    assert max(len(documents) for documents, _ in loaded) < len(in_snapshot) * 0.8
    # the labels of one process against the same snapshot, those it lacks stale as well
    assert got == _rows(_single(files, corpus, tmp_path))
    reasons = {row[4] for row in got["labels"]}
    assert reasons == {None, "not in corpus", "deleted before the query was served"}


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


def test_a_manifest_without_a_count_fails_the_merge_naming_it(
    day: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """A shard manifest of an earlier release (no `annotated`): the merge names the count and
    the shard, and says what to do, rather than report a day's counts without it."""
    _store, files = day
    folder = shard_folder(str(tmp_path / "shards"), DAY, "run-1", 0, 1)
    manifest = run_shard(day_files(files), DAY, None, METRICS, "exponential", 1.0, folder, 0)
    del manifest["annotated"]
    (Path(folder) / "manifest.json").write_text(json.dumps(manifest))
    conn = connect(tmp_path / "warehouse.duckdb")
    with pytest.raises(ShardOutputError, match=r"no count 'annotated'.*run the day again") as error:
        merge_shards(conn, DAY, [manifest])
    ((traces,),) = conn.execute("select count(*) from traces").fetchall()
    conn.close()
    assert folder in str(error.value)
    assert traces == 0  # found before the merge wrote anything


def test_a_shard_of_an_earlier_release_fails_the_merge_naming_its_missing_output(
    day: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """A shard written before `segment_statistics.parquet` (its manifest lists
    `segment_partials`): the merge names the shard, the file and the fix before it writes
    anything."""
    _store, files = day
    folder = shard_folder(str(tmp_path / "shards"), DAY, "run-1", 0, 1)
    manifest = run_shard(day_files(files), DAY, None, METRICS, "exponential", 1.0, folder, 0)
    rows = manifest["rows"]
    assert isinstance(rows, dict)
    rows["segment_partials"] = rows.pop("segment_statistics")
    manifest["rows"] = rows
    (Path(folder) / "manifest.json").write_text(json.dumps(manifest))
    (Path(folder) / "segment_statistics.parquet").unlink()
    conn = connect(tmp_path / "warehouse.duckdb")
    with pytest.raises(
        ShardOutputError, match=r"wrote no segment_statistics\.parquet .*run the day again"
    ) as error:
        merge_shards(conn, DAY, [manifest])
    ((traces,),) = conn.execute("select count(*) from traces").fetchall()
    conn.close()
    assert folder in str(error.value)
    assert traces == 0


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
