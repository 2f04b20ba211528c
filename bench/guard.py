"""The speed guard: issue 33's speed table, each row against its target and the figure last
committed, so a regression is seen the day it lands. One command, three rows by default and two
more on demand:

- throughput at N (`--sizes`, default 100000): `retrieval-pipeline evaluate` of the N-trace JSONL
  file as a whole process, over DuckDB's `read_json` of the same file (parse every record once,
  nothing else); target <= 1.5x up to 100k traces, <= 3x beyond;
- start-up: `evaluate` of 100 traces, over a bare `python -c "import duckdb, pyarrow, pandas"`;
  target <= 1.5x;
- `--nightly`: one nightly partition of `--nightly-size` traces (default 1M) as JSONL.gz through
  every asset and check, as `bench/nightly.py` times it (`nightly.partition`: the `dg.materialize`
  call, Dagster's import apart), with the `traces` step's share of it; target <= 25 s, for 1M
  traces (at other sizes the time is printed, without a verdict); `--nightly-store parquet` (or
  `both`) reads the same day from a Parquet store instead (`nightly-parquet@N`), the fast path
  for a day of typed columns;
- `--merge`: the sharded day's merge, as `bench/shards.py` times it (`shards.checked_runs`:
  `--merge-shards` shard processes, default 2, on the day as 16 JSON-lines.gz files, then
  `merge_shards` with its counts and the warehouse's close), in seconds (and per 1M traces) at
  each of `--merge-sizes` (default 1000000); with two sizes or more, also the ratio of the
  largest size's merge seconds to the smallest's ("merge-flatness"). The target is a merge
  "independent of the trace count" (its time and memory depending on the segments, not the
  traces: flat from 1M to 10M), which the guard reads as a ratio <= 1.2x of the whole merge's
  seconds: the merge at 1M took 6.4 to 7.2 s across runs and shard counts with nothing changed
  (bench/README.md, "Shards"), 1.13x, so 1.0 cannot be asked of a shared machine. Until
  2026-12-07 the merge wrote every trace's rows, and its ratio from 1M to 10M was about 9x; it
  now links the shards' files (docs/scaling.md), and reads only the valid ids.
  `bench/merge_scale.py` measures it on one day's outputs replicated, without the shards' runs.

The ratios are each the best of `--rounds` alternating rounds, measured side by side in one run
(this machine is shared and noisy; only ratios within one run mean anything); the nightly
partition and the merge run once each (a partition at 1M takes half a minute, and a merge needs
its shards first), and what the machine did to them (disk waits, CPU steal) is printed beside
them. The timed `evaluate` runs are as speed_guard.py runs it (no corpus); one more, untimed, with
the dataset's corpus and pytrec_eval's linear gain, checks the means against pytrec_eval's
(bench.common.oracle_means) to 1e-9; the nightly partition's means are checked the same way, and
the merged day as bench/shards.py checks it (every trace read, the means pytrec_eval's).

The figures last committed are in bench/results/guard.json, one entry per row, named with its
size (`throughput@N`, `start-up`, `nightly@N`, `merge@N`, `merge-flatness@SMALLEST-LARGEST`), so
a reading is only set beside one of the same size. `--record` writes the rows measured, with the
commit measured, and keeps those not measured this time; `--record-to PATH` does the same with
PATH in place of guard.json (for tests), and `--data-root` puts the generated data elsewhere than
bench/data/. The guard prints each row beside its entry and the change. It is a reading, not a
test: it exits 0 whatever the figures, and 1 only when a measurement fails or means disagree.

    python bench/guard.py                  # 100k and start-up, 3 rounds
    python bench/guard.py --sizes 1000000 --rounds 1
    python bench/guard.py --nightly --merge --merge-sizes 1000000,10000000
    python bench/guard.py --sizes= --nightly   # the nightly row alone
    python bench/guard.py --record         # write bench/results/guard.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import nightly, shards
from bench.common import (
    REPO,
    RESULTS,
    Process,
    machine_note,
    max_abs_diff,
    oracle_means,
    run_process,
)
from bench.generate import dataset, parquet_store

RECORD = RESULTS / "guard.json"
STARTUP_TRACES = 100
BARE_IMPORTS = "import duckdb, pyarrow, pandas"
METRICS = "ndcg@10,precision@5,recall@20,mrr,map"
FLOOR = (
    'import duckdb, sys; duckdb.sql("select count(*), sum(len(retrieved_ids)) from '
    "read_json(?, format='newline_delimited')\", params=[sys.argv[1]]).fetchall()"
)
NIGHTLY_TARGET_S = 25.0
NIGHTLY_TARGET_SIZE = 1_000_000
MERGE_FLAT = 1.2  # the largest size's merge per 1M traces over the smallest's (docstring)
MERGE_FILES = 16  # shards.py's default: 4 files to each of 4 shards
SEED = 7
# each kind of row: the figure compared with the last committed one, and its unit
COMPARED = {
    "throughput": ("ratio", "x"),
    "start-up": ("ratio", "x"),
    "nightly": ("s", " s"),
    "nightly-parquet": ("s", " s"),
    "merge": ("per_1m_s", " s"),
    "merge-flatness": ("ratio", "x"),
}


def _kind(name: str) -> str:
    return name.split("@")[0]


def _sizes(name: str) -> list[int]:
    """The trace counts in a row's name (`nightly@1000000`, `merge-flatness@1000-10000`)."""
    return [int(n) for n in name.partition("@")[2].split("-") if n]


