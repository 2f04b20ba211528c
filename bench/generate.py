"""Seeded generator of the benchmark workload: N traces of 100 retrieved ids, ~10 graded labels.

One command: `python bench/generate.py --sizes 10000,100000` writes, per size and seed, under
`bench/data/n<N>_s<seed>/` (gitignored, reused when present):

- `traces.parquet`: one row per trace, list column `retrieved_ids`, MAP column `relevance_scores`;
- `traces.jsonl` and `traces.jsonl.gz`: the same records, one JSON object per line;
- `store/traces/date=2026-11-30/traces.jsonl.gz` and `store/corpus/corpus.parquet`: the same files
  (hard links) laid out as the nightly pipeline's trace store.

and once per seed `bench/data/corpus_s<seed>/corpus.parquet`: ~1M documents, some missing (labels
pointing at them are stale), some deleted before the traces' day (stale), some deleted after
(fresh), a few added after the day (stale); `added_at` is null for the rest.

Workload: string ids `doc-NNNNNN` drawn from the corpus; 5 segments, 2 variants; a query logged
several times; ~10% of traces unannotated (no `relevance_scores`), ~2% labelled with only grade 0;
each annotated trace has 5..15 labels (grades 0..3), ~60% of them at retrieved positions (biased to
the top), the rest not retrieved; repeated ids inside a list occur naturally (~0.5% of traces).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

GENERATOR_VERSION = 2
DATA_ROOT = Path(__file__).resolve().parent / "data"
DAY = date(2026, 11, 30)
N_DOCS = 1_000_000
LIST_LENGTH = 100
LABEL_SLOTS = 15  # at most this many labels per trace; 5..15 drawn, mean 10
RETRIEVED_LABEL_SHARE = 0.6
GRADE_WEIGHTS = (0.3, 0.3, 0.25, 0.15)  # grades 0, 1, 2, 3
UNANNOTATED_SHARE = 0.10
NO_RELEVANT_SHARE = 0.02
SEGMENTS = ("factual", "multi_hop", "navigational", "long_tail", "code")
VARIANTS = ("control", "candidate")
CHUNK = 100_000  # traces generated (and held in memory) at a time
ROW_GROUP = 10_000  # Parquet rows per row group: DuckDB scans row groups in parallel
# corpus: shares of the N_DOCS ids
MISSING_SHARE = 0.003
DELETED_BEFORE_SHARE = 0.02
DELETED_AFTER_SHARE = 0.01
ADDED_AFTER_SHARE = 0.005

TRACE_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("query_id", pa.string()),
        ("timestamp", pa.string()),
        ("segment", pa.string()),
        ("variant", pa.string()),
        ("label_source", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.map_(pa.string(), pa.int32())),
    ]
)


@dataclass(frozen=True)
class Dataset:
    """Paths of one generated workload."""

    size: int
    seed: int
    root: Path

    @property
    def parquet(self) -> Path:
        return self.root / "traces.parquet"

    @property
    def jsonl(self) -> Path:
        return self.root / "traces.jsonl"

    @property
    def jsonl_gz(self) -> Path:
        return self.root / "traces.jsonl.gz"

    @property
    def corpus(self) -> Path:
        return self.root.parent / f"corpus_s{self.seed}" / "corpus.parquet"

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def day(self) -> date:
        return DAY

    def cache(self, name: str) -> Path:
        """A file beside the data for values derived from it (e.g. the oracle's means)."""
        return self.root / name


def _prefixed(prefix: str, numbers: np.ndarray, width: int) -> pa.Array:
    """`prefix` + zero-padded decimal numbers, built in Arrow (no Python loop)."""
    digits = pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), width=width, padding="0")
    return pc.binary_join_element_wise(prefix, digits, "")


def _chunk(rng: np.random.Generator, first: int, n: int, n_queries: int) -> pa.Table:
    retrieved = rng.integers(0, N_DOCS, size=(n, LIST_LENGTH))
    n_labels = rng.integers(5, LABEL_SLOTS + 1, size=n)
    from_list = rng.random((n, LABEL_SLOTS)) < RETRIEVED_LABEL_SHARE
    positions = np.minimum((rng.random((n, LABEL_SLOTS)) ** 2 * LIST_LENGTH).astype(np.int64), 99)
    elsewhere = rng.integers(0, N_DOCS, size=(n, LABEL_SLOTS))
    label_ids = np.where(from_list, np.take_along_axis(retrieved, positions, axis=1), elsewhere)
    grades = rng.choice(4, size=(n, LABEL_SLOTS), p=GRADE_WEIGHTS).astype(np.int32)
    grades[rng.random(n) < NO_RELEVANT_SHARE] = 0
    unannotated = rng.random(n) < UNANNOTATED_SHARE
    # a label id repeated inside one trace keeps its first slot (map keys are unique)
    same = label_ids[:, :, None] == label_ids[:, None, :]
    earlier = np.tril(np.ones((LABEL_SLOTS, LABEL_SLOTS), dtype=bool), k=-1)
    repeated = (same & earlier).any(axis=2)
    keep = (np.arange(LABEL_SLOTS) < n_labels[:, None]) & ~repeated & ~unannotated[:, None]
    counts = keep.sum(axis=1)
    map_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    scores = pa.MapArray.from_arrays(
        pa.array(map_offsets),
        _prefixed("doc-", label_ids[keep], 6),
        pa.array(grades[keep]),
        type=TRACE_SCHEMA.field("relevance_scores").type,
        mask=pa.array(unannotated),
    )
    list_offsets = pa.array(np.arange(0, n * LIST_LENGTH + 1, LIST_LENGTH, dtype=np.int32))
    retrieved_ids = pa.ListArray.from_arrays(list_offsets, _prefixed("doc-", retrieved.ravel(), 6))
    seconds = rng.integers(0, 86_400, size=n)
    served = np.datetime64(DAY.isoformat(), "s") + seconds.astype("timedelta64[s]")
    timestamps = pc.strftime(pa.array(served, pa.timestamp("s")), format="%Y-%m-%dT%H:%M:%SZ")
    label_source = np.where(rng.random(n) < 0.7, "human", "click").astype(object)
    label_source[unannotated] = None
    columns = {
        "trace_id": _prefixed("t-", np.arange(first, first + n), 8),
        "query_id": _prefixed("q-", rng.integers(0, n_queries, size=n), 7),
        "timestamp": timestamps,
        "segment": pa.array(np.array(SEGMENTS, dtype=object)[rng.integers(0, 5, size=n)]),
        "variant": pa.array(np.array(VARIANTS, dtype=object)[rng.integers(0, 2, size=n)]),
        "label_source": pa.array(label_source, pa.string()),
        "retrieved_ids": retrieved_ids,
        "relevance_scores": scores,
    }
    return pa.table(columns, schema=TRACE_SCHEMA)


