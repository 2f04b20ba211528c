"""Before/after of a proposed rewrite of `sql/fct_query_metrics.sql`: the same rows, and time.

    /tmp/venv/bin/python bench/proposals/compare.py --size 100000 --repeat 3 \
        bench/proposals/fct_query_metrics_requested_only.sql

Ingests the benchmark's Parquet traces (with the corpus) once, then for several parameter sets
(both gains, two relevance levels, every family with and without cut-offs) checks that the
proposal returns the original's rows (every key and column equal, values within 1e-12, see
`compare`) and times `insert into query_metrics` of each, alternating, median of --repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.common import METRICS
from bench.generate import dataset

PARAM_SETS = [
    ("bench metrics, linear", list(METRICS), False, 1.0),
    ("bench metrics, exponential", list(METRICS), True, 1.0),
    (
        "every family, level 2",
        [
            "ndcg@3",
            "ndcg@10",
            "mrr",
            "mrr@10",
            "precision@1",
            "recall@100",
            "map",
            "map@5",
            "hit_rate@10",
        ],
        True,
        2.0,
    ),
]


def params(names: list[str], exponential: bool, level: float, day) -> dict:
    from retrieval_pipeline.metrics import parse_metrics

    metrics = parse_metrics(names)
    return {
        "start_date": day,
        "end_date": day,
        "cutoffs": sorted({m.k for m in metrics if m.k is not None}),
        "metric_names": [m.name for m in metrics],
        "relevance_level": level,
        "exponential_gain": exponential,
    }


def compare(conn, left: str, right: str) -> tuple[bool, float]:
    """Same (trace, metric) keys and other columns, and the largest value difference. Values are
    compared with a tolerance: the order of `list(...)` in the labels aggregate is not fixed
    with two threads, so sums over it may differ in the last bit from run to run."""
    keys = "partition_date, trace_id, query_id, segment, variant, is_annotated, n_relevant, metric"
    missing = conn.execute(
        f"select (select count(*) from (select {keys} from {left} except all"
        f" select {keys} from {right}))"
        f" + (select count(*) from (select {keys} from {right} except all"
        f" select {keys} from {left}))"
    ).fetchone()[0]
    diff = conn.execute(
        f"select coalesce(max(abs(l.value - r.value)), 0),"
        f" count(*) filter (where (l.value is null) <> (r.value is null))"
        f" from {left} l join {right} r using (partition_date, trace_id, metric)"
    ).fetchone()
    return missing == 0 and diff[1] == 0, float(diff[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("proposal", type=Path)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from retrieval_pipeline import engine
    from retrieval_pipeline.sql_files import load_sql

    ds = dataset(args.size, args.seed)
    conn = engine.connect(":memory:")
    engine.ingest_traces(conn, [ds.parquet])
    engine.load_corpus(conn, ds.corpus)
    engine.build_labels(conn, ds.day, ds.day, use_corpus=True)
    original = load_sql("fct_query_metrics")
    proposed = args.proposal.read_text()
    print(
        "| parameters | rows | same rows, values within 1e-12 | original s | proposed s "
        "| speed-up |"
    )
    print("|---|---|---|---|---|---|")
    for label, names, exponential, level in PARAM_SETS:
        p = params(names, exponential, level, ds.day)
        conn.execute("create or replace temp table a as " + original, p)
        conn.execute("create or replace temp table a2 as " + original, p)
        conn.execute("create or replace temp table b as " + proposed, p)
        rows = conn.execute("select count(*) from a").fetchone()[0]
        same_keys, max_diff = compare(conn, "a", "b")
        _, noise = compare(conn, "a", "a2")
        verdict = "yes" if same_keys and max_diff <= 1e-12 else f"NO (max diff {max_diff:.1e})"
        times: dict[str, list[float]] = {"original": [], "proposed": []}
        for _ in range(args.repeat):
            for name, sql in (("original", original), ("proposed", proposed)):
                conn.execute("delete from query_metrics")
                start = time.perf_counter()
                conn.execute("insert into query_metrics by name " + sql, p)
                times[name].append(time.perf_counter() - start)
        before = statistics.median(times["original"])
        after = statistics.median(times["proposed"])
        print(
            f"| {label} | {rows:,} | {verdict}; max diff {max_diff:.1e} (original vs itself "
            f"{noise:.1e}) | {before:.3f} | {after:.3f} | {before / after:.2f}x |"
        )


if __name__ == "__main__":
    main()
