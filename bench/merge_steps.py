"""The sharded day's merge, statement by statement, against an earlier commit (issue 33 item 4):
`merge_shards` of one run's shard outputs into a new warehouse file, then its close, from this tree
and from `--before REV` (checked out into a temporary worktree), alternately for `--rounds` rounds;
each statement's seconds, the merge's (with the counts its Dagster step reports) and the
warehouse file's size.

    python bench/shards.py --sizes 1000000 --shards 2        # writes the outputs it merges
    python bench/merge_steps.py --size 1000000 --before 5babec6 --rounds 3
    python bench/merge_steps.py --outputs PATH/run=ID         # any run's outputs, this tree only

The outputs are read as they are: both trees merge the same Parquet files and manifests. A tree
older than the manifests' counts ignores the counts it does not know; outputs written before the
manifests counted annotated traces fail this tree's merge, naming the count (rerun
`bench/shards.py`). Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO
from bench.generate import DATA_ROOT

# Run in a fresh process with the tree to time first on sys.path: the merge of the outputs
# (argv[2]) into a new warehouse, each statement timed by its first words, as JSON on stdout.
WORKER = """
import json, sys, time, tempfile
from datetime import date
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from retrieval_pipeline.metrics import parse_metrics
from retrieval_pipeline.warehouse import shards
from retrieval_pipeline.warehouse.connection import connect, duckdb_config

manifests = [
    json.loads(p.read_text()) for p in sorted(Path(sys.argv[2]).glob("shard=*/manifest.json"))
]
seconds = {}

class Timed:
    def __init__(self, conn):
        self._conn = conn
    def __getattr__(self, name):
        return getattr(self._conn, name)
    def execute(self, statement, *args, **kwargs):
        words = " ".join(line.split("--")[0] for line in statement.splitlines())
        key = " ".join(words.split())[:60]
        start = time.perf_counter()
        try:
            return self._conn.execute(statement, *args, **kwargs)
        finally:
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - start

with tempfile.TemporaryDirectory(prefix="merge-steps-") as folder:
    database = Path(folder) / "warehouse.duckdb"
    conn = connect(database, duckdb_config())
    day = date.fromisoformat(manifests[0]["day"])
    start = time.perf_counter()
    merged = shards.merge_shards(Timed(conn), day, manifests)
    if hasattr(shards, "merged_counts"):  # a tree whose merge step counted the rows again
        shards.merged_counts(Timed(conn), day, parse_metrics("ndcg@10")[0])
    merge_s = time.perf_counter() - start
    conn.close()
    step_s = time.perf_counter() - start
    print(json.dumps({
        "merge_s": merge_s, "step_s": step_s, "file_mb": database.stat().st_size / 1e6,
        "seconds": seconds, "valid": merged.valid,
    }))
"""


def merge_once(tree: Path, outputs: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(tree), str(outputs)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the merge failed: {done.stderr.strip()[-600:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def default_outputs(size: int, data_root: Path = DATA_ROOT) -> Path:
    """The 2-shard run's outputs that `bench/shards.py --sizes SIZE --shards 2` leaves."""
    root = data_root / f"n{size}_s7" / "shards_runs" / "shards2" / "shards"
    found = sorted(root.glob("date=*/run=*"))
    if not found:
        raise SystemExit(f"no shard outputs under {root}: run bench/shards.py --sizes {size}")
    return found[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="the day bench/shards.py ran")
    parser.add_argument("--outputs", type=Path, help="a run's folder of shard=i-of-N folders")
    parser.add_argument("--before", help="the commit to compare with (none: this tree only)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    outputs = args.outputs or default_outputs(args.size)
    with tempfile.TemporaryDirectory(prefix="merge-steps-") as scratch:
        trees = {"now": REPO}
        if args.before:
            before = Path(scratch) / "before"
            git = ["git", "-C", str(REPO), "worktree"]
            subprocess.run([*git, "add", "--detach", str(before), args.before], check=True)
            trees = {"before": before, "now": REPO}
        try:
            runs: dict[str, list[dict[str, object]]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    runs[name].append(merge_once(tree, outputs))
        finally:
            if args.before:
                subprocess.run([*git, "remove", "--force", str(before)], check=False)
    print(f"merge of {outputs} into a new warehouse, {args.rounds} alternating round(s)")
    for name, results in runs.items():
        merges = [float(str(r["merge_s"])) for r in results]
        steps = [float(str(r["step_s"])) for r in results]
        print(
            f"{name:>6}: merge_shards best {min(merges):.2f} s, median "
            f"{statistics.median(merges):.2f} s; with the close {min(steps):.2f} s best; "
            f"file {float(str(results[-1]['file_mb'])):,.0f} MB"
        )
        seconds = results[-1]["seconds"]
        assert isinstance(seconds, dict)
        for statement, spent in sorted(seconds.items(), key=lambda item: -item[1])[:8]:
            print(f"        {spent:6.2f} s  {statement}")


if __name__ == "__main__":
    main()
