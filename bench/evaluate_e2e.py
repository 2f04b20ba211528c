"""(b) `evaluate` end to end: the Python API in process and the `retrieval-pipeline evaluate`
command as a whole process.

    python bench/evaluate_e2e.py --sizes 10000,100000 [--repeat 3]

Rows: `run_evaluation` on JSONL.gz in a fresh interpreter (the call timed, imports apart); the
command on JSONL.gz and on plain JSONL (start-up, imports and all), with the corpus, linear gain
and the five metrics; its `--format json` means are compared with pytrec_eval's.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    METRICS,
    Row,
    emit,
    max_abs_diff,
    median,
    oracle_means,
    parse_args,
    run_process,
    run_worker,
    waits,
)
from bench.generate import dataset


def command() -> str:
    beside = Path(sys.executable).parent / "retrieval-pipeline"
    found = str(beside) if beside.exists() else shutil.which("retrieval-pipeline")
    if not found:
        raise RuntimeError("retrieval-pipeline is not installed in this environment")
    return found


def measure(sizes: list[int], seed: int = 7, repeat: int = 1, data_root: Path | None = None):
    rows: list[Row] = []
    for size in sizes:
        ds = dataset(size, seed, data_root)
        oracle = oracle_means(ds)
        runs = [
            run_worker("evaluate", "--input", str(ds.jsonl_gz), "--corpus", str(ds.corpus))
            for _ in range(repeat)
        ]
        result = runs[0][0]
        rows.append(
            Row(
                "(b) evaluate",
                "run_evaluation in process, JSONL.gz",
                size,
                median([r["wall_s"] for r, _ in runs]),
                median([p.wall_s for _, p in runs]),
                max(p.peak_rss_mib for _, p in runs),
                max_abs_diff(result["means"], oracle, f"run_evaluation at {size}"),
                result["means"],
                note=f"imports {result['import_s']:.2f} s not in wall",
                walls=[r["wall_s"] for r, _ in runs],
                **waits(*(p for _, p in runs)),
            )
        )
        for path, label in ((ds.jsonl_gz, "JSONL.gz"), (ds.jsonl, "JSONL")):
            cmd = [
                command(), "evaluate", str(path), "--corpus", str(ds.corpus),
                "--metrics", ",".join(METRICS), "--gain", "linear", "--format", "json",
            ]  # fmt: skip
            procs = [run_process(cmd) for _ in range(repeat)]
            for proc in procs:
                if proc.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
            means = json.loads(procs[0].stdout)["means"]
            wall = median([p.wall_s for p in procs])
            rows.append(
                Row(
                    "(b) evaluate",
                    f"retrieval-pipeline evaluate, {label}",
                    size,
                    wall,
                    wall,
                    max(p.peak_rss_mib for p in procs),
                    max_abs_diff(means, oracle, f"CLI on {label} at {size}"),
                    means,
                    note="whole process",
                    walls=[p.wall_s for p in procs],
                    **waits(*procs),
                )
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    emit(measure(args.sizes, args.seed, args.repeat), args.json)


if __name__ == "__main__":
    main()
