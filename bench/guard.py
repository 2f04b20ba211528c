"""The speed guard: `evaluate`'s ratios to its floors, against their targets and the figures last
committed (issue 33), so a regression is seen the day it lands.

Two ratios, each the best of `--rounds` alternating rounds, measured side by side in one run (this
machine is shared and noisy; only ratios within one run mean anything):

- throughput at N: `retrieval-pipeline evaluate` of the N-trace JSONL file as a whole process,
  over DuckDB's `read_json` of the same file (parse every record once, nothing else); target
  <= 1.5x up to 100k traces, <= 3x beyond;
- start-up: `evaluate` of 100 traces, over a bare `python -c "import duckdb, pyarrow, pandas"`;
  target <= 1.5x.

The timed runs are `evaluate` as speed_guard.py runs it (no corpus); one more, untimed, with the
dataset's corpus and pytrec_eval's linear gain, checks the means against pytrec_eval's
(bench.common.oracle_means) to 1e-9. The figures last committed are in bench/results/guard.json
(written by `--record`, with the commit measured); the guard prints each ratio beside them. It
is a reading, not a test: it exits 0 whatever the ratios, and 1 only when a measurement fails or
the means disagree.

    python bench/guard.py                  # 100k and start-up, 3 rounds
    python bench/guard.py --sizes 1000000 --rounds 1
    python bench/guard.py --record         # write bench/results/guard.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench.common import REPO, RESULTS, max_abs_diff, oracle_means, run_process
from bench.generate import dataset

RECORD = RESULTS / "guard.json"
STARTUP_TRACES = 100
BARE_IMPORTS = "import duckdb, pyarrow, pandas"
METRICS = "ndcg@10,precision@5,recall@20,mrr,map"
FLOOR = (
    'import duckdb, sys; duckdb.sql("select count(*), sum(len(retrieved_ids)) from '
    "read_json(?, format='newline_delimited')\", params=[sys.argv[1]]).fetchall()"
)


def target(name: str) -> float:
    if name == "start-up":
        return 1.5
    return 1.5 if int(name.removeprefix("throughput@")) <= 100_000 else 3.0


def _cli() -> str:
    return str(Path(sys.executable).parent / "retrieval-pipeline")


def _seconds(cmd: list[str]) -> tuple[float, str]:
    proc = run_process(cmd)
    if proc.returncode != 0:
        raise SystemExit(f"guard: {' '.join(cmd[:4])} ... failed: {proc.stderr.strip()[-400:]}")
    return proc.wall_s, proc.stdout


def _checked_means(stdout: str, size: int, ds_means: dict[str, float]) -> None:
    means = json.loads(stdout)["means"]
    max_abs_diff(means, ds_means, f"evaluate of {size} traces")


def _first_lines(source: Path, n: int, out: Path) -> Path:
    if not out.is_file():
        with source.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
            for _, line in zip(range(n), src, strict=False):
                dst.write(line)
    return out


def measure(size: int, rounds: int, data_root: Path | None = None) -> dict[str, dict[str, float]]:
    """{ratio name: {"s": evaluate's seconds, "floor_s": the floor's, "ratio": ...}}."""
    ds = dataset(size, data_root=data_root)
    small = _first_lines(ds.jsonl, STARTUP_TRACES, ds.cache(f"first{STARTUP_TRACES}.jsonl"))
    oracle = oracle_means(ds)
    evaluate = [_cli(), "evaluate", "--metrics", METRICS, "--output-format", "json"]
    runs = {
        "floor": [sys.executable, "-c", FLOOR, str(ds.jsonl)],
        "evaluate": [*evaluate, str(ds.jsonl)],
        "bare": [sys.executable, "-c", BARE_IMPORTS],
        "small": [*evaluate, str(small)],
    }
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for key, cmd in runs.items():
            best[key] = min(best[key], _seconds(cmd)[0])
    # the means, once, untimed: pytrec_eval's drop the labels of documents gone from the corpus
    check = [*runs["evaluate"], "--corpus", str(ds.corpus), "--gain", "linear"]
    _checked_means(_seconds(check)[1], size, oracle)
    return {
        f"throughput@{size}": {
            "s": best["evaluate"],
            "floor_s": best["floor"],
            "ratio": best["evaluate"] / best["floor"],
        },
        "start-up": {
            "s": best["small"],
            "floor_s": best["bare"],
            "ratio": best["small"] / best["bare"],
        },
    }


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def line(name: str, row: dict[str, float], last: dict[str, object] | None) -> str:
    goal = target(name)
    verdict = "within" if row["ratio"] <= goal else "OVER"
    text = (
        f"{name}: evaluate {row['s']:.2f} s, floor {row['floor_s']:.2f} s: {row['ratio']:.2f}x "
        f"({verdict} the target of {goal:g}x)"
    )
    if last is None:
        return text + "; nothing committed yet"
    before = float(last["ratio"])  # type: ignore[arg-type]
    change = row["ratio"] - before
    return text + f"; last committed {before:.2f}x at {last['commit']} ({change:+.2f}x)"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000", help="comma-separated trace counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--record", action="store_true", help=f"write the figures to {RECORD}")
    a = ap.parse_args(argv)
    committed = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    figures: dict[str, dict[str, float]] = {}
    for size in (int(s) for s in a.sizes.split(",")):
        figures |= measure(size, a.rounds)
    for name, row in figures.items():
        print(line(name, row, committed.get(name)))
    if a.record:
        commit = _commit()
        committed |= {name: {**row, "commit": commit} for name, row in figures.items()}
        RECORD.write_text(json.dumps(committed, indent=2, sort_keys=True) + "\n")
        print(f"recorded in {RECORD.relative_to(REPO)} (commit {commit})")


if __name__ == "__main__":
    main()
