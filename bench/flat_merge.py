"""A merge that does not grow with the day (issue 33 item 4), measured as a design before it is
wired: the shards' outputs reduced by a hash of `trace_id`, and the merge adding per-bucket
sufficient statistics.

    python bench/flat_merge.py --sizes 1000000,10000000 [--shards 2] [--buckets 8] [--files 16]

The rows-form merge (`warehouse/shards.merge_shards`) reads every shard's valid ids to find the
`trace_id`s repeated across shards, then copies every per-trace row into the warehouse: linear in
the day (7.3-7.9 s per 1M traces, `results/guard.json`). The form measured here splits that work:

1. **scatter**, in each shard after its scoring: its trace rows (segment, variant, whether
   annotated and judged, file order and line) and its annotated metric values, each written as
   B Parquet buckets by `hash(trace_id) % B`, so every occurrence of a `trace_id` falls in one
   bucket whatever shard read it;
2. **reduce**, B steps that can run at once, one per bucket: the bucket's rows of every shard,
   each `trace_id`'s first valid record kept by (file order, line), as one process keeps it;
   per segment, variant and metric the sufficient statistics of the kept values: count, mean,
   sum of squared deviations (M2), NaN count, smallest, largest; per segment and variant the
   traces, annotated and judged counts;
3. **merge**: the B buckets' statistics combined exactly (Chan et al.: the pooled mean, then
   M2 = sum of each part's M2 + n (part mean - pooled mean)^2), per segment and variant and over
   every segment: what `segment_metrics` needs (traces, annotated, judged, n, mean, sd). It reads
   B x segments x variants x metrics rows, whatever the traces.

The day: `bench/shards.py`'s sharded day at 1M (its shards run, checked against pytrec_eval and
the 1-shard run), with 1,000 valid records of shard 0 repeated at the end of shard 1's files,
so that the reduce has repeats across shards to drop; a larger size is that day K times with
`trace_id`s made distinct per copy (each copy's files after the one before). Truth: the same
numbers computed from every shard's rows at once (the repeats dropped with one window, the
groups with `avg` and `stddev_samp`): counts exactly, means and standard deviations to 1e-12.
Each phase is timed in its own fresh process (wall and peak RSS); the scatter and reduce figures
are the sum over shards and buckets and the largest one. Writes `results/flat_merge.md`
(`--json PATH`: the figures too); asserts nothing about speed.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Process, machine_note, run_job, script_args, write_report

EQUAL = 1e-12
INJECTED = 1_000  # shard 0's valid records repeated in shard 1
ALL = "__all__"
BASE = 1_000_000


# the workers: `python -m bench.flat_merge worker NAME JOB RESULT`, each in a fresh process
def _connect() -> Any:
    import duckdb

    return duckdb.connect(config={"preserve_insertion_order": False})


def _replicate(job: dict[str, Any]) -> dict[str, Any]:
    """The day's shard outputs, `copies` times, with INJECTED of shard 0's records repeated at
    the end of shard 1's files: one folder per shard with `traces`, `valid_ids` and
    `query_metrics`."""
    conn = _connect()
    out, copies, files = Path(job["out"]), int(job["copies"]), int(job["files"])
    shards = [Path(f) for f in job["shards"]]
    renamed = "if(copy = 0, trace_id, trace_id || '~' || copy) as trace_id"
    # each copy's files come after the copy before's: valid_ids carries the file order
    selects = {
        "traces": (f"* exclude (trace_id), {renamed}", {"copies": copies}),
        "valid_ids": (
            f"* exclude (trace_id, file_order), {renamed},"
            " file_order + copy * $files as file_order",
            {"copies": copies, "files": files},
        ),
        "query_metrics": (f"* exclude (trace_id), {renamed}", {"copies": copies}),
    }
    for index, folder in enumerate(shards):
        target = out / f"s{index}"
        target.mkdir(parents=True)
        for table, (select, params) in selects.items():
            source = f"read_parquet('{folder / table}.parquet')"  # bench paths, not user input
            conn.execute(
                f"copy (select {select} from {source}, range($copies) as copies(copy))"
                f" to '{target / table}.parquet' (format parquet)",
                params,
            )
    # shard 1 holds INJECTED of shard 0's first valid records again, in a file after every other
    first, second = out / "s0", out / "s1"
    conn.execute(
        f"create temp table injected as select a.trace_id from read_parquet('{first}/valid_ids"
        f".parquet') as a anti join read_parquet('{second}/valid_ids.parquet') as b"
        f" on a.trace_id = b.trace_id order by a.file_order, a.source_line limit {INJECTED}"
    )
    for table in selects:
        columns = "* exclude (file_order), $last as file_order" if table == "valid_ids" else "*"
        conn.execute(
            f"copy (select {columns} from read_parquet('{first / table}.parquet')"
            f" semi join injected using (trace_id))"
            f" to '{second / table}_injected.parquet' (format parquet)",
            {"last": files * copies} if table == "valid_ids" else {},
        )
    ((injected,),) = conn.execute("select count(*) from injected").fetchall()
    return {"rows": _rows(conn, out), "injected": int(injected)}


def _rows(conn: Any, out: Path) -> dict[str, int]:
    counts = {}
    for table in ("traces", "valid_ids", "query_metrics"):
        ((rows,),) = conn.execute(
            f"select count(*) from read_parquet('{out}/*/{table}*.parquet')"
        ).fetchall()
        counts[table] = int(rows)
    return counts


def _scatter(job: dict[str, Any]) -> dict[str, Any]:
    """One shard's rows written as `buckets` buckets by hash(trace_id)."""
    conn = _connect()
    folder, out, shard = Path(job["folder"]), Path(job["out"]), int(job["shard"])
    params = {"shard": shard, "buckets": int(job["buckets"])}
    for name in ("traces", "values"):
        (out / name).mkdir(parents=True, exist_ok=True)
    conn.execute(
        f"copy (select $shard as shard, t.trace_id, v.file_order, v.source_line, t.segment,"
        f" t.variant, t.is_judged, coalesce(a.is_annotated, false) as is_annotated,"
        f" hash(t.trace_id) % $buckets as bucket"
        f" from read_parquet('{folder}/traces*.parquet') as t"
        f" inner join read_parquet('{folder}/valid_ids*.parquet') as v using (trace_id)"
        f" left join (select trace_id, bool_or(is_annotated) as is_annotated"
        f" from read_parquet('{folder}/query_metrics*.parquet') group by trace_id) as a"
        f" using (trace_id))"
        f" to '{out}/traces/shard={shard}' (format parquet, partition_by (bucket))",
        params,
    )
    conn.execute(
        f"copy (select $shard as shard, trace_id, segment, variant, metric, value,"
        f" hash(trace_id) % $buckets as bucket from read_parquet('{folder}/query_metrics*.parquet')"
        f" where is_annotated and value is not null)"
        f" to '{out}/values/shard={shard}' (format parquet, partition_by (bucket))",
        params,
    )
    return {}


