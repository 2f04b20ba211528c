"""(c) One nightly partition end to end through Dagster: every asset and every check.

    python bench/nightly.py --sizes 10000,100000 [--cli]

The trace store is the generated day laid out as the pipeline reads it
(`store/traces/date=2026-11-30/traces.jsonl.gz`, `store/corpus/corpus.parquet`); each run gets a
new warehouse file, reports and approvals folders and a configuration with linear gain, the five
metrics and zero thresholds (so the checks pass and the deploy gate runs too). Rows: the
partition with `dg.materialize` in a fresh interpreter (the call timed; importing Dagster and the
definitions apart), and with `--cli` also the `dagster asset materialize` command as a whole
process. Means are read back from the warehouse's `query_metrics`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    METRICS,
    Process,
    Row,
    emit,
    max_abs_diff,
    oracle_means,
    parse_args,
    run_process,
    run_worker,
    waits,
)
from bench.generate import Dataset, dataset

CONFIG = """\
metrics = [{metrics}]
gain = "linear"

[thresholds]
{thresholds}
"""


def prepare(ds: Dataset, name: str, store: Path | None = None) -> tuple[Path, dict[str, str]]:
    """A fresh run folder and the environment the definitions read; the trace store `store`
    (default: the day as JSONL.gz, `ds.store`)."""
    folder = ds.root / name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "dagster_home").mkdir(parents=True)
    config = folder / "bench_config.toml"
    config.write_text(
        CONFIG.format(
            metrics=", ".join(f'"{m}"' for m in METRICS),
            thresholds="\n".join(f'"{m}" = 0.0' for m in METRICS),
        )
    )
    env = {
        "RETRIEVAL_PIPELINE_STORE": str(store or ds.store),
        "RETRIEVAL_PIPELINE_DB": str(folder / "warehouse.duckdb"),
        "RETRIEVAL_PIPELINE_CONFIG": str(config),
        "RETRIEVAL_PIPELINE_REPORTS": str(folder / "reports"),
        "RETRIEVAL_PIPELINE_APPROVALS": str(folder / "approvals"),
        "DAGSTER_HOME": str(folder / "dagster_home"),
    }
    return folder, env


def dagster_command() -> str:
    beside = Path(sys.executable).parent / "dagster"
    found = str(beside) if beside.exists() else shutil.which("dagster")
    if not found:
        raise RuntimeError("dagster is not installed in this environment")
    return found


def dagster_materialize(env: dict[str, str], *partitions: str) -> Process:
    """`dagster asset materialize` of every asset and check for `partitions` (`--partition DAY`
    or `--partition-range FIRST...LAST`) as a whole process; RuntimeError when it fails."""
    cmd = [
        dagster_command(), "asset", "materialize", "-m", "retrieval_pipeline.defs",
        "--select", "*", *partitions,
    ]  # fmt: skip
    proc = run_process(cmd, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return proc


def defs_ready() -> bool:
    from bench.common import REPO

    return (REPO / "retrieval_pipeline" / "defs" / "__init__.py").is_file()


def measure(
    sizes: list[int],
    seed: int = 7,
    repeat: int = 1,
    data_root: Path | None = None,
    cli: bool = False,
):
    rows: list[Row] = []
    if not defs_ready():
        raise RuntimeError("retrieval_pipeline/defs/__init__.py does not exist yet")
    for size in sizes:
        ds = dataset(size, seed, data_root)
        oracle = oracle_means(ds)
        day = ds.day.isoformat()
        _, env = prepare(ds, "nightly_materialize")
        engine = "dg.materialize, all assets and checks, JSONL.gz"
        rows.append(materialized("(c) nightly partition", engine, size, day, env, oracle))
        if not cli:
            continue
        _, env = prepare(ds, "nightly_cli")
        engine = "dagster asset materialize --select '*', JSONL.gz"
        rows.append(
            command_line(
                "(c) nightly partition", engine, size, env, oracle, day, ["--partition", day]
            )
        )
    return rows


def command_line(
    measurement: str,
    engine: str,
    traces: int,
    env: dict[str, str],
    oracle: dict,
    last_day: str,
    partitions: list[str],
    note: str = "whole process",
) -> Row:
    """`dagster_materialize(env, *partitions)` timed as a whole process; its row, with the
    means of `last_day` in the warehouse checked against `oracle`."""
    proc = dagster_materialize(env, *partitions)
    database = env["RETRIEVAL_PIPELINE_DB"]
    means, _ = run_worker("db_means", "--day", last_day, "--db", database)
    return Row(
        measurement,
        engine,
        traces,
        proc.wall_s,
        proc.wall_s,
        proc.peak_rss_mib,
        max_abs_diff(means["means"], oracle, f"{measurement}, {engine}"),
        means["means"],
        note=note,
        **waits(proc),
    )


def materialized(
    measurement: str, engine: str, size: int, day: str, env: dict[str, str], oracle: dict
) -> Row:
    """Partition `day` through every asset and check with `dg.materialize` in a fresh process
    (the environment `env` names the store and the warehouse); its row, means checked."""
    result, proc, diff = partition(day, env, size, oracle, measurement)
    slowest = sorted(result["step_s"].items(), key=lambda kv: -kv[1])[:3]
    return Row(
        measurement,
        engine,
        size,
        result["wall_s"],
        proc.wall_s,
        proc.peak_rss_mib,
        diff,
        result["means"],
        note=f"imports {result['import_s']:.1f} s not in wall; "
        f"{sum(result['checks'].values())}/{len(result['checks'])} checks passed; "
        "slowest steps: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in slowest)
        + "; highest resident memory in "
        + _peak_step(result["step_peak_mib"]),
        **waits(proc),
    )


def partition(
    day: str, env: dict[str, str], size: int, oracle: dict, what: str = "nightly partition"
) -> tuple[dict[str, Any], Process, float]:
    """Partition `day` of `size` traces through every asset and check with `dg.materialize` in a
    fresh process (`workers.nightly`: `wall_s` is the call, imports apart; `step_s` each step's
    seconds); its result, the process and the largest difference of its means from `oracle`
    (MeansDisagree above the tolerance; RuntimeError when a step or a check fails)."""
    database = env["RETRIEVAL_PIPELINE_DB"]
    result, proc = run_worker("nightly", "--day", day, "--db", database, env=env)
    if not result["success"]:
        raise RuntimeError(
            f"nightly partition {day} at {size} failed: steps {result['failed_steps']}, "
            f"checks {result['checks']}"
        )
    return result, proc, max_abs_diff(result["means"], oracle, f"{what} at {size}")


def _peak_step(step_peak_mib: dict[str, float]) -> str:
    """The step during which the process was largest, in words."""
    if not step_peak_mib:
        return "no step"
    step, mib = max(step_peak_mib.items(), key=lambda kv: kv[1])
    return f"{step} ({mib:,.0f} MiB)"


def main(argv: list[str] | None = None) -> None:
    cli = {"action": "store_true", "help": "also time the dagster command as a whole process"}
    args = parse_args(__doc__.splitlines()[0], argv, {"--cli": cli})
    emit(measure(args.sizes, args.seed, args.repeat, cli=args.cli), args.json)


if __name__ == "__main__":
    main()
