"""A backfill of N days in one run, through every asset and check: does memory grow with N?

    python bench/backfill.py --sizes 100000 --days 2,8 [--memory-limit 1GB]

Each day of the store holds the same generated day of `--sizes` traces (a hard link to the
nightly store's file), so every day scores the same means as the oracle's single day. The whole
range runs as one `dagster asset materialize --partition-range` process (every asset has a
single-run backfill policy); wall time and peak RSS are the process's own, as in (c).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, emit, oracle_means, parse_args
from bench.generate import Dataset, dataset
from bench.nightly import command_line, prepare
from retrieval_pipeline.warehouse.connection import MEMORY_LIMIT_ENV
from retrieval_pipeline.warehouse.connection import memory_limit as default_limit


def backfill_store(ds: Dataset, days: int) -> tuple[Path, list[str]]:
    """A trace store of `days` days ending at the dataset's day, each the same traces."""
    root = ds.root / f"backfill_store_{days}"
    day_file = next((ds.store / "traces" / f"date={ds.day.isoformat()}").iterdir())
    corpus = next((ds.store / "corpus").iterdir())
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    # hard links: the store refuses a symbolic link that leads out of its root
    link = root / "corpus" / corpus.name
    if not link.exists():
        link.hardlink_to(corpus)
    names = []
    for back in range(days - 1, -1, -1):
        name = (ds.day - timedelta(days=back)).isoformat()
        folder = root / "traces" / f"date={name}"
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / day_file.name).exists():
            (folder / day_file.name).hardlink_to(day_file)
        names.append(name)
    return root, names


def measure(
    sizes: list[int], day_counts: list[int], seed: int = 7, memory_limit: str | None = None
) -> list[Row]:
    rows: list[Row] = []
    for size in sizes:
        ds = dataset(size, seed)
        oracle = oracle_means(ds)
        for days in day_counts:
            store, names = backfill_store(ds, days)
            _, env = prepare(ds, f"backfill_{days}")
            env["RETRIEVAL_PIPELINE_STORE"] = str(store)
            if memory_limit:
                env[MEMORY_LIMIT_ENV] = memory_limit
            rows.append(
                command_line(
                    "(c') backfill",
                    f"dagster asset materialize, {days} days in one run, JSONL.gz",
                    size * days,
                    env,
                    oracle,
                    names[-1],
                    ["--partition-range", f"{names[0]}...{names[-1]}"],
                    note=f"{size:,} traces a day; DuckDB memory_limit"
                    f" {memory_limit or default_limit() + ' (the default)'};"
                    " whole process; means of its last day",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    options: dict[str, dict[str, Any]] = {
        "--days": {"default": "2,8", "help": "comma-separated day counts"},
        "--memory-limit": {"default": None, "help": "DuckDB memory_limit, e.g. 1GB"},
    }
    args = parse_args(__doc__.splitlines()[0], argv, options)
    days = [int(d) for d in args.days.split(",")]
    emit(measure(args.sizes, days, args.seed, args.memory_limit), args.json)


if __name__ == "__main__":
    main()
