"""Shared by the measurement scripts: running a worker in a fresh process, the oracle's means,
the comparison of means, and the results table."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
METRICS = ("ndcg@10", "precision@5", "recall@20", "mrr", "map")
TOLERANCE = 1e-9
SLICE_AT_1M = 100_000  # pytrec_eval is fed slices of this many traces from 1M traces on
# a measured process is killed (by its pid) past this resident size: the machine has 24 GiB
MAX_RSS_GIB = float(os.environ.get("BENCH_MAX_RSS_GIB", "16"))


class MeansDisagree(AssertionError):
    """An engine's means differ from the oracle's by more than TOLERANCE."""


@dataclass
class Row:
    """One measurement: what ran, on how many traces, how long, how much memory, which means."""

    measurement: str
    engine: str
    traces: int
    wall_s: float  # the measured step (whole process for command-line rows)
    process_s: float  # the whole fresh process: start-up, imports, setup, step
    peak_rss_mib: float  # of the process (and what it waited for): ru_maxrss from wait4
    max_abs_diff: float | None = None  # max over metrics of |mean - oracle mean|; None: no means
    means: dict[str, float] = field(default_factory=dict)
    note: str = ""
    walls: list[float] = field(default_factory=list)
    # a reference tool's scoring call alone (pytrec_eval's evaluate), apart from parsing its input
    scoring_s: float | None = None
    # what the machine did to the run (the most of any of the row's processes; None: not told)
    io_stall_s: float | None = None
    steal_s: float | None = None

    @property
    def traces_per_s(self) -> float:
        return self.traces / self.wall_s if self.wall_s > 0 else float("inf")

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "traces_per_s": self.traces_per_s}


@dataclass(frozen=True)
class Process:
    """A finished child process: output, wall seconds and peak RSS."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_mib: float
    io_stall_s: float | None = None  # machine-wide, while it ran: `machine_waits`
    steal_s: float | None = None


