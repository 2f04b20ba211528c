# mypy: ignore-errors
# (scratch prototype, kept as it ran: parallel_validation.py against the engine before the
# refactor, commit e08d857; see bench/proposals/scaling/README.md)
"""Prototype of parallel validation (docs/scaling.md): K threads validate pieces, each on a DuckDB
cursor of its own; the main thread takes the results in piece order, counts the valid rows whose
trace_id an earlier piece holds (the design quarantines them there) and hands the piece to the
write-behind. Built around the engine's own functions, for timing; not the package's code.

    python bench/proposals/scaling/parallel_validation.py bench/data/n100000_s7/traces.jsonl 2
    python bench/proposals/scaling/parallel_validation.py bench/data/n100000_s7/traces.jsonl 1 today
"""

import queue
import resource
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from retrieval_pipeline.sql_files import load_sql

from retrieval_pipeline import engine


def ingest_parallel(conn, source, partition_date=None, keep_retrieved_ids=True, workers=2):
    _, pieces = engine._raw_record_pieces(conn, source)
    engine.create_seen_trace_ids(conn)
    free = queue.Queue()
    cursors = []
    for _ in range(workers):
        c = engine._cursor_like(conn)
        c.execute(load_sql("macros"))
        engine.create_seen_trace_ids(c)  # empty: a worker screens within its piece only
        cursors.append(c)
        free.put(c)
    ((threads,),) = conn.execute("select current_setting('threads')").fetchall()
    read = valid = repeated_across = 0
    dates = set() if partition_date is None else {partition_date}

    def stage(piece):
        c = free.get()
        try:
            return engine._in_batches_per_thread(
                engine._stage_records(c, piece, partition_date, keep_retrieved_ids), int(threads)
            )
        finally:
            free.put(c)

    def finish(number, future, write):
        nonlocal read, valid, repeated_across
        staged = future.result()
        with engine.registered(conn, "stg_trace_records", staged):
            # the design: valid rows repeating an earlier piece's trace_id are quarantined here
            ((n,),) = conn.execute(
                "select count(*) from stg_trace_records where reason is null"
                " and trace_id in (select trace_id from seen_trace_ids)"
            ).fetchall()
            repeated_across += n
            write(staged, number)
            conn.execute(
                "insert into seen_trace_ids select trace_id, file_order, source_file,"
                " source_line from stg_trace_records where reason is null"
            )
            row = conn.execute(load_sql("agg_ingest_counts")).fetchone()
            read += int(row[0])
            valid += int(row[1])

    try:
        with (
            engine._piece_writer(conn, partition_date, dates) as write_piece,
            engine._written_behind(conn, write_piece) as write,
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="validate") as pool,
        ):
            inflight = deque()
            for number, piece in enumerate(engine._read_ahead(pieces)):
                inflight.append((number, pool.submit(stage, piece)))
                while len(inflight) > workers:
                    finish(*inflight.popleft(), write)
            while inflight:
                finish(*inflight.popleft(), write)
    finally:
        for c in cursors:
            c.close()
        conn.execute("drop table if exists seen_trace_ids")
    return read, valid, repeated_across


if __name__ == "__main__":
    path, workers = Path(sys.argv[1]), int(sys.argv[2])
    today = len(sys.argv) > 3 and sys.argv[3] == "today"
    with tempfile.TemporaryDirectory() as d:
        conn = engine.connect(Path(d) / "e.duckdb", {"memory_limit": "1GB"}, scratch=True)
        t = time.perf_counter()
        if today:
            counts = engine.ingest_traces(conn, [path], keep_retrieved_ids=False)
            out = (counts.read, counts.valid)
        else:
            out = ingest_parallel(conn, [path], keep_retrieved_ids=False, workers=workers)
        wall = time.perf_counter() - t
        ru = resource.getrusage(resource.RUSAGE_SELF)
        label = "today" if today else f"workers={workers}"
        cpu = ru.ru_utime + ru.ru_stime
        print(f"{label} {out} wall {wall:.2f}s cpu {cpu:.1f}s rss {ru.ru_maxrss // 1024} MiB")
        engine.close_scratch(conn)
