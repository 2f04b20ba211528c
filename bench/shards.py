"""A sharded nightly day on this machine (issue 24): 1, 2 and 4 shard processes at once, then the
merge into the warehouse, each step a fresh process measured for wall time and peak RSS.

    python bench/shards.py --sizes 1000000 --shards 1,2,4 [--files 16] [--single]

The day is the generated workload (`generate.py`) written as `--files` JSON-lines.gz files of
consecutive records (`part-000.jsonl.gz`, ...; default 16, so that `shards.deal` gives each of 4
shards 4 files), in a trace store of its own with the same corpus, cached beside the data
(`bench/data/n<N>_s<seed>/shard_store/f<F>/`). For each shard count S, the steps of the nightly's
`sharded_day` (defs/nightly/shards.py), each a fresh process calling the functions its op calls,
without Dagster:

1. untimed: a new warehouse file with the store's corpus and judgments loaded (the `corpus` and
   `judgments` assets, which run before the shards), then `shard_plan`'s work: the judgments
   exported under the shard root and the day's files dealt to S shards;
2. the S shard processes started at once, as the multiprocess executor starts its steps:
   `run_shard` as `shard_i_of_S` calls it (the configuration's metrics and gain, `share` = S up to
   the cores); the wall from the first one's start to the last one's end, and each one's wall
   and peak RSS (wait4, `common.run_process`);
3. `shard_merge`'s work: `merge_shards` (with its counts) on that warehouse, then closing it
   (DuckDB's checkpoint writes the merged day out, as when the op's connection closes).

A step process of the multiprocess executor also holds Dagster and the definitions: their import
alone is measured once and noted. Correctness: in `query_metrics`, the annotated traces' count and
mean per segment, variant and metric (what `segment_metrics` aggregates) and per metric, and the
day's rows in `traces`, `quarantine`, `labels` and `query_metrics`, must equal the 1-shard run's
(means to 1e-12, counts exactly), and the per-metric means pytrec_eval's (1e-9); the script
raises otherwise. `--single` also runs the three single-process assets' functions (`traces`,
`labels`, `query_metrics`, each with its own connection) on the same store in one process, id
lists not stored as in the shards, to set the 1-shard run beside it. This process imports only
the standard library and leaves the data to a worker: on Linux a child's peak RSS from wait4
starts from this process's own peak (`subprocess` starts children with vfork, and exec records
the memory it leaves). Writes `bench/results/shards_n<N>.md` (`--json PATH`: every measured
process too); runs each configuration once, whatever `--repeat`; asserts nothing about speed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import date
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    METRICS,
    Process,
    job_worker,
    machine_note,
    max_abs_diff,
    parse_args,
    run_job,
    run_process,
    waits,
    write_report,
)

EQUAL = 1e-12  # merged means against the 1-shard run's (the order of a sum differs in shards)
RUN_ID = "bench"
CONFIG = """\
metrics = [{metrics}]
gain = "linear"

[thresholds]
{thresholds}
"""
COUNTS_SQL = {
    "traces": "select count(*) from traces where partition_date = $day",
    "quarantine": "select count(*) from quarantine where partition_date = $day",
    "labels": "select count(*) from labels where partition_date = $day",
    "stale labels": "select count(*) from labels where partition_date = $day"
    " and stale_reason is not null",
    "query_metrics": "select count(*) from query_metrics where partition_date = $day",
}
GROUPS_SQL = """
select segment, variant, metric, count(*), avg(value) from query_metrics
where partition_date = $day and is_annotated group by all order by all
"""
MEANS_SQL = """
select metric, avg(value) from query_metrics
where partition_date = $day and is_annotated group by metric
"""


class ShardsDisagree(AssertionError):
    """A sharded day's merged rows differ from the 1-shard run's."""


@dataclass
class Configuration:
    """One shard count's measured run."""

    shards: int
    wall_s: float  # first shard's start to last shard's end
    shard_procs: list[Process]
    shard_results: list[dict[str, Any]]
    merge_proc: Process
    merge: dict[str, Any]
    output_bytes: int
    output_files: dict[str, int]  # bytes per output file name, summed over the shards
    files_per_shard: list[int]
    summary: dict[str, Any]
    max_abs_diff: float = 0.0  # against the reference run's means


