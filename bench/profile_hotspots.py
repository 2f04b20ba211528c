"""Where the time goes: engine stages, CTE-by-CTE cost of the two heavy statements, EXPLAIN
ANALYZE of the metric SQL, and optionally py-spy over the `evaluate` command.

    python bench/profile_hotspots.py --size 100000 [--py-spy]
    python bench/profile_hotspots.py --size 10000 --nightly

Writes `bench/results/profile_n<N>.md` (`profile_nightly_n<N>.md` with --nightly) and the EXPLAIN
ANALYZE text beside it; raw py-spy samples go to `bench/data/`. A statement "cut at a CTE" is the
statement ending in `select * from <cte>`, materialised into a temp table so every column is
really computed (cuts are not additive: wide list columns cost to write, and the optimizer drops
what a cut no longer needs); DuckDB's JSON profile gives the per-operator times.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import METRICS, RESULTS, write_report
from bench.generate import DATA_ROOT, Dataset, dataset

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

T = TypeVar("T")


def cte_names(sql: str) -> list[str]:
    return re.findall(r"^([a-z_]+) as \($", sql, flags=re.MULTILINE)


def cut_at(sql: str, cte: str) -> str:
    """The statement with its last `select * from final` replaced by a select of `cte`."""
    head, _, _ = sql.rpartition("select * from final")
    return head + f"select * from {cte}"


def cte_costs(conn, sql: str, params: dict, prefix: str = "") -> list[tuple[str, float]]:
    """(cte, seconds) of materialising the statement cut at each CTE. Not additive: a cut
    materialises every column of its CTE (wide lists cost to write), and the optimizer drops
    what a later cut no longer needs."""
    out = []
    for name in cte_names(sql):
        statement = cut_at(sql, name)
        used = {k: v for k, v in params.items() if f"${k}" in statement}
        start = time.perf_counter()
        conn.execute(f"create or replace temp table __cut as {prefix}{statement}", used)
        seconds = time.perf_counter() - start
        conn.execute("drop table __cut")
        out.append((name, seconds))
    return out


def operator_table(conn, sql: str, params: dict, top: int = 10) -> list[str]:
    """Run `sql` under DuckDB's JSON profiler; the operators taking the most time."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        conn.execute("pragma enable_profiling = 'json'")
        conn.execute(f"pragma profiling_output = '{path}'")
        conn.execute(sql, params).fetchall()
        conn.execute("pragma disable_profiling")
        tree = json.loads(path.read_text())
    found: list[tuple[float, str, int, str]] = []

    def walk(node: dict) -> None:
        info = node.get("extra_info") or {}
        detail = info.get("Projections") or info.get("Conditions") or info.get("Aggregates") or ""
        if isinstance(detail, list):
            detail = ", ".join(str(d) for d in detail)
        detail = str(detail).replace("|", "/").replace("`", "'")
        found.append(
            (node.get("timing", 0.0), node.get("name", "?"), node.get("intermediate_rows", 0),
             detail[:140])
        )  # fmt: skip
        for child in node.get("children", []):
            walk(child)

    for root in tree.get("operator", []):
        walk(root)
    total = sum(f[0] for f in found) or 1.0
    lines = ["| operator | rows out | s | share | detail |", "|---|---|---|---|---|"]
    for seconds, name, rows, detail in sorted(found, reverse=True)[:top]:
        lines.append(f"| {name} | {rows:,} | {seconds:.2f} | {seconds / total:.0%} | `{detail}` |")
    return lines


