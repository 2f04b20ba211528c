"""Does ingestion use the cores it has? `evaluate` of JSONL traces against DuckDB reading the same
file, on all cores and on 1, 2, 4, 8 and 16 of them (issue 24).

    python bench/threads.py --sizes 100000 --sweep-size 1000000 --threads 1,2,4,8,16 --repeat 3

The floor is DuckDB's `select count(*), sum(len(retrieved_ids)) from read_json(FILE)`: it parses
every record and touches every list, and nothing reads JSON lines faster here. Each run is a fresh
process, timed whole (start-up and imports included: what a user waits for), and its peak RSS
comes from wait4 (common.run_process). `evaluate` runs as `bench/evaluate_e2e.py` runs it (the
corpus, linear gain, the five metrics, `--format json`) and its means are checked against
pytrec_eval's to 1e-9.

Two tables:
- the ratio at `--sizes` on every core of this machine (target: 100k on 2 cores <= 1.5x);
- the sweep at `--sweep-size` on N cores for each N of `--threads`: the process is pinned to cores
  0..N-1 with `taskset`, DuckDB's floor runs `set threads = N`, and `evaluate` gets
  RETRIEVAL_PIPELINE_DUCKDB_THREADS=N (target: 16 cores <= 3x). A count above this machine's cores
  is reported as not shown, with the command that shows it on a machine that has them.

The median of `--repeat` runs is reported, runs alternating between the two commands, with the
fastest beside it: on a shared machine the fastest run is the least disturbed one. Writes
`bench/results/threads_n<size>.md` (and `threads_sweep_n<sweep size>.md`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    METRICS,
    Process,
    machine_note,
    max_abs_diff,
    median,
    oracle_means,
    parse_args,
    run_process,
    waits,
    write_report,
)
from bench.evaluate_e2e import command
from bench.generate import dataset

THREADS_ENV = "RETRIEVAL_PIPELINE_DUCKDB_THREADS"

# The floor, in a fresh interpreter: argv = file, threads (0: DuckDB's default); prints seconds.
FLOOR_SCRIPT = """
import json, sys, time
import duckdb
conn = duckdb.connect()
conn.execute("set enable_progress_bar = false")  # it would print on stdout
if int(sys.argv[2]):
    conn.execute(f"set threads = {int(sys.argv[2])}")
