"""Start-up against an earlier commit, side by side (issue 33 item 1): `evaluate` of 100 traces (or
`--size` traces, the throughput row of the speed guard at 100000) as a whole process, from this
tree and from `--before REV` (checked out into a temporary worktree), and the bare `python -c
"import duckdb, pyarrow, pandas"`, alternated for `--rounds` rounds; the best and the median of
each, and each best over the bare imports' best.

Each tree runs as it stands: where PYTHONDONTWRITEBYTECODE is set and the tree was never compiled,
every run compiles the package again, as an editable install without `compileall` would (the
setup scripts compile it). `--compile` compiles both trees first, to tell that apart from what a
change to the imports does.

    python bench/startup.py --before 67bac61 --rounds 7
    python bench/startup.py --before 67bac61 --rounds 7 --compile
    python bench/startup.py --before 50aaf41 --rounds 5 --size 100000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, run_process
from bench.generate import dataset

BARE = "import duckdb, pyarrow, pandas"
EVALUATE = "import sys; from retrieval_pipeline.cli import main; sys.exit(main())"
METRICS = "ndcg@10,precision@5,recall@20,mrr,map"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--compile", action="store_true", help="compile both trees first")
    parser.add_argument("--size", type=int, default=100, help="traces evaluated")
    args = parser.parse_args()
    traces = dataset(args.size).jsonl
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        before = Path(scratch) / "before"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(before), args.before],
            check=True,
            capture_output=True,
        )
        try:
            trees = {"before": before, "now": REPO}
            if args.compile:
                for tree in trees.values():
                    compile_all = [sys.executable, "-m", "compileall", "-q", "retrieval_pipeline"]
                    subprocess.run(compile_all, cwd=tree, check=True)
            out = Path(scratch) / "per_query.parquet"
            evaluate = [EVALUATE, "evaluate", str(traces), "--metrics", METRICS, "--output"]
            commands = {"bare imports": ([sys.executable, "-c", BARE], Path(scratch))} | {
                name: ([sys.executable, "-c", *evaluate, str(out)], tree)
                for name, tree in trees.items()
            }
            walls: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(args.rounds):
                for name, (command, cwd) in commands.items():
                    proc = run_process(command, cwd=cwd)
                    if proc.returncode != 0:
                        raise SystemExit(f"{name}: {proc.stderr.strip()[-400:]}")
                    walls[name].append(proc.wall_s)
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)],
                check=False,
                capture_output=True,
            )
    floor = min(walls["bare imports"])
    rounds = f"{args.rounds} alternating rounds"
    print(f"evaluate of {args.size:,} traces, {rounds}; before = {args.before}")
    for name, values in walls.items():
        best, median = min(values), statistics.median(values)
        print(f"{name:>13}: best {best:.3f} s, median {median:.3f} s, {best / floor:.2f}x")


if __name__ == "__main__":
    main()