# the workers: `python -m bench.shards worker NAME JOB RESULT`, each in a fresh process
def _data(job: dict[str, Any]) -> dict[str, Any]:
    """The generated day (cached), pytrec_eval's means of it and its store of `files` files."""
    from bench.common import oracle_means
    from bench.generate import dataset

    root = Path(job["data_root"]) if job["data_root"] else None
    ds = dataset(int(job["size"]), int(job["seed"]), root)
    store = day_store(ds, int(job["files"]))
    return {
        "root": str(ds.root),
        "day": ds.day.isoformat(),
        "store": str(store),
        "store_bytes": _bytes_under(store / "traces"),
        "oracle": oracle_means(ds),
    }


def _prepare(job: dict[str, Any]) -> dict[str, Any]:
    """The warehouse as the shards find it (corpus and judgments loaded), and the plan."""
    from retrieval_pipeline.ingest.stores import open_store
    from retrieval_pipeline.shards import day_files, deal
    from retrieval_pipeline.store import judgment_sources
    from retrieval_pipeline.warehouse.connection import connect, duckdb_config
    from retrieval_pipeline.warehouse.corpus import load_corpus
    from retrieval_pipeline.warehouse.judgments import load_judgments
    from retrieval_pipeline.warehouse.shards import export_judgments

    store = open_store(job["store"])
    corpus = store.corpus_file()
    with connect(job["db"], duckdb_config()) as conn:
        load_judgments(conn, judgment_sources(store))  # the `judgments` asset
        load_corpus(conn, corpus)  # the `corpus` asset
        judged = export_judgments(conn, job["root"], RUN_ID)  # `shard_plan`
    files = day_files(store.trace_files(date.fromisoformat(job["day"])))
    return {
        "corpus": str(corpus) if corpus is not None else None,
        "judgments": [judged] if judged else [],
        "shares": [[vars(f) for f in share] for share in deal(files, int(job["shards"]))],
    }


def _shard(job: dict[str, Any]) -> dict[str, Any]:
    """One shard step: `run_shard` as `shard_i_of_S` calls it under the multiprocess executor."""
    started = time.perf_counter()
    from retrieval_pipeline.config import load_config
    from retrieval_pipeline.ingest.span_pieces import SpanReading
    from retrieval_pipeline.resources_budget import this_machine
    from retrieval_pipeline.shards import DayFile, shard_folder
    from retrieval_pipeline.warehouse.shards import run_shard

    import_s = time.perf_counter() - started
    config = load_config(job["config"])
    plan, index, count = job["plan"], int(job["index"]), int(job["count"])
    day = date.fromisoformat(job["day"])
    share = min(count, this_machine().cores)  # `_share` under the multiprocess executor
    files = [DayFile(**file) for file in plan["shares"][index]]
    start = time.perf_counter()
    manifest = run_shard(
        files, day, Path(plan["corpus"]) if plan["corpus"] else None, config.scored_metrics(),
        config.gain, config.relevance_level,
        shard_folder(job["root"], day, RUN_ID, index, count), index, share,
        gmax=config.gmax, judged_only=config.judged_only,
        spans=SpanReading(config.trace_format), judgments=plan["judgments"],
        keep_retrieved_ids=False,  # as the one-process run below, and as every earlier figure
    )  # fmt: skip
    return {
        "import_s": import_s,
        "step_s": time.perf_counter() - start,
        "share": share,
        "manifest": manifest,
    }


def _merge(job: dict[str, Any]) -> dict[str, Any]:
    """`shard_merge`'s work: the merge and its counts, then the warehouse closed."""
    started = time.perf_counter()
    from retrieval_pipeline.warehouse.connection import connect, duckdb_config
    from retrieval_pipeline.warehouse.shards import merge_shards

    import_s = time.perf_counter() - started
    day = date.fromisoformat(job["day"])
    start = time.perf_counter()
    conn = connect(job["db"], duckdb_config())
    try:
        opened = time.perf_counter()
        merged = merge_shards(conn, day, job["manifests"])  # its counts included
        done = time.perf_counter()
    finally:
        conn.close()
    closed = time.perf_counter()
    return {
        "import_s": import_s,
        "open_s": opened - start,
        "merge_s": done - opened,
        "close_s": closed - done,
        "step_s": closed - start,
        "merged": {k: v for k, v in vars(merged).items() if k != "day"},
    }