KEPT = """
create temp table kept as
select shard, trace_id, segment, variant, is_judged, is_annotated
from read_parquet($traces, hive_partitioning = false)
qualify row_number() over (partition by trace_id order by file_order, source_line) = 1
"""
STATS = """
select v.segment, v.variant, v.metric,
    count(v.value) filter (where not isnan(v.value)) as n,
    coalesce(avg(v.value) filter (where not isnan(v.value)), 0) as mean,
    coalesce(var_pop(v.value) filter (where not isnan(v.value)), 0)
        * count(v.value) filter (where not isnan(v.value)) as m2,
    count(*) filter (where isnan(v.value)) as nan,
    min(v.value) filter (where not isnan(v.value)) as low,
    max(v.value) filter (where not isnan(v.value)) as high
from read_parquet($values, hive_partitioning = false) as v
semi join kept on v.shard = kept.shard and v.trace_id = kept.trace_id
group by all
"""
COUNTS = """
select segment, variant, count(*) as traces,
    count(*) filter (where is_annotated) as annotated,
    count(*) filter (where is_annotated and not is_judged) as judged
from kept group by all
"""


def _reduce(job: dict[str, Any]) -> dict[str, Any]:
    """One bucket of every shard: the first occurrence of each trace_id kept, its statistics."""
    conn = _connect()
    out, bucket = Path(job["out"]), int(job["bucket"])
    traces = [str(p) for p in sorted(out.glob(f"scatter/traces/*/bucket={bucket}/*.parquet"))]
    values = [str(p) for p in sorted(out.glob(f"scatter/values/*/bucket={bucket}/*.parquet"))]
    target = out / "reduced"
    target.mkdir(exist_ok=True)
    conn.execute(KEPT, {"traces": traces})
    for name, statement, params in (
        ("stats", STATS, {"values": values}),
        ("counts", COUNTS, {}),
    ):
        relation = conn.sql(statement, params=params)
        relation.write_parquet(str(target / f"{name}_{bucket}.parquet"))
    ((kept,),) = conn.execute("select count(*) from kept").fetchall()
    ((read,),) = conn.execute(
        "select count(*) from read_parquet($traces, hive_partitioning = false)",
        {"traces": traces},
    ).fetchall()
    return {"kept": int(kept), "repeated": int(read) - int(kept)}


