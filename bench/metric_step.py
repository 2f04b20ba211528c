"""(a) The metric step alone: `compute_query_metrics` on traces ingested from Parquet.

    python bench/metric_step.py --sizes 10000,100000 [--repeat 3]

Each size runs in a fresh process: ingest the Parquet file into a scratch database file (as
`evaluate` does), load the corpus and build the labels (untimed), then time only the metric step
(`sql/fct_query_metrics.sql`, linear gain, and the insert of its rows). The same
process also times the floor query over the engine's own `traces` table (row (d')), so the
metric step can be compared with a scan of the very storage it reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, emit, max_abs_diff, oracle_means, parse_args, run_worker, waits
from bench.generate import dataset


def measure(sizes: list[int], seed: int = 7, repeat: int = 1, data_root: Path | None = None):
    rows: list[Row] = []
    for size in sizes:
        ds = dataset(size, seed, data_root)
        oracle = oracle_means(ds)
        result, proc = run_worker(
            "metric_step", "--input", str(ds.parquet), "--corpus", str(ds.corpus),
            "--day", ds.day.isoformat(), "--repeat", str(repeat),
        )  # fmt: skip
        diff = max_abs_diff(result["means"], oracle, f"metric step at {size}")
        rows.append(
            Row(
                "(a) metric step",
                "engine.compute_query_metrics",
                size,
                result["wall_s"],
                proc.wall_s,
                proc.peak_rss_mib,
                diff,
                result["means"],
                note=f"after an untimed ingest of {result['setup_s']:.1f} s into a scratch "
                f"database file; {result['threads']} DuckDB threads",
                walls=result["walls"],
                **waits(proc),
            )
        )
        rows.append(
            Row(
                "(d') floor, engine table",
                "DuckDB list_position per label over `traces`",
                size,
                result["table_floor_s"],
                proc.wall_s,
                proc.peak_rss_mib,
                note="same process as (a)",
                walls=result["table_floor_walls"],
                **waits(proc),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    emit(measure(args.sizes, args.seed, args.repeat), args.json)


if __name__ == "__main__":
    main()