start = time.perf_counter()
count, ids = conn.execute(
    "select count(*), sum(len(retrieved_ids)) from read_json($path)", {"path": sys.argv[1]}
).fetchone()
print(json.dumps({"seconds": time.perf_counter() - start, "count": count, "ids": ids}))
"""


@dataclass
class Pair:
    """The floor and `evaluate` on one input and one number of cores."""

    traces: int
    cores: int | None  # None: every core, no pinning
    floor: list[Process]
    evaluate: list[Process]
    max_abs_diff: float

    def wall(self, procs: list[Process]) -> tuple[float, float]:
        walls = [p.wall_s for p in procs]
        return median(walls), min(walls)

    @property
    def ratio(self) -> float:
        return self.wall(self.evaluate)[0] / self.wall(self.floor)[0]

    @property
    def best_ratio(self) -> float:
        return self.wall(self.evaluate)[1] / self.wall(self.floor)[1]


def _pinned(cmd: list[str], cores: int | None) -> list[str]:
    return cmd if cores is None else ["taskset", "-c", f"0-{cores - 1}", *cmd]


def _checked(proc: Process, what: str) -> Process:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def measure_pair(size: int, seed: int, repeat: int, cores: int | None) -> Pair:
    ds = dataset(size, seed)
    oracle = oracle_means(ds)
    floor_cmd = [sys.executable, "-c", FLOOR_SCRIPT, str(ds.jsonl), str(cores or 0)]
    evaluate_cmd = [
        command(), "evaluate", str(ds.jsonl), "--corpus", str(ds.corpus),
        "--metrics", ",".join(METRICS), "--gain", "linear", "--format", "json",
    ]  # fmt: skip
    env = {THREADS_ENV: str(cores)} if cores is not None else {}
    floors: list[Process] = []
    evaluates: list[Process] = []
    worst = 0.0
    for _ in range(repeat):
        floor = _checked(run_process(_pinned(floor_cmd, cores)), "DuckDB read_json")
        counted = json.loads(floor.stdout.strip().splitlines()[-1])
        if counted["count"] != size:
            raise RuntimeError(f"DuckDB counted {counted['count']} records, not {size}")
        floors.append(floor)
        proc = _checked(run_process(_pinned(evaluate_cmd, cores), env=env), "evaluate")
        means = json.loads(proc.stdout)["means"]
        worst = max(worst, max_abs_diff(means, oracle, f"evaluate at {size} on {cores} cores"))
        evaluates.append(proc)
    return Pair(size, cores, floors, evaluates, worst)


def _row(pair: Pair, target: str) -> str:
    floor, floor_best = pair.wall(pair.floor)
    evaluate, evaluate_best = pair.wall(pair.evaluate)
    note = machine_note(**_waits(pair))
    cores = "all" if pair.cores is None else str(pair.cores)
    return (
        f"| {pair.traces:,} | {cores} | {floor:.2f} ({floor_best:.2f}) "
        f"| {evaluate:.2f} ({evaluate_best:.2f}) | {pair.ratio:.2f}x ({pair.best_ratio:.2f}x) "
        f"| {target} | {max(p.peak_rss_mib for p in pair.evaluate):,.0f} "
        f"| {pair.max_abs_diff:.1e} | {note} |"
    )


def _waits(pair: Pair) -> dict[str, float | None]:
    found = waits(*pair.floor, *pair.evaluate)
    return {"io_stall_s": found["io_stall_s"], "steal_s": found["steal_s"]}


HEADER = [
    "| traces | cores | DuckDB read_json s, median (fastest) | evaluate s, median (fastest) "
    "| ratio, median (fastest) | target | evaluate peak RSS MiB | max abs diff of means "
    "| machine |",
    "|---|---|---|---|---|---|---|---|---|",
]


def cores_here() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        argv,
        {
            "--sweep-size": {"type": int, "default": 0, "help": "traces of the sweep (0: none)"},
            "--threads": {"default": "1,2,4,8,16", "help": "core counts of the sweep"},
        },
    )
    here = cores_here()
    lines = [
        f"# `evaluate` against DuckDB's read_json of the same JSONL, on {here} core(s)",
        "",
        f"`python bench/threads.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
        "whole processes, the median of the runs with the fastest in brackets.",
        "",
        *HEADER,
    ]
    for size in args.sizes:
        target = "<= 1.5x (2 cores)" if here == 2 else "-"
        lines.append(_row(measure_pair(size, args.seed, args.repeat, None), target))
    if args.sweep_size:
        lines += ["", f"Sweep at {args.sweep_size:,} traces, pinned to N cores:", "", *HEADER]
        missing = []
        for cores in [int(n) for n in str(args.threads).split(",") if n]:
            if cores > here:
                missing.append(cores)
                lines.append(
                    f"| {args.sweep_size:,} | {cores} | not shown: this machine has {here} "
                    "| | | " + ("<= 3x" if cores == 16 else "-") + " | | | |"
                )
                continue
            pair = measure_pair(args.sweep_size, args.seed, args.repeat, cores)
            lines.append(_row(pair, "<= 3x" if cores == 16 else "-"))
        if missing:
            lines += [
                "",
                f"Rows for {', '.join(map(str, missing))} cores need a machine with that many:"
                f" `python bench/threads.py --sizes 100000 --sweep-size {args.sweep_size}"
                f" --threads 1,2,4,8,16 --repeat {args.repeat}` there.",
            ]
    name = f"threads_n{'_'.join(map(str, args.sizes))}"
    if args.sweep_size:
        name += f"_sweep{args.sweep_size}"
    write_report(f"{name}.md", lines)


if __name__ == "__main__":
    main()
