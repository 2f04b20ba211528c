"""Before/after of building the per-trace table in DuckDB (`rpt_query_metrics_wide.sql`)
instead of `engine.query_metrics_wide`'s pandas pivot: identical DataFrame, time.

    /tmp/venv/bin/python bench/proposals/query_metrics_wide.py --size 100000 --repeat 3

`wide_from_sql` is the proposed replacement body of `engine.query_metrics_wide` (same signature);
the check is `pandas.testing.assert_frame_equal` against the original (dtypes included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.common import METRICS
from bench.generate import dataset

SQL = Path(__file__).with_name("rpt_query_metrics_wide.sql")
COLUMNS = [
    "trace_id",
    "query_id",
    "segment",
    "variant",
    "n_retrieved",
    "n_relevant",
    "n_stale_labels",
]


def wide_from_sql(conn, metrics, start: date, end: date):
    """One row per trace, metrics as columns, split from the SQL's aligned value list."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [m.name for m in metrics]
    params = {"start_date": start, "end_date": end, "metric_names": names}
    table = conn.sql(SQL.read_text(), params=params).to_arrow_table()
    if table.num_rows == 0:
        return pd.DataFrame(columns=COLUMNS + names)
    values = table.column("metric_values")
    columns = {c: table.column(c) for c in COLUMNS}
    for i, name in enumerate(names):
        columns[name] = pc.list_element(values, i).cast(pa.float64())
    frame = pa.table(columns).to_pandas()
    return frame


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    import pandas as pd

    from retrieval_pipeline import engine
    from retrieval_pipeline.metrics import parse_metrics

    ds = dataset(args.size, args.seed)
    conn = engine.connect(":memory:")
    engine.ingest_traces(conn, [ds.parquet])
    engine.load_corpus(conn, ds.corpus)
    day = ds.day
    engine.build_labels(conn, day, day, use_corpus=True)
    metrics = parse_metrics(list(METRICS))
    engine.compute_query_metrics(conn, metrics, day, day, "linear", 1.0)
    before = engine.query_metrics_wide(conn, metrics, day, day)
    after = wide_from_sql(conn, metrics, day, day)
    try:
        pd.testing.assert_frame_equal(before, after, check_exact=True)
        identical = "yes"
    except AssertionError as exc:
        identical = f"NO: {str(exc).splitlines()[:4]}"
    times: dict[str, list[float]] = {"original": [], "proposed": []}
    for _ in range(args.repeat):
        for name, fn in (("original", engine.query_metrics_wide), ("proposed", wide_from_sql)):
            start = time.perf_counter()
            fn(conn, metrics, day, day)
            times[name].append(time.perf_counter() - start)
    old = statistics.median(times["original"])
    new = statistics.median(times["proposed"])
    print("| traces | identical DataFrame | original s | proposed s | speed-up |")
    print("|---|---|---|---|---|")
    print(f"| {args.size:,} | {identical} | {old:.2f} | {new:.2f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