def target(name: str) -> float | None:
    """The row's target (a ratio, or seconds for the nightly partition); None: none for it."""
    kind = _kind(name)
    if kind == "start-up":
        return 1.5
    if kind == "throughput":
        return 1.5 if _sizes(name)[0] <= 100_000 else 3.0
    if kind.startswith("nightly"):
        return NIGHTLY_TARGET_S if _sizes(name)[0] == NIGHTLY_TARGET_SIZE else None
    if kind == "merge-flatness":
        return MERGE_FLAT
    return None  # a merge at one size: the target is on the ratio between sizes


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


def _machine(proc: Process) -> dict[str, float]:
    """What the machine did to a measured process (disk waits, CPU steal), where told."""
    waits = {"io_stall_s": proc.io_stall_s, "steal_s": proc.steal_s}
    return {key: value for key, value in waits.items() if value is not None}


def measure_nightly(
    size: int, data_root: Path | None = None, store: str = "jsonl.gz"
) -> dict[str, dict[str, float]]:
    """{"nightly@SIZE" ("nightly-parquet@SIZE" from a Parquet store): {"s": the partition's
    seconds (the `dg.materialize` call), "traces_s" and "traces_share": the `traces` step's
    seconds and share of them, "process_s": the whole fresh process, and the machine's waits}};
    the means checked against pytrec_eval's."""
    ds = dataset(size, SEED, data_root)
    parquet = store == "parquet"
    _, env = nightly.prepare(ds, "guard_nightly", parquet_store(ds) if parquet else None)
    what = "the guard's nightly partition"
    result, proc, _ = nightly.partition(ds.day.isoformat(), env, size, oracle_means(ds), what)
    row = {"s": result["wall_s"], "process_s": proc.wall_s, **_machine(proc)}
    if "traces" in result["step_s"]:
        row["traces_s"] = result["step_s"]["traces"]
        row["traces_share"] = row["traces_s"] / row["s"]
    return {f"nightly{'-parquet' if parquet else ''}@{size}": row}


def measure_merge(
    sizes: list[int], shard_count: int = 2, data_root: Path | None = None
) -> dict[str, dict[str, float]]:
    """{"merge@SIZE": {"s": the merge's seconds, "per_1m_s": per 1M traces, "shards", the merge
    process's "process_s" and the machine's waits}} at each size, and with two sizes or more
    {"merge-flatness@SMALLEST-LARGEST": {"ratio": the largest size's merge seconds over the
    smallest's}}; the merged rows and means checked as `shards.checked_runs` checks them."""
    rows: dict[str, dict[str, float]] = {}
    for size in sorted(set(sizes)):
        _, runs, _ = shards.checked_runs(size, SEED, [shard_count], MERGE_FILES, data_root)
        merge, proc = runs[0].merge, runs[0].merge_proc
        rows[f"merge@{size}"] = {
            "s": merge["step_s"],
            "per_1m_s": merge["step_s"] * 1e6 / size,
            "shards": shard_count,
            "process_s": proc.wall_s,
            **_machine(proc),
        }
    if len(rows) >= 2:
        smallest, largest = min(sizes), max(sizes)
        small, large = rows[f"merge@{smallest}"], rows[f"merge@{largest}"]
        rows[f"merge-flatness@{smallest}-{largest}"] = {"ratio": large["s"] / small["s"]}
    return rows


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def _measured(name: str, row: dict[str, float]) -> str:
    """What was measured, in words."""
    kind = _kind(name)
    machine = machine_note(row.get("io_stall_s"), row.get("steal_s"))
    machine = f"; {machine}" if machine else ""
    if kind.startswith("nightly"):
        traces = (
            f"the traces step {row['traces_s']:.1f} s, {row['traces_share']:.0%} of it; "
            if "traces_s" in row
            else ""
        )
        process = f"the process {row['process_s']:.1f} s{machine}"
        return f"one partition {row['s']:.2f} s ({traces}{process})"
    if kind == "merge":
        size = _sizes(name)[0]
        return (
            f"the merge of {int(row['shards'])} shards {row['s']:.2f} s for {size:,} traces, "
            f"{row['per_1m_s']:.2f} s per 1M traces (the process {row['process_s']:.1f} s{machine})"
        )
    if kind == "merge-flatness":
        smallest, largest = _sizes(name)
        return (
            f"the merge's seconds at {largest:,} traces over those at {smallest:,}: "
            f"{row['ratio']:.2f}x"
        )
    return f"evaluate {row['s']:.2f} s, floor {row['floor_s']:.2f} s: {row['ratio']:.2f}x"