def _single(job: dict[str, Any]) -> dict[str, Any]:
    """The `traces`, `labels` and `query_metrics` assets' functions on the whole day, in one
    process, each with its own warehouse connection as each asset opens one."""
    started = time.perf_counter()
    from retrieval_pipeline.config import load_config
    from retrieval_pipeline.ingest.span_pieces import SpanReading
    from retrieval_pipeline.ingest.stores import open_store
    from retrieval_pipeline.store import day_source
    from retrieval_pipeline.warehouse.connection import connect, duckdb_config
    from retrieval_pipeline.warehouse.ingestion import ingest_traces
    from retrieval_pipeline.warehouse.nightly import quality_counts
    from retrieval_pipeline.warehouse.steps import build_labels, compute_query_metrics

    import_s = time.perf_counter() - started
    config = load_config(job["config"])
    day = date.fromisoformat(job["day"])
    store = open_store(job["store"])
    steps: dict[str, float] = {}

    def step(name: str, work: Callable[[Any], object]) -> None:
        start = time.perf_counter()
        with connect(job["db"], duckdb_config()) as conn:
            work(conn)
        steps[name] = time.perf_counter() - start

    step(
        "traces",
        lambda conn: ingest_traces(
            conn, day_source(store, day), partition_date=day, keep_retrieved_ids=False,
            spans=SpanReading(config.trace_format),
        ),
    )  # fmt: skip
    step(
        "labels",
        lambda conn: build_labels(
            conn, day, day, use_corpus=quality_counts(conn, day, day).corpus_documents > 0
        ),
    )
    step(
        "query_metrics",
        lambda conn: compute_query_metrics(
            conn, config.scored_metrics(), day, day, config.gain, config.relevance_level,
            gmax=config.gmax, judged_only=config.judged_only,
        ),
    )  # fmt: skip
    return {"import_s": import_s, "step_s": sum(steps.values()), "steps": steps}


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    """The day's row counts and its annotated means per segment, variant and metric, read as
    every step reads them (a merged day's rows are its shards' files, under the tables' names)."""
    from retrieval_pipeline.warehouse.connection import connect

    params = {"day": date.fromisoformat(job["day"])}
    with connect(job["db"]) as conn:
        counts = {
            name: conn.execute(sql, params).fetchall()[0][0] for name, sql in COUNTS_SQL.items()
        }
        groups = conn.execute(GROUPS_SQL, params).fetchall()
        means = dict(conn.execute(MEANS_SQL, params).fetchall())
    return {
        "counts": counts,
        "groups": {"/".join(map(str, g[:3])): [g[3], g[4]] for g in groups},
        "means": means,
    }


def _definitions(job: dict[str, Any]) -> dict[str, Any]:
    """Dagster and the definitions imported, as a multiprocess step process holds them."""
    started = time.perf_counter()
    import retrieval_pipeline.defs  # noqa: F401

    return {"import_s": time.perf_counter() - started}


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "data": _data,
    "prepare": _prepare,
    "shard": _shard,
    "merge": _merge,
    "single": _single,
    "summary": _summary,
    "definitions": _definitions,
}


def worker(name: str, job: Path, result: Path) -> None:
    job_worker(WORKERS, name, job, result)


def run_worker(name: str, job: dict[str, Any]) -> tuple[dict[str, Any], Process]:
    """Worker `name` on `job` in a fresh process: its result and the measured process."""
    return run_job("bench.shards", name, job)


