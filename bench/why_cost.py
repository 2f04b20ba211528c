"""(g) What the regression report's attribution (docs/why.md) adds to a nightly partition.

    python bench/why_cost.py --sizes 100000,1000000 [--days-before 7] [--repeat 3]

As steady_state.py (c''): the store holds `--days-before` days and the measured day, each the
same generated day (hard links); the days before are backfilled in one untimed run, then the
last day runs alone through every asset and check, timed. Its days being copies, that day has
no miss, so the attribution (`warehouse.attribution.explain_findings`) is then timed on the same
warehouse for a report with many findings: every segment and variant and each variant's overall
row on ndcg@10 (12 findings), and for one finding (multi_hop / candidate), each the median of
`--repeat` runs. Written: a table, and `results/why_cost_n<N>.md` with `--record`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backfill import backfill_store
from bench.common import oracle_means, write_report
from bench.generate import SEGMENTS, VARIANTS, dataset
from bench.nightly import dagster_materialize, materialized, prepare
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse import attribution, connection

METRIC = "ndcg@10"


def timed(database: str, day: date, findings: list[attribution.Finding], repeat: int) -> float:
    """The median wall of `explain_findings` for `findings` of `day` (linear gain, as the
    nightly run's configuration)."""
    config = PipelineConfig(gain="linear")
    walls = []
    conn = connection.connect(database)
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            attribution.explain_findings(conn, config, day, findings)
            walls.append(time.perf_counter() - start)
    finally:
        conn.close()
    return statistics.median(walls)


def measure(size: int, days_before: int, repeat: int, seed: int = 7) -> list[str]:
    ds = dataset(size, seed)
    store, names = backfill_store(ds, days_before + 1)
    _, env = prepare(ds, f"why_cost_{days_before}")
    env["RETRIEVAL_PIPELINE_STORE"] = str(store)
    backfill = dagster_materialize(env, "--partition-range", f"{names[0]}...{names[-2]}")
    engine = f"dg.materialize after {days_before} days backfilled (untimed), JSONL.gz"
    row = materialized(
        "(c'') nightly partition, window full", engine, size, names[-1], env, oracle_means(ds)
    )
    day = date.fromisoformat(names[-1])
    every = [
        (segment, variant, METRIC, "watch")
        for segment in (*SEGMENTS, OVERALL_SEGMENT)
        for variant in VARIANTS
    ]
    many = timed(env["RETRIEVAL_PIPELINE_DB"], day, every, repeat)
    one = timed(env["RETRIEVAL_PIPELINE_DB"], day, every[3:4], repeat)
    return [
        f"| {size:,} | {row.wall_s:.1f} | {len(every)} | {many:.2f} | {many / row.wall_s:.1%} "
        f"| {one:.2f} | {one / row.wall_s:.1%} | backfill {backfill.wall_s:.0f} s untimed; "
        f"{row.note} |"
    ]


HEADER = [
    "| traces per day | nightly partition, s | findings | attribution, s | of the nightly "
    "| one finding, s | of the nightly | note |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--days-before", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write results/why_cost_n<N>.md")
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.sizes.split(",")):
        lines = [*HEADER, *measure(size, args.days_before, args.repeat)]
        print("\n".join(lines))
        if args.record:
            write_report(f"why_cost_n{size}.md", [__doc__.splitlines()[0], "", *lines])


if __name__ == "__main__":
    main()