def _verdict(name: str, row: dict[str, float]) -> str:
    """The row against its target, in words."""
    kind = _kind(name)
    goal = target(name)
    key, unit = COMPARED[kind]
    if goal is None and kind.startswith("nightly"):
        return f"the target of {NIGHTLY_TARGET_S:g} s is for {NIGHTLY_TARGET_SIZE:,} traces"
    if goal is None:
        return "no target at one size: it is on the ratio between sizes, merge-flatness"
    verdict = "within" if row[key] <= goal else "OVER"
    flat = ", independent of the trace count" if kind == "merge-flatness" else ""
    return f"{verdict} the target of {goal:g}{unit}{flat}"


def line(name: str, row: dict[str, float], last: dict[str, object] | None) -> str:
    """The row: what was measured, its target and verdict, and the figure last committed."""
    text = f"{name}: {_measured(name, row)} ({_verdict(name, row)})"
    key, unit = COMPARED[_kind(name)]
    if last is None or key not in last:
        return text + "; nothing committed yet"
    before, now = float(last[key]), row[key]  # type: ignore[arg-type]
    percent = f", {(now - before) / before:+.1%}" if before else ""
    return (
        text + f"; last committed {before:.2f}{unit} at {last['commit']} "
        f"({now - before:+.2f}{unit}{percent})"
    )


def _numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="100000", help="comma-separated trace counts (empty: no ratio rows)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nightly", action="store_true", help="also one nightly partition")
    ap.add_argument("--nightly-size", type=int, default=NIGHTLY_TARGET_SIZE)
    ap.add_argument(
        "--nightly-store",
        choices=["jsonl.gz", "parquet", "both"],
        default="jsonl.gz",
        help="the trace store the nightly partition reads",
    )
    ap.add_argument("--merge", action="store_true", help="also the sharded day's merge")
    ap.add_argument("--merge-sizes", default="1000000", help="comma-separated trace counts")
    ap.add_argument("--merge-shards", type=int, default=2, help="shard processes before the merge")
    ap.add_argument("--data-root", type=Path, default=None, help="generated data (bench/data/)")
    ap.add_argument("--record", action="store_true", help=f"write the figures to {RECORD}")
    ap.add_argument(
        "--record-to",
        type=Path,
        default=None,
        help="like --record, with PATH read and written in place of bench/results/guard.json",
    )
    a = ap.parse_args(argv)
    record = a.record_to or RECORD
    committed = json.loads(record.read_text()) if record.is_file() else {}
    figures: dict[str, dict[str, float]] = {}

    def show(rows: dict[str, dict[str, float]]) -> None:
        figures.update(rows)
        for name, row in rows.items():
            print(line(name, row, committed.get(name)), flush=True)

    try:
        for size in _numbers(a.sizes):
            show(measure(size, a.rounds, a.data_root))
        if a.nightly:
            for store in ("jsonl.gz", "parquet"):
                if a.nightly_store in (store, "both"):
                    show(measure_nightly(a.nightly_size, a.data_root, store))
        if a.merge:
            show(measure_merge(_numbers(a.merge_sizes), a.merge_shards, a.data_root))
    except (RuntimeError, AssertionError) as failed:  # a measurement failed, or means disagree
        raise SystemExit(f"guard: {failed}") from failed
    if a.record or a.record_to is not None:
        commit = _commit()
        committed |= {name: {**row, "commit": commit} for name, row in figures.items()}
        record.write_text(json.dumps(committed, indent=2, sort_keys=True) + "\n")
        shown = record.relative_to(REPO) if record.is_relative_to(REPO) else record
        print(f"recorded in {shown} (commit {commit})")


if __name__ == "__main__":
    main()
