"""(f) Many small files: the same records as 1, 100, 1,440 and 5,000 JSON-lines files.

    python bench/many_files.py --sizes 10000 [--files 1,100,1440,5000] [--repeat 1]
    python bench/many_files.py --sizes 5000 --files 1,5000      # 5,000 one-line files
    python bench/many_files.py --sizes 10000 --kind parquet     # Parquet files (no floor row)

Per size, the dataset's records (`generate.py`, JSON lines) are split in order into F files of
consecutive lines (`part-00000.jsonl`, ...; at 5,000 records and 5,000 files one line each),
cached under `bench/data/n<N>_s<seed>/many_files/f<F>/`. Rows, each a fresh process:

- `retrieval-pipeline evaluate DIR --corpus ... --format json`, the whole process, its means
  checked against pytrec_eval's (the same records give the same means, however they are split);
  the note says how many times the one-file row it took.
- the floor: DuckDB's own `read_json` of the same files in one statement, with the trace columns
  typed, summing the list lengths so that every record is parsed.

Issue 23's targets: a day of 1,440 one-minute files at most 1.5x the same records in one file,
5,000 one-line files in seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    METRICS,
    Row,
    emit,
    max_abs_diff,
    median,
    oracle_means,
    parse_args,
    run_process,
    waits,
)
from bench.generate import Dataset, dataset

FILE_COUNTS = (1, 100, 1440, 5000)
# the floor: one statement over every file, each record parsed into typed columns
FLOOR_SQL = """
select
    count(*) as records,
    sum(len(retrieved_ids)) + sum(coalesce(cardinality(relevance_scores), 0)) as items
