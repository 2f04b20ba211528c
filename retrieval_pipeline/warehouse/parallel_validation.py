"""Parallel validation (docs/scaling.md, "Parallel validation"): an ingestion's pieces validated
by several threads at once, each on a cursor of its own, and taken back in the order read.

A piece is validated alone (`validation.stage_records` on a cursor whose `seen_trace_ids` is
empty), so it ranks a repeated trace_id within itself only. The one rule that spans pieces, a
trace_id that an earlier piece holds valid, is applied as each piece is taken back, in order
(sql/stg_repeats_across_pieces.sql): every row is then the row one validating thread gives, and
the counts are the same. With one worker, pieces are validated on the caller's connection, as
they always were. How many workers: `resources_budget.validation_workers`.
"""

from __future__ import annotations

import queue
from collections import Counter, deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import date

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.ingest.pieces import RawPiece
from retrieval_pipeline.warehouse.connection import create_macros, cursor_like
from retrieval_pipeline.warehouse.judgments import judged_queries
from retrieval_pipeline.warehouse.session import registered
from retrieval_pipeline.warehouse.sql import load_sql
from retrieval_pipeline.warehouse.validation import raw_records, record_keys, stage_records


@dataclass(frozen=True)
class Validated:
    """A piece and its rows (sql/stg_trace_records.sql, repeats dropped), with the records that
    carry each field a trace record does not have."""

    piece: RawPiece
    staged: pa.Table
    unknown_fields: Counter[str]


def create_seen_trace_ids(conn: duckdb.DuckDBPyConnection) -> None:
    """The valid trace_ids of an ingestion's earlier pieces, which sql/stg_trace_records.sql reads:
    a later record repeating one is quarantined."""
    conn.execute(
        "create or replace temp table seen_trace_ids"
        " (trace_id varchar, file_order integer, source_file varchar, source_line bigint)"
    )


def validated_pieces(
    conn: duckdb.DuckDBPyConnection,
    pieces: Iterator[RawPiece],
    workers: int,
    partition_date: date | None,
    keep_retrieved_ids: bool,
    judged: bool,
) -> Generator[Validated, None, None]:
    """`pieces` validated, in order, at most `workers` at once. The caller adds each piece's
    valid rows to `seen_trace_ids` before taking the next one, and holds a piece's rows no
    longer than it needs them (a piece's rows are its largest object). Close the iterator when done
    (`contextlib.closing`): that stops the workers and closes their cursors."""
    if workers <= 1:
        for piece in pieces:
            unknown: Counter[str] = Counter()
            # no name here holds the rows while the caller works on them: it replaces them
            yield Validated(
                piece,
                stage_records(conn, piece, partition_date, keep_retrieved_ids, judged, unknown),
                unknown,
            )
        return
    cursors = [_validation_cursor(conn, judged) for _ in range(workers)]
    idle: queue.SimpleQueue[duckdb.DuckDBPyConnection] = queue.SimpleQueue()
    for cursor in cursors:
        idle.put(cursor)

    def validate(piece: RawPiece) -> tuple[pa.Table, Counter[str]]:
        cursor = idle.get()
        try:
            unknown: Counter[str] = Counter()
            staged = stage_records(
                cursor, piece, partition_date, keep_retrieved_ids, judged, unknown
            )
            return staged, unknown
        finally:
            idle.put(cursor)

    in_flight: deque[tuple[RawPiece, Future[tuple[pa.Table, Counter[str]]]]] = deque()
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="validate") as pool:
            try:
                for piece in pieces:
                    if len(in_flight) == workers:
                        yield _taken_back(conn, *in_flight.popleft())
                    in_flight.append((piece, pool.submit(validate, piece)))
                while in_flight:
                    yield _taken_back(conn, *in_flight.popleft())
            finally:
                for _, future in in_flight:
                    future.cancel()
                wait([future for _, future in in_flight])
    finally:
        for cursor in cursors:
            cursor.close()


def _validation_cursor(conn: duckdb.DuckDBPyConnection, judged: bool) -> duckdb.DuckDBPyConnection:
    """A cursor set up as the ingestion's connection is for validation: the macros, an empty
    `seen_trace_ids`, and `judged_queries` when the judgments label traces."""
    cursor = cursor_like(conn)
    create_macros(cursor)
    create_seen_trace_ids(cursor)
    if judged:
        judged_queries(cursor)
    return cursor


def _taken_back(
    conn: duckdb.DuckDBPyConnection,
    piece: RawPiece,
    future: Future[tuple[pa.Table, Counter[str]]],
) -> Validated:
    staged, unknown = future.result()
    return Validated(piece, repeats_across_pieces(conn, piece, staged), unknown)


def repeats_across_pieces(
    conn: duckdb.DuckDBPyConnection, piece: RawPiece, staged: pa.Table
) -> pa.Table:
    """`staged` (the piece validated alone) with each record whose trace_id an earlier piece
    holds valid (`seen_trace_ids` on `conn`) quarantined as one validating thread does
    (sql/stg_repeats_across_pieces.sql); the same table when there is none."""
    narrow = staged.select(["file_order", "source_file", "source_line", "trace_id", "reason"])
    with raw_records(conn, piece), registered(conn, "piece_trace_ids", narrow):
        changes = conn.sql(load_sql("stg_repeats_across_pieces")).to_arrow_table()
    if changes.num_rows == 0:
        return staged
    keys, changed = record_keys(staged), record_keys(changes)
    order = np.argsort(keys, kind="stable")
    rows = order[np.searchsorted(keys[order], changed)]
    assert np.array_equal(keys[rows], changed)  # each change is a row of the piece
    by_row = np.argsort(rows, kind="stable")
    changes = changes.take(pa.array(by_row))
    mask = np.zeros(staged.num_rows, dtype=bool)
    mask[rows] = True
    replaced = pa.array(mask)
    # the columns a repeat changes; a quarantined record is never outside its day
    values = {name: changes.column(name) for name in ("field", "reason", "raw_record")}
    values["outside_partition_day"] = pa.chunked_array([np.zeros(changes.num_rows, dtype=bool)])
    for name, new in values.items():
        column = staged.column(name).combine_chunks()
        index = staged.schema.get_field_index(name)
        new_column = pc.replace_with_mask(column, replaced, new.combine_chunks().cast(column.type))
        staged = staged.set_column(index, staged.field(index), new_column)
    return staged