def day_store(ds: Any, files: int) -> Path:
    """The dataset's day as `files` JSON-lines.gz files of consecutive records, written as
    `generate.py` writes its one file, with the corpus, laid out as a trace store (cached)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = ds.root / "shard_store" / f"f{files}"
    manifest = root / "manifest.json"
    wanted = {"files": files, "size": ds.size, "seed": ds.seed}
    if manifest.is_file() and json.loads(manifest.read_text()) == wanted:
        return Path(root)
    if root.exists():
        shutil.rmtree(root)
    folder = root / "traces" / f"date={ds.day.isoformat()}"
    folder.mkdir(parents=True)
    # read a file's rows at a time: the whole day at 10M traces would not fit in memory
    source = pq.ParquetFile(ds.parquet)
    rows = source.metadata.num_rows
    bounds = [round(i * rows / files) for i in range(files + 1)]
    batches = source.iter_batches(batch_size=65_536)
    held: list[pa.RecordBatch] = []
    conn = duckdb.connect()
    for number, (first, end) in enumerate(pairwise(bounds)):
        while sum(b.num_rows for b in held) < end - first:
            held.append(next(batches))
        table = pa.Table.from_batches(held)
        conn.register("piece", table.slice(0, end - first))
        target = folder / f"part-{number:03d}.jsonl.gz"
        conn.execute(f"copy piece to '{target}' (format json, compression gzip)")  # our path
        conn.unregister("piece")
        rest = table.slice(end - first)
        held = rest.to_batches() if rest.num_rows else []
    conn.close()
    corpus = root / "corpus" / "corpus.parquet"
    corpus.parent.mkdir(parents=True)
    try:
        os.link(ds.corpus, corpus)
    except OSError:
        shutil.copyfile(ds.corpus, corpus)
    manifest.write_text(json.dumps(wanted))
    return Path(root)


def _folder(work: Path, name: str) -> tuple[Path, dict[str, Any]]:
    """A new run folder with the bench configuration, and the paths every worker is given."""
    folder = work / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    config = folder / "bench_config.toml"
    config.write_text(
        CONFIG.format(
            metrics=", ".join(f'"{m}"' for m in METRICS),
            thresholds="\n".join(f'"{m}" = 0.0' for m in METRICS),
        )
    )
    paths = {"db": str(folder / "warehouse.duckdb"), "root": str(folder / "shards")}
    return folder, {**paths, "config": str(config)}


def _at_once(jobs: list[dict[str, Any]]) -> tuple[list[tuple[dict[str, Any], Process]], float]:
    """The shard jobs, each in its own process, all started at once; their results and the wall
    time from the first start to the last end."""

    def one(job: dict[str, Any]) -> tuple[dict[str, Any], Process, float, float]:
        start = time.perf_counter()
        result, proc = run_worker("shard", job)
        return result, proc, start, time.perf_counter()

    with ThreadPoolExecutor(len(jobs)) as pool:  # a thread waits for each process
        done = list(pool.map(one, jobs))
    return [(r, p) for r, p, _, _ in done], max(d[3] for d in done) - min(d[2] for d in done)


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _bytes_by_name(folder: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in folder.rglob("*"):
        if path.is_file():
            sizes[path.name] = sizes.get(path.name, 0) + path.stat().st_size
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def configuration(day: str, store: Path, work: Path, shards: int) -> Configuration:
    """One shard count: prepare (untimed), the shards at once, the merge, the merged rows."""
    _, paths = _folder(work, f"shards{shards}")
    base = {**paths, "store": str(store), "day": day}
    plan, _ = run_worker("prepare", {**base, "shards": shards})
    jobs = [{**base, "plan": plan, "index": i, "count": shards} for i in range(shards)]
    done, wall = _at_once(jobs)
    manifests = [result["manifest"] for result, _ in done]
    merge, merge_proc = run_worker("merge", {**base, "manifests": manifests})
    summary, _ = run_worker("summary", base)
    outputs = Path(paths["root"]) / f"date={day}"
    return Configuration(
        shards=shards,
        wall_s=wall,
        shard_procs=[proc for _, proc in done],
        shard_results=[result for result, _ in done],
        merge_proc=merge_proc,
        merge=merge,
        output_bytes=_bytes_under(outputs),
        output_files=_bytes_by_name(outputs),
        files_per_shard=[len(share) for share in plan["shares"]],
        summary=summary,
    )


def single_process(day: str, store: Path, work: Path) -> tuple[dict[str, Any], Process, dict]:
    """The whole day through the single-process assets' functions; result, process, summary."""
    _, paths = _folder(work, "single")
    base = {**paths, "store": str(store), "day": day}
    run_worker("prepare", {**base, "shards": 1})
    result, proc = run_worker("single", base)
    summary, _ = run_worker("summary", base)
    return result, proc, summary