from read_json(
    $files,
    format = 'newline_delimited',
    columns = {
        trace_id: 'VARCHAR', query_id: 'VARCHAR', timestamp: 'VARCHAR', segment: 'VARCHAR',
        variant: 'VARCHAR', label_source: 'VARCHAR', retrieved_ids: 'VARCHAR[]',
        relevance_scores: 'MAP(VARCHAR, INTEGER)'
    }
)
"""


def split_files(ds: Dataset, files: int, kind: str = "jsonl") -> Path:
    """The dataset's records as `files` files of consecutive records, JSON lines or Parquet
    (cached)."""
    folder = ds.root / "many_files" / (f"f{files}" if kind == "jsonl" else f"f{files}_{kind}")
    manifest = folder / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text()) == {"files": files, "kind": kind}:
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if kind == "parquet":
        table = pq.read_table(ds.parquet)
        count = table.num_rows
    else:
        lines = ds.jsonl.read_bytes().splitlines(keepends=True)
        count = len(lines)
    if files > count:
        raise ValueError(f"{files} files of {count} records would leave some empty")
    bounds = [round(i * count / files) for i in range(files + 1)]
    for index in range(files):
        start, end = bounds[index], bounds[index + 1]
        part = folder / f"part-{index:05d}.{kind}"
        if kind == "parquet":
            pq.write_table(table.slice(start, end - start), part)
        else:
            part.write_bytes(b"".join(lines[start:end]))
    manifest.write_text(json.dumps({"files": files, "kind": kind}))
    return folder


def command() -> str:
    beside = Path(sys.executable).parent / "retrieval-pipeline"
    found = str(beside) if beside.exists() else shutil.which("retrieval-pipeline")
    if not found:
        raise RuntimeError("retrieval-pipeline is not installed in this environment")
    return found


def measure(
    sizes: list[int],
    seed: int = 7,
    repeat: int = 1,
    data_root: Path | None = None,
    file_counts: tuple[int, ...] = FILE_COUNTS,
    kind: str = "jsonl",
) -> list[Row]:
    rows: list[Row] = []
    for size in sizes:
        ds = dataset(size, seed, data_root)
        oracle = oracle_means(ds)
        one_file: float | None = None
        for files in file_counts:
            folder = split_files(ds, files, kind)
            cmd = [
                command(), "evaluate", str(folder), "--corpus", str(ds.corpus),
                "--metrics", ",".join(METRICS), "--gain", "linear", "--format", "json",
            ]  # fmt: skip
            procs = [run_process(cmd) for _ in range(repeat)]
            for proc in procs:
                if proc.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
            summary = json.loads(procs[0].stdout)
            if summary["files"] != files or summary["records_read"] != size:
                raise RuntimeError(f"{folder}: read {summary['files']} files, expected {files}")
            wall = median([p.wall_s for p in procs])
            one_file = wall if files == 1 else one_file
            ratio = f"; {wall / one_file:.1f}x one file" if one_file and files > 1 else ""
            rows.append(
                Row(
                    "(f) many files",
                    f"retrieval-pipeline evaluate, {_files(files, kind)}",
                    size,
                    wall,
                    wall,
                    max(p.peak_rss_mib for p in procs),
                    max_abs_diff(summary["means"], oracle, f"{files} files at {size}"),
                    summary["means"],
                    note=f"whole process{ratio}",
                    walls=[p.wall_s for p in procs],
                    **waits(*procs),
                )
            )
            if kind == "jsonl":  # the floor reads JSON lines
                rows.append(_floor_row(folder, files, size, repeat))
    return rows


def _files(files: int, kind: str = "jsonl") -> str:
    label = "JSONL" if kind == "jsonl" else "Parquet"
    return f"{files:,} {label} file{'s' if files != 1 else ''}"


def _floor_row(folder: Path, files: int, size: int, repeat: int) -> Row:
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [
            sys.executable, "-m", "bench.many_files", "--floor-of", str(folder),
            "--repeat", str(repeat), "--result", str(result_path),
        ]  # fmt: skip
        proc = run_process(cmd)
        if proc.returncode != 0 or not result_path.is_file():
            raise RuntimeError(f"floor of {folder} failed:\n{proc.stderr[-4000:]}")
        result = json.loads(result_path.read_text())
    if result["records"] != size:
        raise RuntimeError(f"floor of {folder}: {result['records']} records, expected {size}")
    return Row(
        "(f) many files, floor",
        f"DuckDB read_json, {_files(files)}",
        size,
        result["wall_s"],
        proc.wall_s,
        proc.peak_rss_mib,
        note="one statement",
        walls=result["walls"],
        **waits(proc),
    )


def floor(folder: Path, repeat: int) -> dict[str, object]:
    """Inside the fresh process: the floor statement over every file of `folder`, timed."""
    import duckdb

    files = sorted(str(path) for path in folder.glob("*.jsonl"))
    conn = duckdb.connect()
    walls: list[float] = []
    records = 0
    for _ in range(repeat):
        start = time.perf_counter()
        row = conn.execute(FLOOR_SQL, {"files": files}).fetchone()
        walls.append(time.perf_counter() - start)
        records = int(row[0]) if row else 0
    return {"wall_s": statistics.median(walls), "walls": walls, "records": records}


def main(argv: list[str] | None = None) -> None:
    options: dict[str, dict[str, Any]] = {
        "--files": {"default": ",".join(map(str, FILE_COUNTS)), "help": "file counts"},
        "--kind": {"default": "jsonl", "choices": ["jsonl", "parquet"], "help": "file format"},
        "--floor-of": {"type": Path, "default": None, "help": argparse.SUPPRESS},
        "--result": {"type": Path, "default": None, "help": argparse.SUPPRESS},
    }
    args = parse_args(__doc__.splitlines()[0], argv, options)
    if args.floor_of is not None:  # the floor's own fresh process
        args.result.write_text(json.dumps(floor(args.floor_of, args.repeat)))
        return
    counts = tuple(int(n) for n in str(args.files).split(",") if n)
    emit(measure(args.sizes, args.seed, args.repeat, file_counts=counts, kind=args.kind), args.json)


if __name__ == "__main__":
    main()