def stages(
    ds: Dataset,
) -> tuple[list[tuple[str, float]], tuple[duckdb.DuckDBPyConnection, pa.Table, str]]:
    """The steps of `run_evaluation` on the JSONL.gz file, timed one by one."""
    import pyarrow as pa

    from retrieval_pipeline.ingest.files import discover
    from retrieval_pipeline.ingest.jsonl import jsonl_file_pieces
    from retrieval_pipeline.metrics import parse_metrics
    from retrieval_pipeline.warehouse.connection import connect
    from retrieval_pipeline.warehouse.corpus import load_corpus
    from retrieval_pipeline.warehouse.ingestion import _insert_piece, create_seen_trace_ids
    from retrieval_pipeline.warehouse.sql import load_sql
    from retrieval_pipeline.warehouse.steps import (
        build_labels,
        compute_query_metrics,
        trace_metrics,
    )
    from retrieval_pipeline.warehouse.validation import stage_records

    timings: list[tuple[str, float]] = []
    day = ds.day

    def timed(name: str, fn: Callable[[], T]) -> T:
        start = time.perf_counter()
        value = fn()
        timings.append((name, time.perf_counter() - start))
        return value

    conn = connect(":memory:")
    files = discover([ds.jsonl_gz])
    pieces = timed(
        "read + gunzip + split lines into Arrow (ingest.jsonl)",
        lambda: [p for order, f in enumerate(files) for p in jsonl_file_pieces(f.path, order)],
    )
    raw = pa.concat_tables([piece.records for piece in pieces])
    # the JSON lane, which reads any record (a plain piece goes through the plain lane)
    stg = load_sql("stg_trace_fields")
    create_seen_trace_ids(conn)
    staged = timed(
        "validate (both lanes, sql/stg_trace_records.sql) + repeated ids (keep_first_occurrences)",
        lambda: pa.concat_tables(stage_records(conn, piece, None) for piece in pieces),
    )
    conn.register("stg_trace_records", staged)
    # a new day in a new database: its rows go straight in (ingestion._piece_writer)
    timed("insert into traces and quarantine", lambda: _insert_piece(conn))
    timed("ingest counts", lambda: conn.execute(load_sql("agg_ingest_counts")).fetchall())
    conn.unregister("stg_trace_records")
    timed("load corpus (1M docs)", lambda: load_corpus(conn, ds.corpus))
    timed("labels + stale (sql/int_labels.sql)", lambda: build_labels(conn, day, day, True))
    metrics = parse_metrics(list(METRICS))
    timed(
        "metrics written (sql/fct_query_metrics.sql, the nightly's)",
        lambda: compute_query_metrics(conn, metrics, day, day, "linear", 1.0),
    )
    timed(
        "metrics into the per-trace table (trace_metrics, evaluate's)",
        lambda: trace_metrics(conn, metrics, day, day, "linear", 1.0),
    )
    return timings, (conn, raw, stg)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--py-spy", action="store_true")
    parser.add_argument(
        "--nightly", action="store_true", help="only py-spy one nightly partition at --size"
    )
    args = parser.parse_args(argv)
    if args.nightly:
        nightly_main(args.size, args.seed)
        return
    ds = dataset(args.size, args.seed)
    from retrieval_pipeline.metrics import DEFAULT_GMAX, parse_metrics
    from retrieval_pipeline.warehouse.sql import load_sql
    from retrieval_pipeline.warehouse.steps import metric_params

    lines = [f"# Profile at {args.size:,} traces", ""]
    timings, (conn, raw, stg) = stages(ds)
    total = sum(t for _, t in timings)
    lines += ["## `run_evaluation` stages (JSONL.gz, corpus, linear gain)", ""]
    lines += ["| stage | s | share |", "|---|---|---|"]
    lines += [f"| {n} | {t:.2f} | {t / total:.0%} |" for n, t in timings]
    lines += [f"| total | {total:.2f} | |", ""]

    conn.register("raw_records", raw)
    lines += ["## `sql/stg_trace_fields.sql` (the JSON lane), cut at each CTE", ""]
    lines += ["| statement cut at CTE | s (materialised) |", "|---|---|"]
    for name, seconds in cte_costs(conn, stg, {}):
        lines.append(f"| {name} | {seconds:.2f} |")
    conn.unregister("raw_records")

    day = ds.day
    fct = load_sql("fct_query_metrics")
    # the parameters the nightly binds (steps.compute_query_metrics), with the default top grade
    metrics = parse_metrics(list(METRICS))
    params = metric_params(metrics, day, day, "linear", 1.0, DEFAULT_GMAX, judged_only=False)
    lines += ["", "## `sql/fct_query_metrics.sql`, cut at each CTE", ""]
    lines += ["| statement cut at CTE | s (materialised) |", "|---|---|"]
    for name, seconds in cte_costs(conn, fct, params):
        lines.append(f"| {name} | {seconds:.2f} |")
    lines += ["", "DuckDB's profile of `create table as <metric SQL>` (top operators):", ""]
    lines += operator_table(conn, "create or replace temp table __p as " + fct, params)
    lines += ["", "DuckDB's profile of `sql/stg_trace_fields.sql` (top operators):", ""]
    conn.register("raw_records", raw)
    stg_sql = "create or replace temp table __p as " + stg
    lines += operator_table(conn, stg_sql, {})
    conn.unregister("raw_records")
    plan = conn.execute("explain analyze " + fct, params).fetchall()
    explain = "\n".join(str(row[-1]) for row in plan)
    explain_path = RESULTS / f"explain_analyze_fct_query_metrics_n{args.size}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    explain_path.write_text(explain)
    lines += [
        "",
        f"EXPLAIN ANALYZE of the metric SQL: `{explain_path.relative_to(RESULTS.parent.parent)}`",
    ]
    conn.close()

    if args.py_spy:
        lines += ["", *py_spy(ds, args.size)]
    write_report(f"profile_n{args.size}.md", lines)


