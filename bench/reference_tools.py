"""(e) The reference tools on the same traces: a plain pytrec_eval script, and ranx.

    python bench/reference_tools.py --sizes 10000,100000

pytrec_eval (trec_eval in C): json.loads per line, a qrels and a run dict per trace (score =
-rank, first occurrence of a repeated id kept, stale labels dropped against the corpus), evaluate;
from 1M traces on it is fed slices of 100k (unsliced it does not fit in memory). Its means are
the oracle every other measurement is held to (1e-9), cached beside the data.
ranx (Numba) through its dict API, at most 100k traces (it does not fit at 1M); a first run on a
small file fills Numba's on-disk cache, so compilation is not timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Row,
    emit,
    max_abs_diff,
    parse_args,
    pytrec_slice,
    run_worker,
    save_oracle,
    waits,
)
from bench.generate import dataset

RANX_MAX = 100_000


def measure(
    sizes: list[int],
    seed: int = 7,
    repeat: int = 1,
    data_root: Path | None = None,
    with_ranx: bool = True,
):
    rows: list[Row] = []
    ranx_warm = False
    for size in sizes:
        ds = dataset(size, seed, data_root)
        slice_size = pytrec_slice(size)
        result, proc = run_worker(
            "pytrec", "--input", str(ds.jsonl), "--corpus", str(ds.corpus),
            "--slice", str(slice_size),
        )  # fmt: skip
        save_oracle(ds, result["means"])
        how = f"slices of {slice_size:,}" if slice_size else "unsliced"
        rows.append(
            Row(
                "(e) reference",
                "pytrec_eval plain script, JSONL",
                size,
                result["wall_s"],
                proc.wall_s,
                proc.peak_rss_mib,
                0.0,
                result["means"],
                note=f"the oracle; {how}; of which evaluate {result['evaluate_s']:.2f} s, "
                f"corpus {result['corpus_s']:.2f} s",
                scoring_s=result["evaluate_s"],
                **waits(proc),
            )
        )
        if not with_ranx or size > RANX_MAX:
            continue
        if not ranx_warm:
            warm = dataset(1000, seed, data_root)
            run_worker("ranx", "--input", str(warm.jsonl), "--corpus", str(warm.corpus))
            ranx_warm = True
        result, proc = run_worker("ranx", "--input", str(ds.jsonl), "--corpus", str(ds.corpus))
        rows.append(
            Row(
                "(e) reference",
                "ranx dict API, JSONL",
                size,
                result["wall_s"],
                proc.wall_s,
                proc.peak_rss_mib,
                max_abs_diff(result["means"], ds_means(rows), f"ranx at {size}"),
                result["means"],
                note=f"Numba cache warm; of which evaluate {result['evaluate_s']:.2f} s",
                scoring_s=result["evaluate_s"],
                **waits(proc),
            )
        )
    return rows


def ds_means(rows: list[Row]) -> dict[str, float]:
    """The means of the last pytrec_eval row (the oracle for the same size)."""
    return next(r.means for r in reversed(rows) if r.engine.startswith("pytrec_eval"))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    emit(measure(args.sizes, args.seed, args.repeat), args.json)


if __name__ == "__main__":
    main()