def write_corpus(seed: int, path: Path) -> None:
    """~1M documents with missing ids and deletions before and after the traces' day."""
    rng = np.random.default_rng([seed, 1])
    draw = rng.random(N_DOCS)
    ids = np.arange(N_DOCS)
    present = draw >= MISSING_SHARE
    utc = pa.timestamp("us", tz="UTC")
    day = datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC)

    def at(mask: np.ndarray, when: datetime) -> pa.Array:
        micros = np.full(N_DOCS, int(when.timestamp() * 1_000_000), dtype=np.int64)
        return pa.array(micros, pa.int64(), mask=~mask).cast(utc)

    lo = MISSING_SHARE
    deleted_before = (draw >= lo) & (draw < lo + DELETED_BEFORE_SHARE)
    lo += DELETED_BEFORE_SHARE
    deleted_after = (draw >= lo) & (draw < lo + DELETED_AFTER_SHARE)
    lo += DELETED_AFTER_SHARE
    added_after = (draw >= lo) & (draw < lo + ADDED_AFTER_SHARE)
    deleted = pc.coalesce(
        at(deleted_before, day.replace(month=6, day=1)), at(deleted_after, day.replace(day=15))
    )
    added = at(added_after, day.replace(month=12, day=10))  # unknown (null) for the others
    table = pa.table(
        {"doc_id": _prefixed("doc-", ids, 6), "added_at": added, "deleted_at": deleted}
    ).filter(pa.array(present))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def dataset(size: int, seed: int = 7, data_root: Path | None = None) -> Dataset:
    """The workload of `size` traces for `seed`, generated on first use and cached."""
    root = (data_root or DATA_ROOT) / f"n{size}_s{seed}"
    ds = Dataset(size, seed, root)
    manifest = root / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text()).get("version") == GENERATOR_VERSION:
        return ds
    if not ds.corpus.is_file():
        write_corpus(seed, ds.corpus)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    rng = np.random.default_rng([seed, size])
    n_queries = max(1, size // 4)
    with pq.ParquetWriter(ds.parquet, TRACE_SCHEMA) as writer:
        for first in range(0, size, CHUNK):
            table = _chunk(rng, first, min(CHUNK, size - first), n_queries)
            writer.write_table(table, row_group_size=ROW_GROUP)
    conn = duckdb.connect()
    source = f"(select * from read_parquet('{ds.parquet}'))"  # our own path, not user input
    conn.execute(f"copy {source} to '{ds.jsonl}' (format json)")
    conn.execute(f"copy {source} to '{ds.jsonl_gz}' (format json, compression gzip)")
    conn.close()
    _link(ds.jsonl_gz, ds.store / "traces" / f"date={DAY.isoformat()}" / "traces.jsonl.gz")
    _link(ds.corpus, ds.store / "corpus" / "corpus.parquet")
    manifest.write_text(
        json.dumps({"version": GENERATOR_VERSION, "size": size, "seed": seed, "day": str(DAY)})
    )
    return ds


def parquet_store(ds: Dataset) -> Path:
    """The day laid out as a Parquet trace store (`store_parquet/`: traces.parquet as the day's
    one file, the same corpus), for the nightly from a store of typed columns; made on first
    use, as links."""
    root = ds.root / "store_parquet"
    _link(ds.parquet, root / "traces" / f"date={DAY.isoformat()}" / "traces.parquet")
    _link(ds.corpus, root / "corpus" / "corpus.parquet")
    return root


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000", help="comma-separated trace counts")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.sizes.split(",")):
        ds = dataset(size, args.seed)
        sizes = {p.name: p.stat().st_size for p in (ds.parquet, ds.jsonl, ds.jsonl_gz)}
        print(
            f"{size} traces: {ds.root} "
            + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items())
        )


if __name__ == "__main__":
    main()