MERGE = f"""
with parts as (
    select * from read_parquet($stats) where n > 0
),
both_levels as (
    select segment, variant, metric, n, mean, m2, nan, low, high from parts
    union all
    select '{ALL}', variant, metric, n, mean, m2, nan, low, high from parts
),
pooled as (
    select segment, variant, metric, sum(n) as n, sum(n * mean) / sum(n) as mean,
        sum(nan) as nan, min(low) as low, max(high) as high
    from both_levels group by all
),
spread as (
    select b.segment, b.variant, b.metric,
        sum(b.m2 + b.n * (b.mean - p.mean) * (b.mean - p.mean)) as m2
    from both_levels as b inner join pooled as p using (segment, variant, metric)
    group by all
),
counts as (
    select segment, variant, sum(traces) as traces, sum(annotated) as annotated,
        sum(judged) as judged
    from read_parquet($counts) group by grouping sets ((segment, variant), (variant))
)
, final as (
    select coalesce(c.segment, '{ALL}') as segment, c.variant, p.metric, c.traces, c.annotated,
        c.judged, p.n, if(p.nan > 0, 'nan'::double, p.mean) as mean,
        if(p.nan > 0, 'nan'::double, sqrt(s.m2 / nullif(p.n - 1, 0))) as sd, p.low, p.high
    from counts as c
    left join pooled as p on coalesce(c.segment, '{ALL}') = p.segment and c.variant = p.variant
    left join spread as s
        on p.segment = s.segment and p.variant = s.variant and p.metric = s.metric
)
select * from final order by all
"""


def _merge(job: dict[str, Any]) -> dict[str, Any]:
    """The buckets' statistics added: the day's segment statistics."""
    import time

    start = time.perf_counter()
    conn = _connect()
    reduced = Path(job["out"]) / "reduced"
    stats = [str(p) for p in sorted(reduced.glob("stats_*.parquet"))]
    counts = [str(p) for p in sorted(reduced.glob("counts_*.parquet"))]
    rows = conn.execute(MERGE, {"stats": stats, "counts": counts}).fetchall()
    seconds = time.perf_counter() - start
    parts = conn.execute("select count(*) from read_parquet($s)", {"s": stats}).fetchone()
    return {"rows": [list(r) for r in rows], "merge_s": seconds, "parts": int(parts[0])}


TRUTH = f"""
with kept as (
    select trace_id, shard from (
        select v.trace_id, v.shard, row_number() over (
            partition by v.trace_id order by v.file_order, v.source_line) as occurrence
        from valid_ids as v
    ) where occurrence = 1
),
traces as (
    select t.segment, t.variant, t.is_judged, t.trace_id, t.shard,
        coalesce(a.is_annotated, false) as is_annotated
    from trace_rows as t
    semi join kept on t.trace_id = kept.trace_id and t.shard = kept.shard
    left join (select trace_id, shard, bool_or(is_annotated) as is_annotated
        from metric_rows group by all) as a using (trace_id, shard)
),
counts as (
    select coalesce(segment, '{ALL}') as segment, variant, count(*) as traces,
        count(*) filter (where is_annotated) as annotated,
        count(*) filter (where is_annotated and not is_judged) as judged
    from traces group by grouping sets ((segment, variant), (variant))
),
values as (
    select m.segment, m.variant, m.metric, m.value from metric_rows as m
    semi join kept on m.trace_id = kept.trace_id and m.shard = kept.shard
    where m.is_annotated and m.value is not null
),
stats as (
    select coalesce(segment, '{ALL}') as segment, variant, metric,
        count(value) filter (where not isnan(value)) as n,
        if(count(*) filter (where isnan(value)) > 0, 'nan'::double,
            avg(value) filter (where not isnan(value))) as mean,
        if(count(*) filter (where isnan(value)) > 0, 'nan'::double,
            stddev_samp(value) filter (where not isnan(value))) as sd,
        min(value) filter (where not isnan(value)) as low,
        max(value) filter (where not isnan(value)) as high
    from values group by grouping sets ((segment, variant, metric), (variant, metric))
)
select c.segment, c.variant, s.metric, c.traces, c.annotated, c.judged, s.n, s.mean, s.sd,
    s.low, s.high
from counts as c left join stats as s using (segment, variant)
order by all
"""


