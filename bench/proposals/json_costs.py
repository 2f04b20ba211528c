"""What each JSON step of `sql/stg_trace_records.sql` costs on its own, per 100k traces.

    python bench/proposals/json_costs.py --size 100000

Each expression is computed over the raw records of the benchmark's JSONL.gz into a temp table
(so it is really evaluated), alone; the list expressions run on `retrieved_ids` as the statement
sees it (re-serialised JSON text from `from_json(doc, {...: JSON})`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.generate import dataset

FIELDS = (
    '\'{"trace_id": "JSON", "query_id": "JSON", "timestamp": "JSON", "retrieved_ids": "JSON", '
    '"relevant_ids": "JSON", "relevance_scores": "JSON", "segment": "JSON", "variant": "JSON", '
    '"label_source": "JSON"}\''
)
EXPRESSIONS = [
    ("json_valid(raw_record)", "raw", "json_valid(raw_record)"),
    ("raw_record::json", "raw", "raw_record::json"),
    ("from_json(doc, {9 fields: JSON})", "raw", f"from_json(raw_record, {FIELDS})"),
    ("json_type(retrieved_ids, '$[*]')", "lists", "json_type(r, '$[*]')"),
    ("json_extract_string(retrieved_ids, '$[*]')", "lists", "json_extract_string(r, '$[*]')"),
    ("from_json(retrieved_ids, '[\"VARCHAR\"]') (one typed parse)", "lists",
     "from_json(r, '[\"VARCHAR\"]')"),
    ("read_json of the file, typed columns (reference)", None, None),
]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    import duckdb

    from retrieval_pipeline import readers

    ds = dataset(args.size, args.seed)
    raw = readers.read_jsonl_files(readers.discover([ds.jsonl_gz]))
    conn = duckdb.connect()
    conn.register("raw", raw)
    conn.execute(
        f"create temp table lists as select from_json(raw_record, {FIELDS}).retrieved_ids as r"
        " from raw"
    )
    scale = 100_000 / args.size
    print(f"| expression ({args.size:,} traces) | s | s per 100k |")
    print("|---|---|---|")
    for label, source, expression in EXPRESSIONS:
        start = time.perf_counter()
        if source is None:
            conn.execute(
                "create or replace temp table t as select * from read_json($path, columns = {"
                "trace_id: 'VARCHAR', query_id: 'VARCHAR', timestamp: 'VARCHAR', "
                "segment: 'VARCHAR', variant: 'VARCHAR', label_source: 'VARCHAR', "
                "retrieved_ids: 'VARCHAR[]', relevance_scores: 'MAP(VARCHAR, DOUBLE)'})",
                {"path": str(ds.jsonl_gz)},
            )
        else:
            conn.execute(
                f"create or replace temp table t as select {expression} as v from {source}"
            )
        seconds = time.perf_counter() - start
        print(f"| `{label}` | {seconds:.2f} | {seconds * scale:.2f} |")


if __name__ == "__main__":
    main()
