"""What runs inside each fresh benchmark process: `python -m bench.workers NAME ... --result F`.

Only the standard library is imported at the top, so each worker's start-up holds just what it
uses: the pytrec_eval and ranx workers never import the project, DuckDB or Dagster.
Every worker writes a JSON object with its timings (seconds) and, where it scores, its means.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path

METRICS = ("ndcg@10", "precision@5", "recall@20", "mrr", "map")
TREC_MEASURES = {
    "ndcg@10": "ndcg_cut_10",
    "precision@5": "P_5",
    "recall@20": "recall_20",
    "mrr": "recip_rank",
    "map": "map",
}
RANX_METRICS = {
    "ndcg@10": "ndcg@10",
    "precision@5": "precision@5",
    "recall@20": "recall@20",
    "mrr": "mrr",
    "map": "map",
}
# the floor: one scan that touches every retrieved id and looks every label up in its list
FLOOR_LENGTHS = """
select sum(len(retrieved_ids)) + sum(coalesce(cardinality(relevance_scores), 0))
from read_parquet($path)
"""
FLOOR_POSITIONS = """
select
    sum(len(retrieved_ids)),
    sum(list_sum(list_transform(
        map_keys(relevance_scores), lambda k: coalesce(list_position(retrieved_ids, k), 0)
    )))
from read_parquet($path)
"""
# the same scan over the engine's own `traces` table (native DuckDB storage, labels as structs)
FLOOR_POSITIONS_TABLE = """
select
    sum(len(retrieved_ids)),
    sum(list_sum(list_transform(
        labels, lambda l: coalesce(list_position(retrieved_ids, l.doc_id), 0)
    )))
from traces
"""
MEANS_SQL = """
select metric, avg(value) from query_metrics
where is_annotated and partition_date between $start and $end
group by metric
"""


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
    return walls


# ---------------------------------------------------------------------------------------------
# the plain reference-tool scripts: json.loads, dicts, evaluate


def _corpus_rules(path: str) -> Callable[[str, int], bool]:
    """`is_stale(doc_id, served_at_us)` for the snapshot: not in it, deleted at or before the
    trace's time, or added after it (the engine's rule)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    corpus = pq.read_table(path)
    ids = corpus["doc_id"].to_pylist()

    def micros(column: str) -> list[int | None]:
        values = corpus[column].cast(pa.timestamp("us", tz="UTC"))
        return pc.cast(values, pa.int64()).to_pylist()

    present = set(ids)
    deleted = {d: t for d, t in zip(ids, micros("deleted_at"), strict=True) if t is not None}
    added = {d: t for d, t in zip(ids, micros("added_at"), strict=True) if t is not None}

    def is_stale(doc: str, served_us: int) -> bool:
        if doc not in present:
            return True
        gone = deleted.get(doc)
        if gone is not None and gone <= served_us:
            return True
        came = added.get(doc)
        return came is not None and came > served_us

    return is_stale


