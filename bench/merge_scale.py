"""The wired merge as the day grows (issue 33 item 4): one run's shard outputs, the same shards
replicated K times with distinct trace ids, merged by `merge_shards` into a new warehouse file in
a fresh process, at each K.

    python bench/shards.py --sizes 1000000 --shards 2           # writes the outputs it replicates
    python bench/merge_scale.py --outputs PATH/run=ID --copies 1,10

Without `--outputs`, the 2-shard run `bench/shards.py` left at 1M (`merge_steps.py`'s). Each
shard of a copy keeps its shard number: K copies of a 2-shard 1M day are a 2-shard day of K
million traces, every shard K times its rows. Each copy's trace ids end in `~K` (the first
copy's are the day's own) and its files come after the copy before's, so the records repeated
across the shards are repeated in every copy, and rewritten in every copy. A copy's
`segment_statistics` are its shard's, with the counts K times (the merge pools them; their means
are not checked here). The merged day's traces and metric rows are counted through the tables'
names in a new session: K times the day's. Writes `results/merge_scale.md`; asserts nothing
about speed.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine_note, run_job, script_args, write_report
from bench.generate import DATA_ROOT
from bench.merge_steps import default_outputs

RENAMED = "if(copy = 0, trace_id, trace_id || '~' || copy) as trace_id"
ROW_FILES = ("traces", "labels", "query_metrics", "quarantine")
COUNTS = ("read", "valid", "quarantined", "labels", "stale_labels", "annotated")
STATISTICS_COUNTS = ("traces", "annotated_traces", "judged_traces", "n_values", "not_a_number")


def _replicate(job: dict[str, Any]) -> dict[str, Any]:
    """Each shard folder of `job["shards"]` as `copies` copies in one folder under `out`."""
    import duckdb

    conn = duckdb.connect(config={"preserve_insertion_order": False})
    out, copies = Path(job["out"]), int(job["copies"])
    manifests = [json.loads((Path(f) / "manifest.json").read_text()) for f in job["shards"]]
    day_files = sum(len(m["files"]) for m in manifests)
    params = {"copies": copies}
    written = []
    for folder, manifest in zip(job["shards"], manifests, strict=True):
        target = out / Path(folder).name
        target.mkdir(parents=True)
        rows = {}
        # bench paths, not user input: pasted, as COPY takes no parameter for its file
        selects = {name: f"* exclude (trace_id), {RENAMED}" for name in ROW_FILES}
        selects["valid_ids"] = (
            f"* exclude (trace_id, file_order), {RENAMED}, file_order + copy * {day_files}"
            " as file_order"
        )
        for name, select in selects.items():
            source = f"read_parquet('{Path(folder) / name}.parquet')"
            conn.execute(
                f"copy (select {select} from {source}, range($copies) as copies(copy))"
                f" to '{target / name}.parquet' (format parquet)",
                params,
            )
        scaled = ", ".join(f"{c} * $copies as {c}" for c in STATISTICS_COUNTS)
        conn.execute(
            f"copy (select * replace ({scaled})"
            f" from read_parquet('{Path(folder) / 'segment_statistics'}.parquet'))"
            f" to '{target / 'segment_statistics'}.parquet' (format parquet)",
            params,
        )
        for name in (*ROW_FILES, "valid_ids", "segment_statistics"):
            ((count,),) = conn.execute(
                f"select count(*) from read_parquet('{target / name}.parquet')"
            ).fetchall()
            rows[name] = int(count)
        copy = dict(manifest, folder=str(target), rows=rows)
        copy |= {key: int(manifest[key]) * copies for key in COUNTS if key in manifest}
        (target / "manifest.json").write_text(json.dumps(copy, indent=2))
        written.append(str(target))
    return {"shards": written}


def _merge(job: dict[str, Any]) -> dict[str, Any]:
    """The copies' shards merged into a new warehouse file; the merge's seconds, the step's
    (with the warehouse's close) and the merged day counted under the tables' names."""
    from datetime import date

    from retrieval_pipeline.warehouse import shards
    from retrieval_pipeline.warehouse.connection import connect, duckdb_config

    manifests = [json.loads((Path(f) / "manifest.json").read_text()) for f in job["shards"]]
    database = Path(job["out"]) / "warehouse.duckdb"
    day = date.fromisoformat(manifests[0]["day"])
    conn = connect(database, duckdb_config())
    start = time.perf_counter()
    merged = shards.merge_shards(conn, day, manifests)
    merge_s = time.perf_counter() - start
    conn.close()
    step_s = time.perf_counter() - start
    with connect(database) as check:
        ((traces, metric_rows),) = check.execute(
            "select (select count(*) from traces), (select count(*) from query_metrics)"
        ).fetchall()
    return {
        "merge_s": merge_s,
        "step_s": step_s,
        "valid": merged.valid,
        "repeated": merged.repeated_across_shards,
        "traces": int(traces),
        "metric_rows": int(metric_rows),
        "file_mb": database.stat().st_size / 1e6,
    }


WORKERS = {"replicate": _replicate, "merge": _merge}


OPTIONS: dict[str, dict[str, Any]] = {
    "--outputs": {"type": Path, "default": None, "help": "a run's folder (run=ID)"},
    "--copies": {"default": "1,10", "help": "comma-separated copies of the day"},
    "--work": {"type": Path, "default": DATA_ROOT / "merge_scale"},
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = script_args(WORKERS, __doc__.splitlines()[0], argv, OPTIONS)
    if args is None:  # a worker, done
        return
    outputs = args.outputs or default_outputs(1_000_000)
    shard_folders = sorted(str(p) for p in outputs.glob("shard=*"))
    lines = [
        "| copies | traces | merge s | step s | per 1M traces s | peak MiB | repeated | machine |",
        "|---|---|---|---|---|---|---|---|",
    ]
    figures = []
    for copies in (int(c) for c in str(args.copies).split(",") if c):
        work = args.work / f"x{copies}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        day, _ = run_job("bench.merge_scale", "replicate", {
            "out": str(work / "shards"), "copies": copies, "shards": shard_folders,
        })  # fmt: skip
        merged, proc = run_job("bench.merge_scale", "merge", {
            "out": str(work), "shards": day["shards"],
        })  # fmt: skip
        if merged["traces"] != merged["valid"]:
            raise SystemExit(f"{merged['traces']} traces read back, the merge says {merged}")
        merged |= {"copies": copies, "peak_mib": proc.peak_rss_mib}
        figures.append(merged)
        note = machine_note(proc.io_stall_s, proc.steal_s)
        lines.append(
            f"| {copies} | {merged['traces']:,} | {merged['merge_s']:.2f} | {merged['step_s']:.2f}"
            f" | {merged['step_s'] * 1e6 / merged['traces']:.3f} | {merged['peak_mib']:,.0f}"
            f" | {merged['repeated']:,} | {note} |"
        )
        shutil.rmtree(work, ignore_errors=True)
    lines += [
        "",
        f"`python bench/merge_scale.py {' '.join(argv)}`, outputs {outputs}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
    ]
    write_report("merge_scale.md", lines)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
