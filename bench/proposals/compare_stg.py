"""Before/after of a proposed rewrite of `sql/stg_trace_records.sql`: identical rows, time.

    python bench/proposals/compare_stg.py --size 100000 --repeat 3 \
        bench/proposals/stg_trace_records_narrow_duplicates.sql

Reads the benchmark's JSONL.gz plus a small file of bad and duplicated records (so every branch
runs: quarantine reasons, a trace_id repeated across files and inside a file), then checks that
the proposal returns exactly the original's rows (EXCEPT ALL both ways) and times `create temp
table ... as` of each, alternating, median of --repeat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.generate import dataset

BAD = [
    "{not json",
    json.dumps({"trace_id": "t-00000001", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
                "retrieved_ids": ["a"]}),  # repeats a trace of the main file
    json.dumps({"trace_id": "dup", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
                "retrieved_ids": ["a"]}),
    json.dumps({"trace_id": "dup", "query_id": "q", "timestamp": "2026-11-30T00:00:01Z",
                "retrieved_ids": ["b"]}),
    json.dumps({"trace_id": "dup", "query_id": "q", "timestamp": "2026-11-30T00:00:02Z",
                "retrieved_ids": [None]}),
    json.dumps({"query_id": "q", "timestamp": "2026-11-30T00:00:00Z", "retrieved_ids": []}),
    json.dumps({"trace_id": 7, "query_id": 8, "timestamp": "nope", "retrieved_ids": []}),
    json.dumps({"trace_id": "g", "query_id": "q", "timestamp": "2026-11-30",
                "retrieved_ids": ["a", "a", 3], "relevance_scores": {"a": -1}}),
]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("proposal", type=Path)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from retrieval_pipeline.sql_files import load_sql

    from retrieval_pipeline import engine, readers

    ds = dataset(args.size, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        extra = Path(tmp) / "zz_extra.jsonl"
        extra.write_text("\n".join(BAD) + "\n")
        raw = readers.read_jsonl_files(readers.discover([ds.jsonl_gz, extra]))
    conn = engine.connect(":memory:")
    conn.register("raw_records", raw)
    original = load_sql("stg_trace_records")
    proposed = args.proposal.read_text()
    p = {"partition_date": None}
    conn.execute("create or replace temp table a as " + original, p)
    conn.execute("create or replace temp table b as " + proposed, p)
    rows = conn.execute("select count(*), count(reason) from a").fetchone()
    diff = conn.execute(
        "select (select count(*) from (from a except all from b))"
        " + (select count(*) from (from b except all from a))"
    ).fetchone()[0]
    same_columns = [d[0] for d in conn.execute("from a limit 0").description] == [
        d[0] for d in conn.execute("from b limit 0").description
    ]
    times: dict[str, list[float]] = {"original": [], "proposed": []}
    for _ in range(args.repeat):
        for name, sql in (("original", original), ("proposed", proposed)):
            start = time.perf_counter()
            conn.execute("create or replace temp table t as " + sql, p)
            times[name].append(time.perf_counter() - start)
    before = statistics.median(times["original"])
    after = statistics.median(times["proposed"])
    print("| input | rows (quarantined) | identical | original s | proposed s | speed-up |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.size:,} traces + {len(BAD)} bad/duplicate records | {rows[0]:,} ({rows[1]}) "
        f"| {'yes' if diff == 0 and same_columns else f'NO ({diff} rows differ)'} "
        f"| {before:.2f} | {after:.2f} | {before / after:.2f}x |"
    )


if __name__ == "__main__":
    main()
