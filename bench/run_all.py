"""Run every measurement at the given sizes and write `bench/results/latest.md`.

    python bench/run_all.py --sizes 10000,100000 --repeat 3
    python bench/run_all.py --sizes 1000000 --measurements e,a,d,b

Measurements: e (pytrec_eval, the oracle, and ranx up to 100k), a (metric step), d (floor),
b (evaluate end to end), c (nightly partition through Dagster). Default: all of them up to 100k
traces, and e,a,d,b from 1M on. Each size's rows are kept in `bench/results/rows_n<N>.json`
(a later run replaces the measurements it repeats), and `latest.md` is rendered from every
size recorded there, with the ratios against issue 7's targets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import evaluate_e2e, floor, metric_step, nightly, reference_tools
from bench.common import REPO, RESULTS, Row, table

ORDER = ("e", "a", "d", "b", "c")
MODULES = {
    "e": reference_tools,
    "a": metric_step,
    "d": floor,
    "b": evaluate_e2e,
    "c": nightly,
}
LARGE = 1_000_000
LARGE_DEFAULT = ("e", "a", "d", "b")


def engine_version() -> str:
    """The commit and a fingerprint of the engine's code and SQL as measured (others edit them
    while benchmarks run, so a result names exactly what it measured)."""
    digest = hashlib.sha256()
    files = sorted([*REPO.glob("sql/*.sql"), *REPO.glob("retrieval_pipeline/**/*.py")])
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = (
        " + uncommitted changes"
        if git("status", "--porcelain", "--", "sql", "retrieval_pipeline")
        else ""
    )
    return f"commit {head}{dirty}, code fingerprint {digest.hexdigest()[:12]}"


def rows_file(size: int) -> Path:
    return RESULTS / f"rows_n{size}.json"


def load_rows(size: int) -> dict[str, list[Row]]:
    path = rows_file(size)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    out: dict[str, list[Row]] = {}
    for letter, rows in data.items():
        if letter.startswith("_"):
            continue
        out[letter] = []
        for raw in rows:
            raw.pop("traces_per_s", None)
            out[letter].append(Row(**raw))
    return out


def load_meta(size: int) -> dict[str, str]:
    path = rows_file(size)
    return json.loads(path.read_text()).get("_meta", {}) if path.is_file() else {}


def save_rows(size: int, rows: dict[str, list[Row]], meta: dict[str, str]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    data: dict[str, object] = {k: [r.to_json() for r in rows[k]] for k in ORDER if k in rows}
    data["_meta"] = meta
    rows_file(size).write_text(json.dumps(data, indent=2))


def find(rows: list[Row], measurement: str, engine: str) -> Row | None:
    return next(
        (r for r in rows if r.measurement.startswith(measurement) and r.engine.startswith(engine)),
        None,
    )


def ratio_lines(by_size: dict[int, list[Row]]) -> list[str]:
    """Issue 7's targets against what was measured, one table row per target and size."""
    out = ["| target | size | measured | verdict |", "|---|---|---|---|"]

    def add(target: str, size: int, text: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "**missed**")
        out.append(f"| {target} | {size:,} | {text} | {verdict} |")

    for size, rows in sorted(by_size.items()):
        step = find(rows, "(a)", "engine.compute_query_metrics")
        parquet_floor = find(rows, "(d) floor", "DuckDB list_position")
        table_floor = find(rows, "(d')", "DuckDB list_position")
        pytrec = find(rows, "(e)", "pytrec_eval")
        ranx = find(rows, "(e)", "ranx")
        in_process = find(rows, "(b)", "run_evaluation")
        cli_jsonl = find(rows, "(b)", "retrieval-pipeline evaluate, JSONL")
        cli_jsonl = next(
            (r for r in rows if r.engine == "retrieval-pipeline evaluate, JSONL"), cli_jsonl
        )
        partition = find(rows, "(c)", "dg.materialize")
        if step and parquet_floor:
            x = step.wall_s / parquet_floor.wall_s
            add("metric step <= 1.5x floor (Parquet list_position)", size, f"{x:.1f}x", x <= 1.5)
        if step and table_floor:
            x = step.wall_s / table_floor.wall_s
            add("metric step vs floor over the engine's `traces` table", size, f"{x:.1f}x", None)
        if pytrec and step:
            # the 20x target read as scoring throughput: the 8x target below is end to end
            x = step.traces_per_s / pytrec.traces_per_s
            ok = x >= 20 if size == 100_000 else None
            add("metric step >= 20x pytrec_eval throughput (its plain script)", size,
                f"{x:.1f}x", ok)  # fmt: skip
            if pytrec.scoring_s:
                x = pytrec.scoring_s / step.wall_s
                add("metric step vs pytrec_eval's evaluate() call alone (like for like)", size,
                    f"{x:.1f}x", None)  # fmt: skip
        if pytrec and in_process:
            x = in_process.traces_per_s / pytrec.traces_per_s
            add("evaluate (in process, JSONL.gz) vs pytrec_eval script throughput", size,
                f"{x:.2f}x", None)  # fmt: skip
        if pytrec and ranx:
            x = ranx.wall_s / pytrec.wall_s
            add("(for scale) ranx wall / pytrec_eval wall", size, f"{x:.1f}x", None)
        if pytrec and cli_jsonl:
            x = pytrec.process_s / cli_jsonl.process_s
            ok = x >= 8 if size == 100_000 else None
            add("CLI evaluate on JSONL >= 8x faster than pytrec_eval script (whole processes)",
                size, f"{x:.2f}x", ok)  # fmt: skip
        if partition:
            gib = partition.peak_rss_mib / 1024
            if size >= LARGE:
                ok = partition.wall_s <= 30 and gib <= 2
                add("1M partition <= 30 s and <= 2 GiB", size,
                    f"{partition.wall_s:.1f} s, {gib:.2f} GiB", ok)  # fmt: skip
            else:
                scaled = partition.wall_s * LARGE / size
                add("1M partition <= 30 s and <= 2 GiB (not run at 1M: linear extrapolation)",
                    size, f"{partition.wall_s:.1f} s, {gib:.2f} GiB -> ~{scaled:.0f} s at 1M",
                    scaled <= 30 if size == 100_000 else None)  # fmt: skip
    if 100_000 in by_size and LARGE in by_size:
        for big in by_size[LARGE]:
            small = find(by_size[100_000], big.measurement, big.engine)
            if small is None or big.measurement.startswith("(d') "):
                continue
            growth = (big.wall_s / LARGE) / (small.wall_s / 100_000) - 1
            shape = " (cheaper per trace at 1M)" if growth < -0.15 else ""
            add(f"per-trace time at 1M at most 15% above 100k: {big.measurement}, {big.engine}",
                LARGE, f"{growth:+.0%}{shape}", growth <= 0.15)  # fmt: skip
    return out