def py_spy(ds: Dataset, size: int) -> list[str]:
    """Sample the `evaluate` command with py-spy (native frames too)."""
    cli = Path(sys.executable).parent / "retrieval-pipeline"
    cmd = [
        str(cli), "evaluate", str(ds.jsonl_gz), "--corpus", str(ds.corpus),
        "--metrics", ",".join(METRICS), "--gain", "linear", "--format", "json",
    ]  # fmt: skip
    return sampled(cmd, None, f"evaluate_n{size}", "`retrieval-pipeline evaluate`", native=True)


def py_spy_nightly(ds: Dataset, size: int) -> list[str]:
    """Sample one nightly partition (the `dg.materialize` worker) with py-spy."""
    from bench.nightly import prepare

    _, env = prepare(ds, "nightly_py_spy")
    db = env["RETRIEVAL_PIPELINE_DB"]
    cmd = [
        sys.executable, "-m", "bench.workers", "nightly", "--day", ds.day.isoformat(),
        "--db", db, "--result", str(DATA_ROOT / "py_spy_nightly_result.json"),
    ]  # fmt: skip
    return sampled(cmd, env, f"nightly_n{size}", "one nightly partition (`dg.materialize`)")


def sampled(
    cmd: list[str], env: dict[str, str] | None, name: str, title: str, native: bool = False
) -> list[str]:
    """Run `cmd` under py-spy and sum the samples by innermost project frame and by leaf."""
    import os

    spy = Path(sys.executable).parent / "py-spy"
    raw = DATA_ROOT / f"py_spy_{name}.txt"  # raw samples: large, kept out of git
    options = ["--native"] if native else []
    full = [str(spy), "record", *options, "--rate", "50", "--format", "raw", "-o", str(raw), "--"]
    run_env = {**os.environ, "PYTHONPATH": str(RESULTS.parent.parent), **(env or {})}
    subprocess.run([*full, *cmd], check=True, capture_output=True, env=run_env)
    python_frames: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf[frames[-1][:110]] += n
        py = [f for f in frames if ".py:" in f and "retrieval_pipeline" in f]
        if py:
            python_frames[py[-1][:110]] += n
    lines = [f"## py-spy of {title} ({total} samples at 50 Hz)", ""]
    lines += ["Innermost project frame (inclusive):", "", "| frame | share |", "|---|---|"]
    lines += [f"| `{f}` | {n / total:.0%} |" for f, n in python_frames.most_common(10)]
    lines += ["", "Leaf frames (self time):", "", "| frame | share |", "|---|---|"]
    lines += [f"| `{f}` | {n / total:.0%} |" for f, n in leaf.most_common(10)]
    return lines


def nightly_main(size: int, seed: int) -> None:
    ds = dataset(size, seed)
    lines = [
        f"# Profile of one nightly partition at {size:,} traces",
        "",
        *py_spy_nightly(ds, size),
    ]
    write_report(f"profile_nightly_n{size}.md", lines)


if __name__ == "__main__":
    main()