def compare(summary: dict[str, Any], reference: dict[str, Any], what: str) -> float:
    """Max |mean - reference mean| over the per-metric and per-group means; raises ShardsDisagree
    when a count differs or a mean by more than EQUAL."""
    if summary["counts"] != reference["counts"]:
        raise ShardsDisagree(f"{what}: counts {summary['counts']} != {reference['counts']}")
    groups, expected = summary["groups"], reference["groups"]
    if groups.keys() != expected.keys():
        raise ShardsDisagree(f"{what}: groups differ: {sorted(groups.keys() ^ expected.keys())}")
    worst = 0.0
    for key, (n, mean) in groups.items():
        if n != expected[key][0]:
            raise ShardsDisagree(f"{what}: {key}: {n} annotated traces, not {expected[key][0]}")
        worst = max(worst, abs(mean - expected[key][1]))
    for metric in METRICS:
        worst = max(worst, abs(summary["means"][metric] - reference["means"][metric]))
    if worst > EQUAL:
        raise ShardsDisagree(f"{what}: means differ from the reference by {worst:.3g}")
    return worst


def _mib(procs: list[Process]) -> str:
    return ", ".join(f"{p.peak_rss_mib:,.0f}" for p in procs)


def table_lines(size: int, runs: list[Configuration]) -> list[str]:
    """The results table (shard wall and RSS: the largest, then each shard's in brackets)."""
    lines = [
        "| shards | wall s (first start to last end) | slowest shard s (each) "
        "| max shard peak RSS MiB (each) | merge s: step (process) | merge peak RSS MiB "
        "| shard output MB (per 1M traces) | means equal to 1 shard (max abs diff) | machine |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        walls = [p.wall_s for p in run.shard_procs]
        machine = machine_note(**waits(*run.shard_procs, run.merge_proc))
        mb = run.output_bytes / 1e6
        lines.append(
            f"| {run.shards} | {run.wall_s:.1f} | {max(walls):.1f} "
            f"({', '.join(f'{w:.1f}' for w in walls)}) "
            f"| {max(p.peak_rss_mib for p in run.shard_procs):,.0f} ({_mib(run.shard_procs)}) "
            f"| {run.merge['step_s']:.1f} ({run.merge_proc.wall_s:.1f}) "
            f"| {run.merge_proc.peak_rss_mib:,.0f} | {mb:,.1f} ({mb * 1e6 / size:,.1f}) "
            f"| yes ({run.max_abs_diff:.1e}) | {machine} |"
        )
    return lines


def detail_lines(size: int, runs: list[Configuration]) -> list[str]:
    """Where each configuration's time went, in words."""
    lines = []
    for run in runs:
        steps = [r["step_s"] for r in run.shard_results]
        imports = [r["import_s"] for r in run.shard_results]
        merged = run.merge["merged"]
        lines.append(
            f"- {run.shards} shard(s), files per shard {run.files_per_shard}, DuckDB share "
            f"{run.shard_results[0]['share']}: `run_shard` {', '.join(f'{s:.1f}' for s in steps)}"
            f" s (imports {max(imports):.1f} s at most); merge: open {run.merge['open_s']:.2f} s, "
            f"`merge_shards` {run.merge['merge_s']:.1f} s, close (checkpoint) "
            f"{run.merge['close_s']:.1f} s, imports {run.merge['import_s']:.1f} s; the merge per "
            f"1M traces {run.merge['step_s'] * 1e6 / size:.1f} s; {merged['read']:,} read, "
            f"{merged['valid']:,} valid, {merged['repeated_across_shards']} repeated across "
            f"shards; rows {run.summary['counts']}; shard output MB per 1M traces: "
            + ", ".join(f"{k} {v / size:.1f}" for k, v in run.output_files.items())
            + "."
        )
    return lines


def _reference(runs: list[Configuration]) -> Configuration:
    return next((run for run in runs if run.shards == 1), runs[0])


def checked_runs(
    size: int, seed: int, shard_counts: list[int], files: int, data_root: Path | None = None
) -> tuple[dict[str, Any], list[Configuration], float]:
    """The day of `size` traces as `files` files (the `data` worker's result: its store, root
    and pytrec_eval's means) and each shard count's run on it (`configuration`), every run's
    merged rows checked against the 1-shard run's (else the first's) and its means against
    pytrec_eval's; the day, the runs and the largest difference from pytrec_eval's means.
    ShardsDisagree or MeansDisagree when a count or a mean differs."""
    job = {"size": size, "seed": seed, "files": files, "data_root": data_root and str(data_root)}
    ds, _ = run_worker("data", job)
    store, work = Path(ds["store"]), Path(ds["root"]) / "shards_runs"
    runs = [configuration(ds["day"], store, work, count) for count in shard_counts]
    reference = _reference(runs)
    for run in runs:
        if run.summary["counts"]["traces"] + run.summary["counts"]["quarantine"] != size:
            raise ShardsDisagree(f"{run.shards} shards: {run.summary['counts']}, not {size} read")
        run.max_abs_diff = compare(run.summary, reference.summary, f"{run.shards} shards")
    oracle_diff = max(
        max_abs_diff(run.summary["means"], ds["oracle"], f"{run.shards} shards at {size}")
        for run in runs
    )
    return ds, runs, oracle_diff


def measure(
    size: int,
    seed: int,
    shard_counts: list[int],
    files: int,
    single: bool,
    data_root: Path | None = None,
) -> tuple[list[Configuration], list[str]]:
    """Every shard count at `size`, checked against the 1-shard run (else the first) and
    pytrec_eval; the runs and the notes below the table."""
    ds, runs, oracle_diff = checked_runs(size, seed, shard_counts, files, data_root)
    store, work = Path(ds["store"]), Path(ds["root"]) / "shards_runs"
    reference = _reference(runs)
    notes = [
        f"The day: {size:,} traces as {files} JSON-lines.gz files of consecutive records "
        f"({ds['store_bytes'] / 1e6:,.0f} MB). Means: every run's per-metric means "
        f"equal pytrec_eval's to {oracle_diff:.1e}; the merged rows compared with the "
        f"{reference.shards}-shard run's (counts exactly, means per segment, variant and metric "
        f"and per metric to {EQUAL:g}).",
        "",
        *detail_lines(size, runs),
    ]
    defs, defs_proc = run_worker("definitions", {})
    notes.append(
        f"- A multiprocess step process also holds Dagster and the definitions: importing them "
        f"alone, {defs['import_s']:.1f} s and a peak RSS of {defs_proc.peak_rss_mib:,.0f} MiB."
    )
    if single:
        result, proc, summary = single_process(ds["day"], store, work)
        diff = compare(summary, reference.summary, "single process")
        steps = ", ".join(f"`{k}` {v:.1f} s" for k, v in result["steps"].items())
        notes.append(
            f"- One process, the `traces`, `labels` and `query_metrics` assets' functions on the "
            f"same store (id lists not stored, as in the shards): {result['step_s']:.1f} s "
            f"({steps}), the process {proc.wall_s:.1f} s, peak RSS {proc.peak_rss_mib:,.0f} MiB; "
            f"its means equal the {reference.shards}-shard run's to {diff:.1e}; "
            f"{machine_note(proc.io_stall_s, proc.steal_s)}."
        )
    return runs, notes


def _engine_version() -> str:
    """`run_all.engine_version()`, asked of a fresh process: importing it here would load
    DuckDB, NumPy and pyarrow into this process, whose size its children's peak RSS includes."""
    code = "from bench.run_all import engine_version; print(engine_version())"
    proc = run_process([sys.executable, "-c", code])
    return proc.stdout.strip() or "version unknown"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker(argv[1], Path(argv[2]), Path(argv[3]))
        return
    args = parse_args(
        __doc__.splitlines()[0],
        argv,
        {
            "--shards": {"default": "1,2,4", "help": "comma-separated shard counts"},
            "--files": {"type": int, "default": 16, "help": "the day's JSON-lines.gz files"},
            "--single": {"action": "store_true", "help": "also the day in one process"},
        },
    )
    shard_counts = [int(n) for n in str(args.shards).split(",") if n]
    for size in args.sizes:
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        runs, notes = measure(size, args.seed, shard_counts, args.files, args.single)
        lines = [
            f"# A sharded day of {size:,} traces: {', '.join(map(str, shard_counts))} shard "
            f"processes at once, then the merge, on {os.cpu_count()} cores",
            "",
            f"`python bench/shards.py {' '.join(argv)}`, started {started}; "
            f"{_engine_version()}. Each shard, the merge: a fresh process (wall time and peak "
            "RSS from wait4); the merge's step is its connection, `merge_shards` (with its "
            "counts) and the close.",
            "",
            *table_lines(size, runs),
            "",
            *notes,
        ]
        write_report(f"shards_n{size}.md", lines)
        if args.json is not None:  # every measured process, as measured
            args.json.write_text(json.dumps([asdict(run) for run in runs], indent=2))


if __name__ == "__main__":
    main()
