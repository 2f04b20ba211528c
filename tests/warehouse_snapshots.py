"""The warehouse's steps and rows for the fault tests: each asset's work done as the asset does it,
every partitioned table's rows for some days (and the corpus), frames equal up to dtypes, the
small sample store they run on, and a second version of a store whose every table differs.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.sample import write_sample_store
from retrieval_pipeline.store import LocalTraceStore
from retrieval_pipeline.warehouse import connection, ingestion, nightly, steps
from retrieval_pipeline.warehouse import corpus as wcorpus

DAY = date(2026, 11, 30)
PARTITIONED = [
    "traces",
    "quarantine",
    "labels",
    "query_metrics",
    "segment_metrics",
    "regression_report",
]


def snapshot(database: Path, days: list[date]) -> dict[str, pd.DataFrame]:
    """`snapshot_of` the file opened read-write, as the next run would open it (a killed run's
    WAL is replayed)."""
    conn = connection.connect(database)
    try:
        return snapshot_of(conn, days)
    finally:
        conn.close()


def snapshot_of(conn: duckdb.DuckDBPyConnection, days: list[date]) -> dict[str, pd.DataFrame]:
    """Every partitioned table's rows for `days` (none for a table not made yet), and the corpus."""
    tables = {row[0] for row in conn.execute("show tables").fetchall()}
    frames = {
        table: conn.execute(
            f"select * from {table} where list_contains($days, partition_date) order by all",
            {"days": days},
        ).df()
        if table in tables
        else pd.DataFrame()
        for table in PARTITIONED
    }
    frames["corpus"] = conn.execute("select * from corpus order by all").df()
    return frames


def same(left: pd.DataFrame, right: pd.DataFrame) -> bool:
    try:
        pd.testing.assert_frame_equal(
            left.reset_index(drop=True), right.reset_index(drop=True), check_dtype=False
        )
    except AssertionError:
        return False
    return True


def copy_warehouse(source: Path, target: Path) -> None:
    """The warehouse file at `source` copied to `target` with the folder of rows kept beside it
    (`<file>.merged`: the days' traces the nightly wrote there), as a user copies a warehouse."""
    shutil.copy(source, target)
    beside = source.with_name(source.name + ".merged")
    if beside.is_dir():
        shutil.copytree(beside, target.with_name(target.name + ".merged"))


def second_version(store: Path, into: Path) -> Path:
    """The same store with more traces on DAY and a newer, larger corpus snapshot: every
    table of DAY (and the corpus) differs between a run on `store` and one on `into`."""
    shutil.copytree(store, into)
    day_dir = into / "traces" / f"date={DAY}"
    source = sorted(day_dir.glob("*.jsonl"))[0]
    extra = []
    for number, line in enumerate(source.read_text().splitlines()[:120]):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        record["trace_id"] = f"extra-{number}"
        extra.append(json.dumps(record))
    (day_dir / "zz-extra.jsonl").write_text("\n".join(extra) + "\n")
    corpus = sorted((into / "corpus").iterdir())[0]
    frame = pd.read_parquet(corpus)
    added = frame.iloc[:100].assign(doc_id=[f"new-doc-{n}" for n in range(100)])
    newer = into / "corpus" / "zz-newer.parquet"
    pd.concat([frame, added]).to_parquet(newer)
    os.utime(newer, (time.time() + 60, time.time() + 60))
    return into


def warehouse_step(
    conn: duckdb.DuckDBPyConnection, store: Path, step: str, days: list[date]
) -> None:
    """One asset's work for `days`, as the asset does it."""
    config = PipelineConfig()
    start, end = days[0], days[-1]
    trace_store = LocalTraceStore(store)
    if step == "traces":
        for day in days:
            ingestion.ingest_traces(conn, trace_store.trace_files(day), partition_date=day)
    elif step == "corpus":
        wcorpus.load_corpus(conn, trace_store.corpus_file())
    elif step == "labels":
        steps.build_labels(conn, start, end, use_corpus=True)
    elif step == "query_metrics":
        steps.compute_query_metrics(
            conn,
            config.scored_metrics(),
            start,
            end,
            config.gain,
            config.relevance_level,
            gmax=config.gmax,
            judged_only=config.judged_only,
        )
    elif step == "segment_metrics":
        nightly.build_segment_metrics(conn, config, start, end)
    elif step == "regression_report":
        for day in days:
            nightly.build_regression_rows(conn, config, day)


WAREHOUSE_STEPS = [
    "corpus",
    "traces",
    "labels",
    "query_metrics",
    "segment_metrics",
    "regression_report",
]


def write_small_store(root: Path) -> Path:
    """Three days of the sample store at `root`, the regression on the last (DAY)."""
    write_sample_store(root, days=3, seed=11, end_date=DAY, regression_day=DAY)
    return root