def _records(path: str) -> Iterator[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _qrels_and_runs(
    path: str, is_stale: Callable[[str, int], bool] | None, slice_size: int
) -> Iterator[tuple[dict, dict, int]]:
    """Slices of (qrels, run, traces judged but left with no label) keyed by trace_id, as a
    plain script builds them: score = -rank, first occurrence of a repeated id kept, stale labels
    dropped, unannotated traces (no labels, or all stale) left out."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    empty_judged = 0
    for record in _records(path):
        scores = record.get("relevance_scores")
        relevant = record.get("relevant_ids")
        if scores is None and relevant is None:
            continue
        labels = {str(d): int(g) for d, g in (scores or {}).items()}
        for doc in relevant or []:
            labels.setdefault(str(doc), 1)
        if not labels:
            empty_judged += 1  # judged with no label at all: scored 0 by trec_eval's rules
            continue
        if is_stale is not None:
            served = datetime.fromisoformat(record["timestamp"])
            served_us = int(served.timestamp() * 1_000_000)
            labels = {d: g for d, g in labels.items() if not is_stale(d, served_us)}
            if not labels:
                continue  # every label stale: unannotated
        ids = [str(doc) for doc in record["retrieved_ids"]]
        # score = -rank; filled from the end, so a repeated id keeps its first (best) rank
        ranked = dict(zip(reversed(ids), map(float, range(-len(ids), 0)), strict=True))
        trace_id = str(record["trace_id"])
        qrels[trace_id] = labels
        run[trace_id] = ranked
        if slice_size and len(qrels) >= slice_size:
            yield qrels, run, empty_judged
            qrels, run, empty_judged = {}, {}, 0
    yield qrels, run, empty_judged


def pytrec(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    import pytrec_eval

    measures = {"ndcg_cut.10", "P.5", "recall.20", "recip_rank", "map"}
    sums = dict.fromkeys(METRICS, 0.0)
    count = 0
    evaluate_s = 0.0
    t0 = time.perf_counter()
    is_stale = _corpus_rules(args.corpus) if args.corpus else None
    corpus_s = time.perf_counter() - t0
    for qrels, run, empty in _qrels_and_runs(args.input, is_stale, args.slice):
        if not qrels:
            count += empty
            continue
        t0 = time.perf_counter()
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
        per_query = evaluator.evaluate(run)
        evaluate_s += time.perf_counter() - t0
        for values in per_query.values():
            for metric, measure in TREC_MEASURES.items():
                sums[metric] += values[measure]
        count += len(per_query) + empty
        del evaluator, per_query
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "evaluate_s": evaluate_s,
        "corpus_s": corpus_s,
        "traces_scored": count,
        "means": {m: sums[m] / count for m in METRICS},
    }


def ranx(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    from ranx import Qrels, Run, evaluate

    t0 = time.perf_counter()
    is_stale = _corpus_rules(args.corpus) if args.corpus else None
    corpus_s = time.perf_counter() - t0
    ((qrels, run, empty),) = list(_qrels_and_runs(args.input, is_stale, 0))
    assert empty == 0, "ranx cannot score judged traces without labels"
    t0 = time.perf_counter()
    means = evaluate(Qrels(qrels), Run(run), list(RANX_METRICS.values()))
    evaluate_s = time.perf_counter() - t0
    return {
        "wall_s": time.perf_counter() - start,
        "evaluate_s": evaluate_s,
        "corpus_s": corpus_s,
        "traces_scored": len(qrels),
        "means": {m: float(means[RANX_METRICS[m]]) for m in METRICS},
    }


# ---------------------------------------------------------------------------------------------
# the project's engine


def metric_step(args: argparse.Namespace) -> dict:
    """Ingest Parquet (untimed), then time `compute_query_metrics` alone."""
    from retrieval_pipeline.metrics import parse_metrics
    from retrieval_pipeline.warehouse.connection import close_scratch, connect, memory_limit
    from retrieval_pipeline.warehouse.corpus import load_corpus
    from retrieval_pipeline.warehouse.ingestion import ingest_traces
    from retrieval_pipeline.warehouse.steps import build_labels, compute_query_metrics

    day = date.fromisoformat(args.day)
    # a scratch database file, as `evaluate` scores in (in memory, DuckDB would keep 100k traces
    # in one row group and score them on one core)
    folder = tempfile.TemporaryDirectory(prefix="bench-metric-step-")
    conn = connect(
        Path(folder.name) / "bench.duckdb", {"memory_limit": memory_limit()}, scratch=True
    )
    t0 = time.perf_counter()
    ingest = ingest_traces(conn, [Path(args.input)])
    ingest_s = time.perf_counter() - t0
    load_corpus(conn, Path(args.corpus))
    build_labels(conn, day, day, use_corpus=True)
    setup_s = time.perf_counter() - t0
    metrics = parse_metrics(list(METRICS))

    def step() -> None:
        compute_query_metrics(conn, metrics, day, day, "linear", 1.0)

    walls = []
    for _ in range(args.repeat):
        conn.execute("delete from query_metrics")  # each repetition inserts into an empty table
        walls += _timed(step, 1)
    means = dict(conn.execute(MEANS_SQL, {"start": day, "end": day}).fetchall())
    table_floor = _timed(lambda: conn.execute(FLOOR_POSITIONS_TABLE).fetchall(), args.repeat)
    threads = conn.execute("select current_setting('threads')").fetchone()
    close_scratch(conn)
    folder.cleanup()
    return {
        "wall_s": statistics.median(walls),
        "walls": walls,
        "ingest_s": ingest_s,
        "setup_s": setup_s,
        "table_floor_s": statistics.median(table_floor),
        "table_floor_walls": table_floor,
        "traces_scored": ingest.valid,
        "threads": threads[0] if threads else None,
        "means": means,
    }


def floor(args: argparse.Namespace) -> dict:
    """A plain DuckDB scan of the Parquet: list lengths, then a list_position per label."""
    import duckdb

    conn = duckdb.connect()
    params = {"path": args.input}
    lengths = _timed(lambda: conn.execute(FLOOR_LENGTHS, params).fetchall(), args.repeat)
    positions = _timed(lambda: conn.execute(FLOOR_POSITIONS, params).fetchall(), args.repeat)
    return {
        "wall_s": statistics.median(positions),
        "walls": positions,
        "lengths_s": statistics.median(lengths),
        "lengths_walls": lengths,
    }


def evaluate(args: argparse.Namespace) -> dict:
    """`run_evaluation` in process on the file, as the Python API runs it."""
    t0 = time.perf_counter()
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    import_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    run = run_evaluation(args.input, list(METRICS), corpus=args.corpus, gain="linear")
    wall = time.perf_counter() - t1
    return {
        "wall_s": wall,
        "import_s": import_s,
        "traces_scored": run.ingest.valid,
        "means": run.means(),
    }


def nightly(args: argparse.Namespace) -> dict:
    """One partition through every asset and check with `dg.materialize` (environment variables
    name the store, the warehouse and the configuration)."""
    t0 = time.perf_counter()
    import dagster as dg

    from retrieval_pipeline.defs import defs

    import_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    instance = dg.DagsterInstance.ephemeral()
    # the nightly job selects every asset (AssetSelection.all()), and with them their checks
    nodes = [*(defs.assets or []), *(defs.asset_checks or [])]
    kinds = (dg.AssetsDefinition, dg.AssetSpec, dg.SourceAsset)  # what `materialize` takes
    selected = [node for node in nodes if isinstance(node, kinds)]
    assert len(selected) == len(nodes)  # nothing cacheable among the definitions
    with _rss_samples() as samples:
        result = dg.materialize(
            selected,
            partition_key=args.day,
            resources=dict(defs.resources or {}),
            instance=instance,
            raise_on_error=False,
        )
    wall = time.perf_counter() - t1
    step_s: dict[str, float] = {}
    step_peak_mib: dict[str, float] = {}
    starts: dict[str, float] = {}
    for entry in instance.all_logs(result.run_id):
        event = entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            starts[event.step_key] = entry.timestamp
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            start = starts.get(event.step_key, entry.timestamp)
            step_s[event.step_key] = entry.timestamp - start
            during = [rss for at, rss in samples if start <= at <= entry.timestamp]
            step_peak_mib[event.step_key] = max(during, default=0.0)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return {
        "failed_steps": failed,
        "wall_s": wall,
        "import_s": import_s,
        "success": result.success,
        "checks": checks,
        "step_s": step_s,
        "step_peak_mib": step_peak_mib,
        "means": db_means_of(args.db, args.day),
    }


@contextmanager
def _rss_samples(every_s: float = 0.05) -> Iterator[list[tuple[float, float]]]:
    """(time, resident MiB) of this process every `every_s` while the block runs, to tell which
    step holds the peak (ru_maxrss gives the peak, not when it happened)."""
    samples: list[tuple[float, float]] = []
    done = threading.Event()
    page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20

    def sample() -> None:
        while not done.wait(every_s):
            resident = int(Path("/proc/self/statm").read_text().split()[1])
            samples.append((time.time(), resident * page_mib))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield samples
    finally:
        done.set()
        sampler.join()


def db_means_of(database: str, day: str) -> dict[str, float]:
    import duckdb

    conn = duckdb.connect(database, read_only=True)
    try:
        params = {"start": date.fromisoformat(day), "end": date.fromisoformat(day)}
        return dict(conn.execute(MEANS_SQL, params).fetchall())
    finally:
        conn.close()


def db_means(args: argparse.Namespace) -> dict:
    return {"means": db_means_of(args.db, args.day)}


WORKERS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "pytrec": pytrec,
    "ranx": ranx,
    "metric_step": metric_step,
    "floor": floor,
    "evaluate": evaluate,
    "nightly": nightly,
    "db_means": db_means,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", choices=sorted(WORKERS))
    parser.add_argument("--input", default=None)
    parser.add_argument("--corpus", default=None)
    parser.add_argument("--slice", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--day", default=None)
    parser.add_argument("--db", default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    result = WORKERS[args.name](args)
    args.result.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