def _truth(job: dict[str, Any]) -> dict[str, Any]:
    """The same numbers from every shard's rows at once (the rows form's rule and aggregates)."""
    conn = _connect()
    out = Path(job["out"]) / "day"
    shard_of = "cast(regexp_extract(filename, '/s([0-9]+)/', 1) as integer)"
    # each row's shard from its folder (the injected rows carry shard 0's own column)
    for view, table in (
        ("valid_ids", "valid_ids"),
        ("trace_rows", "traces"),
        ("metric_rows", "query_metrics"),
    ):
        conn.execute(
            f"create view {view} as select * exclude (shard, filename), {shard_of} as shard"
            f" from read_parquet('{out}/*/{table}*.parquet', filename = true,"
            f" hive_partitioning = false)"
        )
    return {"rows": [list(r) for r in conn.execute(TRUTH).fetchall()]}


WORKERS = {
    "replicate": _replicate,
    "scatter": _scatter,
    "reduce": _reduce,
    "merge": _merge,
    "truth": _truth,
}


def run_worker(name: str, job: dict[str, Any]) -> tuple[dict[str, Any], Process]:
    return run_job("bench.flat_merge", name, job)


class StatisticsDisagree(AssertionError):
    """The merged statistics differ from the rows' own."""


def compare(merged: list[list[Any]], truth: list[list[Any]]) -> float:
    """Counts exactly, the rest to EQUAL relative; the largest relative difference."""
    if len(merged) != len(truth):
        raise StatisticsDisagree(f"{len(merged)} merged rows, {len(truth)} from the rows")
    worst = 0.0
    for got, want in zip(merged, truth, strict=True):
        if got[:7] != want[:7]:
            raise StatisticsDisagree(f"counts differ: {got[:7]} against {want[:7]}")
        for a, b in zip(got[7:], want[7:], strict=True):
            if a is None or b is None or a != a or b != b:
                if not ((a is None and b is None) or (a != a and b != b)):
                    raise StatisticsDisagree(f"{got} against {want}")
                continue
            relative = abs(a - b) / max(1.0, abs(b))
            if relative > EQUAL:
                raise StatisticsDisagree(f"{got} against {want}: {relative:.1e}")
            worst = max(worst, relative)
    return worst


def measure_size(
    size: int, base_size: int, shard_folders: list[str], shards: int, buckets: int,
    work: Path, files: int,
) -> dict[str, Any]:  # fmt: skip
    """One size: the day replicated, scattered, reduced and merged, checked against the rows."""
    out = work / f"n{size}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    copies = max(1, size // base_size)
    day, _ = run_worker(
        "replicate",
        {"out": str(out / "day"), "copies": copies, "files": files, "shards": shard_folders},
    )
    scatter = [
        run_worker(
            "scatter",
            {"folder": str(out / "day" / f"s{i}"), "out": str(out / "scatter"),
             "shard": i, "buckets": buckets},
        )[1]
        for i in range(shards)
    ]  # fmt: skip
    reduce = [run_worker("reduce", {"out": str(out), "bucket": b}) for b in range(buckets)]
    merged, merge_proc = run_worker("merge", {"out": str(out)})
    truth, _ = run_worker("truth", {"out": str(out)})
    worst = compare(merged["rows"], truth["rows"])
    repeated = sum(r["repeated"] for r, _ in reduce)
    if repeated < day["injected"]:
        raise StatisticsDisagree(f"{repeated} repeats dropped, {day['injected']} injected")
    return {
        "size": size,
        "traces": day["rows"]["traces"],
        "copies": copies,
        "buckets": buckets,
        "scatter": [p.wall_s for p in scatter],
        "scatter_rss": [p.peak_rss_mib for p in scatter],
        "reduce": [p.wall_s for _, p in reduce],
        "reduce_rss": [p.peak_rss_mib for _, p in reduce],
        "repeated": repeated,
        "merge_s": merge_proc.wall_s,
        "merge_statement_s": merged["merge_s"],
        "merge_rss": merge_proc.peak_rss_mib,
        "merge_parts": merged["parts"],
        "rows": len(merged["rows"]),
        "worst": worst,
        "note": machine_note(merge_proc.io_stall_s, merge_proc.steal_s),
    }


