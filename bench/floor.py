"""(d) The floor: a plain DuckDB scan of the same Parquet that touches every list element.

    python bench/floor.py --sizes 10000,100000 [--repeat 3]

Two queries, each in a fresh process per size: the sum of list lengths (reads every list), and a
`list_position` of every label in its trace's `retrieved_ids` (the lookups any metric needs).
The second is the floor the metric step is held to (at most 1.5x).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, emit, parse_args, run_worker, waits
from bench.generate import dataset


def measure(sizes: list[int], seed: int = 7, repeat: int = 1, data_root: Path | None = None):
    rows: list[Row] = []
    for size in sizes:
        ds = dataset(size, seed, data_root)
        result, proc = run_worker("floor", "--input", str(ds.parquet), "--repeat", str(repeat))
        rows.append(
            Row(
                "(d) floor, Parquet",
                "DuckDB sum of list lengths",
                size,
                result["lengths_s"],
                proc.wall_s,
                proc.peak_rss_mib,
                walls=result["lengths_walls"],
                **waits(proc),
            )
        )
        rows.append(
            Row(
                "(d) floor, Parquet",
                "DuckDB list_position per label",
                size,
                result["wall_s"],
                proc.wall_s,
                proc.peak_rss_mib,
                note="the floor of the 1.5x target",
                walls=result["walls"],
                **waits(proc),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    emit(measure(args.sizes, args.seed, args.repeat), args.json)


if __name__ == "__main__":
    main()
