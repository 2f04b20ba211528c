"""What the bounded interval costs in the nightly path: `sql/agg_segment_metrics.sql` with its
interval as the normal approximation and as the bounded (Wilson, effective n) one, and, for
comparison, a percentile bootstrap of the same means in Python after the aggregate.

    python bench/interval_cost.py --sizes 100000,1000000 [--repeat 5] [--json PATH]

Per size, in a fresh process each: the generator's workload (`bench/generate.py`) is ingested
into a scratch database file, labelled and scored on five metrics (untimed, as in
`bench/metric_step.py`); then the segment-metric statement is timed `--repeat` times with each
interval (median), both reading the same `query_metrics`, and the bootstrap (1,000 resamples
per segment, variant and metric, seeded) once, values fetched included. The two SQL variants
must return the same means; the bounded bounds must lie in [0, 1].
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METRICS = ("ndcg@10", "precision@5", "recall@20", "mrr", "map")
NORMAL = {
    "ci_low": "if(n >= 2, mean - 1.96 * sd / sqrt(n), null)",
    "ci_high": "if(n >= 2, mean + 1.96 * sd / sqrt(n), null)",
}
VALUES_SQL = """
select segment, variant, metric, list(value) as values
from query_metrics
where is_annotated and value is not null
group by all
"""


def with_interval(statement: str, expressions: dict[str, str]) -> str:
    """The statement with the lines that compute ci_low and ci_high replaced by `expressions`
    (the shipped statement computes the bounded interval; this gives the normal one)."""
    for column, expression in expressions.items():
        replacement = f"\\g<1>{expression} as {column},"
        statement, count = re.subn(
            rf"^(\s*).*\bas {column},$", replacement, statement, flags=re.MULTILINE
        )
        assert count == 1, f"no single `as {column},` line in the statement"
    return statement


def worker(size: int, repeat: int) -> dict[str, object]:
    import numpy as np

    from bench.generate import dataset
    from retrieval_pipeline.config import PipelineConfig, thresholds_frame
    from retrieval_pipeline.intervals import Z_95
    from retrieval_pipeline.metrics import parse_metrics
    from retrieval_pipeline.warehouse.connection import close_scratch, connect, memory_limit
    from retrieval_pipeline.warehouse.corpus import load_corpus
    from retrieval_pipeline.warehouse.ingestion import ingest_traces
    from retrieval_pipeline.warehouse.session import registered
    from retrieval_pipeline.warehouse.sql import load_sql
    from retrieval_pipeline.warehouse.steps import (
        build_labels,
        build_segment_statistics,
        compute_query_metrics,
    )

    ds = dataset(size, 7, None)
    day: date = ds.day
    folder = tempfile.TemporaryDirectory(prefix="bench-interval-cost-")
    conn = connect(
        Path(folder.name) / "bench.duckdb", {"memory_limit": memory_limit()}, scratch=True
    )
    ingest_traces(conn, [ds.parquet])
    load_corpus(conn, ds.corpus)
    build_labels(conn, day, day, use_corpus=True)
    compute_query_metrics(conn, parse_metrics(list(METRICS)), day, day, "linear", 1.0)
    build_segment_statistics(conn, day, day)  # what agg_segment_metrics reads (as the nightly)
    scored = conn.execute("select count(*) from query_metrics where value is not null").fetchone()
    statement = load_sql("agg_segment_metrics")
    params = {"start_date": day, "end_date": day}
    result: dict[str, object] = {"traces": size, "scored_values": scored[0] if scored else None}
    config = PipelineConfig(metrics=METRICS)
    frames = {}
    variants = {
        "normal": (with_interval(statement, NORMAL), params),
        "bounded": (statement, params | {"z": Z_95}),  # as shipped
    }
    walls: dict[str, list[float]] = {name: [] for name in variants}
    with registered(conn, "metric_thresholds", thresholds_frame(config)):
        for index in range(repeat):
            # alternate which runs first, so that a busy machine's drift favours neither
            order = list(variants) if index % 2 == 0 else list(reversed(variants))
            for name in order:
                text, bound = variants[name]
                t0 = time.perf_counter()
                frame = conn.execute(text, bound).df()
                walls[name].append(time.perf_counter() - t0)
                frames[name] = frame.sort_values(["segment", "variant", "metric"]).reset_index()
    for name, times in walls.items():
        result[f"{name}_s"] = statistics.median(times)
        result[f"{name}_walls"] = times
    # parallel sums may differ in their last bits from one run to the next
    means = frames["normal"]["mean"].fillna(-1) - frames["bounded"]["mean"].fillna(-1)
    assert float(means.abs().max()) < 1e-9
    low, high = frames["bounded"]["ci_low"].dropna(), frames["bounded"]["ci_high"].dropna()
    assert ((low >= 0) & (high <= 1)).all()
    result["rows"] = len(frames["bounded"])
    result["normal_rows_outside"] = int(
        ((frames["normal"]["ci_low"] < 0) | (frames["normal"]["ci_high"] > 1)).sum()
    )
    t0 = time.perf_counter()
    rng = np.random.default_rng(7)
    groups = conn.execute(VALUES_SQL).fetchall()
    for _, _, _, values in groups:
        x = np.asarray(values)
        means = np.empty(1000)
        for i in range(1000):  # one resample at a time: memory stays at one sample's size
            means[i] = x[rng.integers(0, len(x), len(x))].mean()
        np.quantile(means, [0.025, 0.975])
    result["bootstrap_s"] = time.perf_counter() - t0
    result["bootstrap_groups"] = len(groups)
    close_scratch(conn)
    folder.cleanup()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat)))
        return
    rows = []
    for size in (int(text) for text in args.sizes.split(",")):
        done = subprocess.run(
            [sys.executable, __file__, "--worker", str(size), "--repeat", str(args.repeat)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"the worker for {size} traces failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| traces | rows | normal interval, s | bounded interval, s | bootstrap in Python, s |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['traces']:,} | {row['rows']} | {row['normal_s']:.3f} | "
            f"{row['bounded_s']:.3f} | {row['bootstrap_s']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
