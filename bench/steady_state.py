"""(c'') One nightly partition on a warehouse that already holds the days before it: the A/B
comparison's look-back window full, as on every night after the first week.

    python bench/steady_state.py --sizes 100000 [--days-before 7]

(c) runs a partition on a new warehouse, where the comparison's 7-day window holds that day
only. Here the store holds `--days-before` days and then the measured day, each the same
generated day (hard links, as in `backfill.py`); the days before are backfilled in one untimed
`dagster asset materialize --partition-range` run, then the last day runs alone through every
asset and check with `dg.materialize` in a fresh process, timed and reported as (c) is.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backfill import backfill_store
from bench.common import Row, emit, oracle_means, parse_args
from bench.generate import dataset
from bench.nightly import dagster_materialize, materialized, prepare


def measure(sizes: list[int], days_before: int, seed: int = 7) -> list[Row]:
    rows: list[Row] = []
    for size in sizes:
        ds = dataset(size, seed)
        oracle = oracle_means(ds)
        store, names = backfill_store(ds, days_before + 1)
        _, env = prepare(ds, f"steady_state_{days_before}")
        env["RETRIEVAL_PIPELINE_STORE"] = str(store)
        proc = dagster_materialize(env, "--partition-range", f"{names[0]}...{names[-2]}")
        engine = f"dg.materialize after {days_before} days backfilled (untimed), JSONL.gz"
        row = materialized(
            "(c'') nightly partition, window full", engine, size, names[-1], env, oracle
        )
        row.note = f"the days before backfilled in {proc.wall_s:.0f} s, not in wall; " + row.note
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    days = {"type": int, "default": 7, "help": "days already in the warehouse"}
    args = parse_args(__doc__.splitlines()[0], argv, {"--days-before": days})
    emit(measure(args.sizes, args.days_before, args.seed), args.json)


if __name__ == "__main__":
    main()