def machine() -> str:
    import duckdb

    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, DuckDB {duckdb.__version__}; "
        f"load average at render {os.getloadavg()[0]:.1f}"
    )


def render(sizes: list[int] | None = None) -> str:
    by_size: dict[int, list[Row]] = {}
    for path in sorted(RESULTS.glob("rows_n*.json")):
        size = int(path.stem.removeprefix("rows_n"))
        if sizes is None or size in sizes:
            by_letter = load_rows(size)
            by_size[size] = [r for k in ORDER for r in by_letter.get(k, [])]
    lines = [
        "# Benchmark results (latest)",
        "",
        f"Rendered {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}.",
        "Numbers are machine-specific (and this machine is shared); the ratios are the point.",
        "`wall s` is the measured step (whole process for command-line rows); `process s` the",
        "whole fresh process; peak RSS is the process's ru_maxrss (wait4). Means: linear gain,",
        "ndcg@10, precision@5, recall@20, mrr, map; `max abs diff` is against pytrec_eval.",
        "",
    ]
    for size, rows in sorted(by_size.items()):
        meta = load_meta(size)
        measured = "; ".join(f"{k}: {v}" for k, v in sorted(meta.items()))
        lines += [f"## {size:,} traces", "", table(rows), "", f"Measured against: {measured}", ""]
    lines += ["## Targets (issue 7)", "", *ratio_lines(by_size), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--measurements", default=None, help="subset of e,a,d,b,c")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--nightly-cli", action="store_true", help="also time the dagster CLI")
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.sizes.split(",")):
        chosen = args.measurements.split(",") if args.measurements else None
        if chosen is None:
            chosen = list(LARGE_DEFAULT if size >= LARGE else ORDER)
        repeat = 1 if size >= LARGE else args.repeat
        rows = load_rows(size)
        meta = load_meta(size)
        for letter in ORDER:
            if letter not in chosen:
                continue
            started = time.perf_counter()
            module = MODULES[letter]
            if letter == "c":
                new = module.measure([size], args.seed, repeat, cli=args.nightly_cli)
            else:
                new = module.measure([size], args.seed, repeat)
            rows[letter] = new
            meta[letter] = f"{time.strftime('%H:%M UTC', time.gmtime())}, {engine_version()}"
            save_rows(size, rows, meta)
            print(table(new), flush=True)
            print(f"({letter} at {size:,}: {time.perf_counter() - started:.0f} s)", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.md").write_text(render())
    print(f"wrote {RESULTS / 'latest.md'}")


if __name__ == "__main__":
    main()