def table_lines(figures: list[dict[str, Any]], rows_merge: dict[str, Any]) -> list[str]:
    lines = [
        "| day | scatter, all shards (largest) | reduce, all buckets (largest) | merge process"
        " (its statement) | merge peak RSS | statistics rows read | repeats dropped |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in figures:
        lines.append(
            f"| {f['traces']:,} traces | {sum(f['scatter']):.1f} s ({max(f['scatter']):.1f})"
            f" | {sum(f['reduce']):.1f} s ({max(f['reduce']):.1f}) | {f['merge_s']:.2f} s"
            f" ({f['merge_statement_s']:.3f}) | {f['merge_rss']:,.0f} MiB | {f['merge_parts']:,}"
            f" | {f['repeated']:,} |"
        )
    lines += [
        "",
        f"The rows-form merge of the 1M day in the same run (`merge_shards` with its counts,"
        f" {rows_merge['shards']} shards): {rows_merge['merge_s']:.2f} s,"
        f" peak {rows_merge['rss']:,.0f} MiB.",
    ]
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = script_args(
        WORKERS,
        __doc__.splitlines()[0],
        argv,
        {
            "--shards": {"type": int, "default": 2, "help": "shards of the 1M day"},
            "--buckets": {"type": int, "default": 8, "help": "reduce buckets"},
            "--files": {"type": int, "default": 16, "help": "the day's JSON-lines.gz files"},
            "--data-root": {"type": Path, "default": None},
        },
    )
    if args is None:  # a worker, done
        return
    from bench.shards import checked_runs

    sizes: list[int] = args.sizes
    base_size = min(BASE, min(sizes))
    ds, runs, oracle_diff = checked_runs(
        base_size, args.seed, [args.shards], args.files, args.data_root
    )
    (run,) = runs
    root = Path(ds["root"]) / "shards_runs" / f"shards{args.shards}" / "shards"
    shard_folders = sorted(
        (str(p) for p in root.glob("date=*/run=*/shard=*")),
        key=lambda f: int(f.rsplit("shard=", 1)[1].split("-")[0]),
    )
    work = Path(ds["root"]) / "flat_merge"
    figures = [
        measure_size(size, base_size, shard_folders, args.shards, args.buckets, work, args.files)
        for size in sizes
    ]
    rows_merge = {
        "shards": args.shards,
        "merge_s": run.merge["merge_s"] + run.merge["open_s"] + run.merge["close_s"],
        "rss": run.merge_proc.peak_rss_mib,
    }
    lines = [
        f"# A merge by sufficient statistics, {', '.join(f'{s:,}' for s in sizes)} traces",
        "",
        f"`python bench/flat_merge.py --sizes {','.join(map(str, sizes))} --shards {args.shards}"
        f" --buckets {args.buckets} --files {args.files}`; the base day's means equal"
        f" pytrec_eval's to {oracle_diff:.1e}; every size's merged statistics equal the"
        f" rows' own to {max(f['worst'] for f in figures):.1e} (counts exactly).",
        "",
        *table_lines(figures, rows_merge),
    ]
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": figures, "rows_merge": rows_merge}, indent=2))
        print("\n".join(lines))
    else:
        write_report(RESULT, lines)


RESULT = "flat_merge.md"

if __name__ == "__main__":
    main()
