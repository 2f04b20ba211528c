"""The merge's pooling of the shards' segment statistics (sql/agg_shard_segment_statistics.sql),
checked against numbers worked out by hand: counts add up, means and standard deviations pool
exactly, the repeated records' share is taken back out, and a row left without traces is dropped.
(tests/warehouse/test_shard_merge.py holds the pooled statistics of real shards equal to one
process's.)"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.warehouse.sql import load_sql

DAY = date(2026, 11, 30)
COLUMNS = (
    "segment",
    "variant",
    "metric",
    "traces",
    "annotated_traces",
    "judged_traces",
    "n_values",
    "mean",
    "sd",
    "not_a_number",
)
SCHEMA = pa.schema(
    [(name, pa.string()) for name in COLUMNS[:3]]
    + [(name, pa.int64()) for name in COLUMNS[3:7]]
    + [("mean", pa.float64()), ("sd", pa.float64()), ("not_a_number", pa.int64())]
)


def _statistics(path: Path, rows: Sequence[tuple[object, ...]]) -> str:
    pq.write_table(
        pa.Table.from_pylist([dict(zip(COLUMNS, r, strict=True)) for r in rows], SCHEMA), path
    )
    return str(path)


def _pooled(
    tmp_path: Path,
    shards: Sequence[Sequence[tuple[object, ...]]],
    repeated: Sequence[tuple[object, ...]],
) -> dict[tuple[str, str, str], dict[str, object]]:
    files = [_statistics(tmp_path / f"s{i}.parquet", rows) for i, rows in enumerate(shards)]
    with duckdb.connect() as conn:
        table = pa.Table.from_pylist([dict(zip(COLUMNS, r, strict=True)) for r in repeated], SCHEMA)
        conn.register("repeated", table)
        conn.execute("create temp table shard_repeated_statistics as select * from repeated")
        result = conn.execute(
            load_sql("agg_shard_segment_statistics"),
            {"day": DAY, "statistics": files, "shards": len(files)},
        )
        names = [d[0] for d in result.description]
        found = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    return {(r["segment"], r["variant"], r["metric"]): r for r in found}


def test_shards_pool_and_the_repeated_record_is_taken_out(tmp_path: Path) -> None:
    sd_a = math.sqrt(((1 - 2 / 3) ** 2 + (0 - 2 / 3) ** 2 + (1 - 2 / 3) ** 2) / 2)  # 1, 0, 1
    shard_a = [
        # 4 traces, 3 annotated (1 by the judgments), values 1, 0, 1
        ("s", "v", "ndcg@10", 4, 3, 1, 3, 2 / 3, sd_a, 0),
        ("s", "v", "mrr", 4, 3, 1, 2, 0.5, math.sqrt(0.5), 1),  # values 1, 0, NaN
        # a segment whose one trace is the record repeated from shard b's
        ("t", "v", "ndcg@10", 1, 1, 0, 1, 0.2, None, 0),
        ("t", "v", "mrr", 1, 1, 0, 1, 1.0, None, 0),
    ]
    shard_b = [
        ("s", "v", "ndcg@10", 1, 1, 0, 1, 0.5, None, 0),  # value 0.5
        ("s", "v", "mrr", 1, 1, 0, 1, 1.0, None, 0),
    ]
    repeated = [  # shard a's second record of a trace_id shard b holds first: value 1 in s
        ("s", "v", "ndcg@10", 1, 1, 0, 1, 1.0, None, 0),
        ("s", "v", "mrr", 1, 1, 0, 1, 1.0, None, 0),
        ("t", "v", "ndcg@10", 1, 1, 0, 1, 0.2, None, 0),
        ("t", "v", "mrr", 1, 1, 0, 1, 1.0, None, 0),
    ]
    pooled = _pooled(tmp_path, [shard_a, shard_b], repeated)
    assert set(pooled) == {("s", "v", "ndcg@10"), ("s", "v", "mrr")}  # t had only the repeat
    ndcg = pooled[("s", "v", "ndcg@10")]
    # left: 0 and 1 of shard a, 0.5 of shard b; traces 4 + 1 - 1
    assert (ndcg["traces"], ndcg["annotated_traces"], ndcg["judged_traces"]) == (4, 3, 1)
    assert (ndcg["n_values"], ndcg["not_a_number"], ndcg["shards"]) == (3, 0, 2)
    assert ndcg["mean"] == pytest.approx((0 + 1 + 0.5) / 3, rel=1e-15)
    # squared deviations from 0.5: 0.25 + 0.25 + 0, over 3 - 1
    assert ndcg["sd"] == pytest.approx(math.sqrt((0.25 + 0.25 + 0) / 2), rel=1e-15)
    mrr = pooled[("s", "v", "mrr")]  # left: 0 of shard a, 1 of shard b, and shard a's NaN
    assert (mrr["n_values"], mrr["not_a_number"]) == (2, 1)
    assert mrr["mean"] == pytest.approx(0.5, rel=1e-15)
    assert mrr["sd"] == pytest.approx(math.sqrt((0.25 + 0.25) / 1), rel=1e-15)


def test_parts_of_one_mean_pool_to_it_exactly(tmp_path: Path) -> None:
    """0.7 five times in one shard and twice in another: (5 x 0.7 + 2 x 0.7) / 7 is not 0.7 in
    binary; the pooled mean, an offset from the smallest part's, is 0.7 itself: pooling adds no
    rounding of its own where the parts agree, next to a threshold of 0.7."""
    assert (5 * 0.7 + 2 * 0.7) / 7 != 0.7  # a sum of the parts' would miss it
    shards = [
        [("s", "v", "precision@5", 5, 5, 0, 5, 0.7, 0.0, 0)],
        [("s", "v", "precision@5", 2, 2, 0, 2, 0.7, 0.0, 0)],
    ]
    row = _pooled(tmp_path, shards, [])[("s", "v", "precision@5")]
    assert row["mean"] == 0.7
    assert row["sd"] == 0.0
    assert row["n_values"] == 7


def test_a_group_without_values_pools_to_no_mean(tmp_path: Path) -> None:
    shards = [
        [("s", "v", "map", 2, 0, 0, 0, None, None, 0)],  # two unannotated traces
        [("s", "v", "map", 3, 0, 0, 0, None, None, 0)],
    ]
    row = _pooled(tmp_path, shards, [])[("s", "v", "map")]
    assert (row["traces"], row["n_values"], row["mean"], row["sd"]) == (5, 0, None, None)