def machine_waits() -> tuple[float | None, float | None]:
    """Seconds so far, machine-wide, during which some task waited for the disk (the kernel's
    pressure stall information, `/proc/pressure/io`), and during which the hypervisor ran other
    machines on this one's CPUs (steal time, `/proc/stat`, summed over CPUs); None where the
    kernel does not say. A shared machine's slow run shows in one or the other: at 04:20 UTC on
    2026-12-04 one day's ingestion at 1M took 63.6 s with its reader waiting 31 s for the disk,
    and 24.2 s a minute later (bench/README.md, "Where the time goes")."""
    io_stall: float | None = None
    steal: float | None = None
    try:
        with open("/proc/pressure/io") as pressure:
            some = pressure.readline().split()
        io_stall = int(some[-1].removeprefix("total=")) / 1e6
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open("/proc/stat") as stat:
            cpu = stat.readline().split()
        steal = int(cpu[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return io_stall, steal


def waited_since(
    before: tuple[float | None, float | None],
) -> tuple[float | None, float | None]:
    """The disk waits and CPU steal since `before` (a `machine_waits()`), each None where the
    kernel did not say."""
    io_stall, steal = (
        None if then is None or now is None else now - then
        for then, now in zip(before, machine_waits(), strict=True)
    )
    return io_stall, steal


def machine_note(io_stall_s: float | None, steal_s: float | None) -> str:
    """What the machine did to a run, in words ("" where the kernel did not say)."""
    parts = []
    if io_stall_s is not None:
        parts.append(f"IO stall {io_stall_s:.1f} s")
    if steal_s is not None:
        parts.append(f"CPU steal {steal_s:.1f} s")
    return "machine: " + ", ".join(parts) if parts else ""


class Waits(TypedDict):
    """A row's `io_stall_s` and `steal_s`, as keyword arguments of `Row`."""

    io_stall_s: float | None
    steal_s: float | None


def waits(*procs: Process) -> Waits:
    """A row's `io_stall_s` and `steal_s`: the most that any of `procs` met."""

    def most(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return Waits(
        io_stall_s=most([p.io_stall_s for p in procs]),
        steal_s=most([p.steal_s for p in procs]),
    )


def _rss_gib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def run_process(cmd: Sequence[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> Process:
    """Run `cmd` in a fresh process; its peak RSS comes from wait4 (this child only, with the
    children it waited for), so measurements run one after another do not mix. A watchdog kills
    the child (its pid only) when its RSS passes MAX_RSS_GIB."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        machine_before = machine_waits()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=full_env, cwd=cwd)
        done = threading.Event()
        killed: list[float] = []

        def watch() -> None:
            while not done.wait(0.5):
                rss = _rss_gib(proc.pid)
                if rss > MAX_RSS_GIB:
                    killed.append(rss)
                    proc.kill()
                    return

        watchdog = threading.Thread(target=watch, daemon=True)
        watchdog.start()
        _, status, usage = os.wait4(proc.pid, 0)
        done.set()
        wall = time.perf_counter() - start
        io_stall, steal = waited_since(machine_before)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stderr = err.read()
        if killed:
            stderr += (
                f"\n[bench] killed after {wall:.0f} s: RSS {killed[0]:.1f} GiB passed the limit "
                f"of {MAX_RSS_GIB:g} GiB (BENCH_MAX_RSS_GIB)"
            )
        return Process(
            proc.returncode,
            out.read(),
            stderr,
            wall,
            usage.ru_maxrss / 1024,
            io_stall,
            steal,
        )


def run_worker(name: str, *args: str, env: dict[str, str] | None = None) -> tuple[dict, Process]:
    """Run `bench/workers.py NAME ARGS` in a fresh interpreter; its JSON result and the process."""
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "bench.workers", name, *args, "--result", str(result_path)]
        proc = run_process(cmd, env=env)
        if proc.returncode != 0 or not result_path.is_file():
            raise RuntimeError(
                f"worker {name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
            )
        return json.loads(result_path.read_text()), proc


def job_worker(workers: dict[str, Any], name: str, job: Path, result: Path) -> None:
    """In the worker process: `workers[name]` on the JSON job at `job`, its result written as
    JSON to `result` (`run_job`)."""
    result.write_text(json.dumps(workers[name](json.loads(job.read_text())), default=str))


def run_job(module: str, name: str, job: dict[str, Any]) -> tuple[dict[str, Any], Process]:
    """`python -m MODULE worker NAME JOB RESULT` in a fresh process, `job` given as JSON: the
    worker's result and the measured process."""
    with tempfile.TemporaryDirectory(prefix="bench-job-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(job))
        args = ["worker", name, str(job_path), str(result_path)]
        proc = run_process([sys.executable, "-m", module, *args])
        if proc.returncode != 0 or not result_path.is_file():
            raise RuntimeError(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(result_path.read_text()), proc


def pytrec_slice(size: int) -> int:
    return SLICE_AT_1M if size >= 1_000_000 else 0


def oracle_means(ds: object) -> dict[str, float]:
    """pytrec_eval's means for the dataset (linear gain), computed once and cached beside it."""
    from bench.generate import Dataset

    assert isinstance(ds, Dataset)
    cache = ds.cache("oracle_pytrec_eval.json")
    if not cache.is_file():
        result, _ = run_worker(
            "pytrec", "--input", str(ds.jsonl), "--corpus", str(ds.corpus),
            "--slice", str(pytrec_slice(ds.size)),
        )  # fmt: skip
        save_oracle(ds, result["means"])
    return json.loads(cache.read_text())


def save_oracle(ds: object, means: dict[str, float]) -> None:
    from bench.generate import Dataset

    assert isinstance(ds, Dataset)
    ds.cache("oracle_pytrec_eval.json").write_text(json.dumps(means, indent=2))


def max_abs_diff(means: dict[str, float], oracle: dict[str, float], what: str) -> float:
    """Max |mean - oracle| over METRICS; raises MeansDisagree above TOLERANCE."""
    missing = [m for m in METRICS if means.get(m) is None]
    if missing:
        raise MeansDisagree(f"{what}: no mean for {', '.join(missing)} (got {means})")
    diffs = {m: abs(float(means[m]) - float(oracle[m])) for m in METRICS}
    worst = max(diffs.values())
    if worst > TOLERANCE:
        detail = ", ".join(f"{m}: {means[m]!r} vs {oracle[m]!r}" for m in METRICS)
        raise MeansDisagree(f"{what}: means differ from pytrec_eval by {worst:.3g} ({detail})")
    return worst


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


HEADER = (
    "| measurement | engine | traces | wall s | traces/s | process s | peak RSS MiB "
    "| max abs diff of means | note |"
)


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [HEADER, "|" + "---|" * 9]
    for r in rows:
        diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"
        machine = machine_note(r.io_stall_s, r.steal_s)  # the most any of its processes met
        note = "; ".join(part for part in (r.note, machine) if part)
        wall = f"{r.wall_s:.3f}" if r.wall_s < 10 else f"{r.wall_s:.1f}"
        lines.append(
            f"| {r.measurement} | {r.engine} | {r.traces:,} | {wall} | {r.traces_per_s:,.0f} "
            f"| {r.process_s:.2f} | {r.peak_rss_mib:,.0f} | {diff} | {note} |"
        )
    return "\n".join(lines)


def parse_args(
    description: str,
    argv: list[str] | None = None,
    options: dict[str, dict[str, Any]] | None = None,
) -> argparse.Namespace:
    """The options every measurement takes, and a script's own (`options`: flag -> keyword
    arguments of `add_argument`)."""
    parser = argparse.ArgumentParser(description=description)
    for flag, spec in (options or {}).items():
        parser.add_argument(flag, **spec)
    parser.add_argument("--sizes", default="10000", help="comma-separated trace counts")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=1, help="timed repetitions (median reported)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    return args


def script_args(
    workers: dict[str, Any],
    description: str,
    argv: list[str],
    options: dict[str, dict[str, Any]] | None = None,
) -> argparse.Namespace | None:
    """A script's arguments (`parse_args`); None when this process is one of its workers
    (`python -m bench.X worker NAME JOB RESULT`, `run_job`), whose job is then done."""
    if argv[:1] == ["worker"]:
        job_worker(workers, argv[1], Path(argv[2]), Path(argv[3]))
        return None
    return parse_args(description, argv, options)


def write_report(name: str, lines: list[str]) -> Path:
    """Print a Markdown report and keep it as `bench/results/<name>`."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / name
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")
    return out


def emit(rows: Sequence[Row], json_path: Path | None) -> None:
    print(table(rows))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps([r.to_json() for r in rows], indent=2))
