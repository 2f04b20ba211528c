"""Ingestion: a source's records validated into `traces`, the rest into `quarantine` with their
reasons, a piece at a time, a day replaced whole or not at all.

Pieces are read ahead in one thread (`sources.read_ahead`), validated on the caller's connection
(`validation.stage_records`), or by several workers at once on a machine with the cores
(`parallel_validation`), and written behind in another thread (`_written_behind`), so reading,
validating and writing overlap. A new day's pieces go straight into the tables while
`pending_ingestions` names it (`recovery` removes them if the ingestion does not finish); a day
that holds rows keeps them until the new ones are complete, staged as Parquet files.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TypeAlias

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.resources_budget import validation_workers
from retrieval_pipeline.warehouse.connection import ROW_GROUP_ROWS, cursor_like
from retrieval_pipeline.warehouse.day_rows import TracesFile
from retrieval_pipeline.warehouse.judgments import judged_queries
from retrieval_pipeline.warehouse.merged_days import merged_folder
from retrieval_pipeline.warehouse.parallel_validation import (
    create_seen_trace_ids,
    validated_pieces,
)
from retrieval_pipeline.warehouse.partitions import INGESTED_TABLES, delete_partitions, insert
from retrieval_pipeline.warehouse.recovery import undo_interrupted_ingestions
from retrieval_pipeline.warehouse.session import database_file, registered, transaction
from retrieval_pipeline.warehouse.sources import TraceSource, raw_record_pieces, read_ahead
from retrieval_pipeline.warehouse.sql import load_sql
from retrieval_pipeline.warehouse.validation import valid_and_quarantined


@dataclass(frozen=True)
class IngestCounts:
    """What happened to every record read: read == scored + quarantined + skipped."""

    files: int
    read: int
    valid: int
    quarantined: int
    duplicate_ids_dropped: int
    # valid records kept under the store's day although their timestamp is on another UTC day
    outside_day: int = 0
    # spans of other kinds (LLM, CHAIN, ...) or of another stage, read and left out
    skipped: int = 0
    # fields a trace record does not have, each with the number of records that carry it (most
    # first): told to the user, with the closest field name (reports.fields)
    unknown_fields: tuple[tuple[str, int], ...] = ()
    # pieces validated at once (`parallel_validation`): 1 validates them one after the other
    validation_workers: int = 1


def ingest_traces(
    conn: duckdb.DuckDBPyConnection,
    source: TraceSource,
    partition_date: date | None = None,
    keep_retrieved_ids: bool = True,
    spans: SpanReading | None = None,
    traces_beside: bool = False,
) -> IngestCounts:
    """Validate records into `traces`, the rest into `quarantine`: a day is replaced whole or not
    at all.

    Records are validated a piece at a time, so memory does not grow with the size of a day.
    Where nothing is stored yet (a new day) each piece's rows go straight into the tables; else
    they are staged and swapped in at the end (`_piece_writer`).

    With `partition_date` (the trace store's day) every record is stored under that date and that
    date is replaced; the store's day is authoritative, so a valid record whose timestamp falls on
    another UTC day is kept there and counted (`outside_day`). Without, each record goes under the
    UTC date of its own timestamp and every date present is replaced.

    A valid trace that carries no labels of its own gets its query's judgments as labels, when
    `judgments` holds any (`warehouse.judgments`).

    Without `keep_retrieved_ids` each trace is stored with an empty `retrieved_ids` (its
    `n_retrieved`, labels and their ranks as usual): scoring never reads the lists, and storing
    them is most of the insert's cost. For a private database that nothing else reads
    (`evaluate`'s).

    Span exports and Phoenix spans are read as `spans` says (`ingest.span_pieces`); the spans
    left out are counted as read and skipped.

    With `traces_beside`, a day's valid traces (`partition_date`, into a warehouse file) are
    written as Parquet beside the file and registered, not inserted (`day_rows`): the nightly's.
    """
    n_files, pieces = raw_record_pieces(conn, source, spans)
    judged = judged_queries(conn)
    read = valid = duplicates = outside = skipped = 0
    unknown: Counter[str] = Counter()
    dates: set[date] = set() if partition_date is None else {partition_date}
    create_seen_trace_ids(conn)
    ((threads,),) = conn.execute("select current_setting('threads')").fetchall()
    workers = validation_workers(int(threads))
    beside = _traces_file(conn, partition_date) if traces_beside else None
    try:
        with (
            _piece_writer(conn, partition_date, dates, beside) as (write_piece, straight_in),
            _written_behind(
                conn,
                write_piece,
                RowGroupAligner(ROW_GROUP_ROWS, int(threads))
                if straight_in and beside is None
                else None,
                beside,
            ) as write,
            closing(
                validated_pieces(
                    conn,
                    read_ahead(pieces),
                    workers,
                    partition_date,
                    keep_retrieved_ids,
                    judged,
                )
            ) as validated,
        ):
            # not enumerate(): it keeps its last item, which would hold a piece's rows (the
            # largest object of an ingestion) through the next piece's validation
            number = -1
            for done in validated:
                number += 1
                read, skipped = read + done.piece.skipped, skipped + done.piece.skipped
                unknown.update(done.unknown_fields)
                staged = done.staged
                del done  # the rows are held once: re-batching below copies them
                if beside is None:  # for the insert (a Parquet file takes the pieces as they are)
                    staged = _in_batches_per_thread(staged, int(threads))
                with registered(conn, "stg_trace_records", staged):
                    if partition_date is None:  # the dates of this piece's own timestamps
                        rows = conn.execute(
                            "select distinct partition_date from stg_trace_records"
                            " where partition_date is not null"
                        ).fetchall()
                        dates.update(row[0] for row in rows)
                    write(staged, number)
                    conn.execute(
                        "insert into seen_trace_ids select trace_id, file_order, source_file,"
                        " source_line from stg_trace_records where reason is null"
                    )
                    row = conn.execute(load_sql("agg_ingest_counts")).fetchone()
                    assert row is not None
                    read, valid = read + int(row[0]), valid + int(row[1])
                    duplicates, outside = duplicates + int(row[2]), outside + int(row[3])
    except BaseException:
        if beside is not None:
            beside.discard()
        raise
    finally:
        conn.execute("drop table if exists seen_trace_ids")
        conn.execute("drop table if exists judged_queries")
    if beside is not None:
        beside.remove_earlier(conn)
    return IngestCounts(
        files=n_files,
        read=read,
        valid=valid,
        quarantined=read - valid - skipped,
        duplicate_ids_dropped=duplicates,
        outside_day=outside,
        skipped=skipped,
        unknown_fields=tuple(sorted(unknown.items(), key=lambda item: (-item[1], item[0]))),
        validation_workers=workers,
    )


def _traces_file(conn: duckdb.DuckDBPyConnection, partition_date: date | None) -> TracesFile | None:
    """The file for the day's valid traces beside the warehouse file; None where they are
    inserted: an in-memory database, or records dated by their own timestamps (many days)."""
    folder = merged_folder(conn)
    if folder is None or partition_date is None:
        return None
    return TracesFile(conn, folder, partition_date)


# Stores a piece (registered as `stg_trace_records` on the connection it is given) by its number.
PieceWriter: TypeAlias = Callable[[duckdb.DuckDBPyConnection, int], None]


@contextmanager
def _written_behind(
    conn: duckdb.DuckDBPyConnection,
    write_piece: PieceWriter,
    aligner: RowGroupAligner | None,
    beside: TracesFile | None = None,
) -> Iterator[Callable[[pa.Table, int], None]]:
    """`write(staged, number)`: piece `number` stored by `write_piece` in a second thread, on a
    cursor of its own, while the caller validates the next one; the thread's CPU otherwise sat
    idle during the single-threaded parts of validation (bench/README.md). One piece at a time,
    in order; a failed write raises at the next piece or at the end, and nothing is left running
    when the block exits, so an undo never meets a write.

    With an `aligner` (a piece inserted straight into `traces`) each write stores whole row
    groups of valid traces (`RowGroupAligner`): the valid rows past the last whole one wait for
    the next piece, and the rest is stored as the last piece when the block ends. With `beside`
    the valid rows go to that file, and `write_piece` stores the quarantined ones."""
    writer = cursor_like(conn)
    in_flight: list[Future[None]] = []
    last = -1

    def store(staged: pa.Table | None, number: int) -> None:
        if beside is not None and staged is not None:
            staged = beside.keep_valid(staged)
        rows = staged if aligner is None else aligner.rows_to_store(staged)
        if rows is None or rows.num_rows == 0:
            return
        with registered(writer, "stg_trace_records", rows):
            write_piece(writer, number)

    def write(staged: pa.Table | None, number: int) -> None:
        nonlocal last
        last = number
        if in_flight:
            in_flight.pop().result()
        in_flight.append(pool.submit(store, staged, number))

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="write-behind") as pool:
            try:
                yield write
                if aligner is not None:
                    write(None, last + 1)  # the valid rows still waiting
                if in_flight:
                    in_flight.pop().result()
            finally:
                wait(in_flight)
    finally:
        writer.close()


class RowGroupAligner:
    """The rows of each piece to insert straight into `traces`, so that every insert but the
    last writes whole row groups.

    DuckDB writes an insert's rows to the file as it goes, a row group at a time, and its last,
    part-filled row group with them; the next insert starts a new one. At the next checkpoint it
    merges the part-filled row groups with their neighbours, reading and writing them again: at
    1M traces that merge was the most of the ingestion's final commit (bench/README.md). Here
    each insert holds a whole number of row groups of valid rows, in as many record batches as
    DuckDB has threads (each batch a whole number of row groups: each thread writes whole ones);
    the valid rows past them wait for the next piece (fewer than a row group: memory stays a
    piece's), quarantined rows go with the piece they came in."""

    def __init__(self, row_group_rows: int, threads: int) -> None:
        self.row_group_rows = row_group_rows
        self.threads = max(threads, 1)
        self.waiting: pa.Table | None = None

    def rows_to_store(self, staged: pa.Table | None) -> pa.Table | None:
        """The rows to insert now: whole row groups of the valid rows waiting and those of
        `staged`, then `staged`'s quarantined rows; None: `staged` added all it had to the rows
        waiting. `staged` None: every row still waiting (the end of the ingestion)."""
        if staged is None:
            rest, self.waiting = self.waiting, None
            return rest
        valid, quarantined = valid_and_quarantined(staged)
        if self.waiting is not None:
            valid = pa.concat_tables([self.waiting, valid], promote_options="permissive")
        whole = valid.num_rows // self.row_group_rows * self.row_group_rows
        # copied: a slice would hold the whole piece until the next one
        self.waiting = valid.slice(whole).combine_chunks() if whole < valid.num_rows else None
        now = valid.slice(0, whole)
        if quarantined.num_rows:
            now = pa.concat_tables([now, quarantined], promote_options="permissive")
        return self._in_whole_batches(now, whole)

    def _in_whole_batches(self, rows: pa.Table, valid: int) -> pa.Table:
        """`rows` in up to one record batch per thread, each of whole row groups of its first
        `valid` rows (the quarantined rows after them in the last batch)."""
        groups = valid // self.row_group_rows
        per_batch = max(-(-groups // self.threads), 1) * self.row_group_rows
        combined = rows.combine_chunks()
        batches, start = [], 0
        while start < rows.num_rows:
            end = start + per_batch if start + per_batch < valid else rows.num_rows
            batches.extend(combined.slice(start, end - start).to_batches())
            start = end
        return pa.Table.from_batches(batches, combined.schema)


@contextmanager
def _piece_writer(
    conn: duckdb.DuckDBPyConnection,
    partition_date: date | None,
    dates: set[date],
    beside: TracesFile | None = None,
) -> Iterator[tuple[PieceWriter, bool]]:
    """How an ingestion stores a piece.

    Where nothing is stored yet (`partition_date` holds no rows; without one, both tables are
    empty) there is nothing to keep: each piece goes straight in, in a transaction of its own,
    while `pending_ingestions` says so; a failure removes what was written, and a killed run's
    rows are removed by the next `connection.prepare`. Else the day's old rows stay until the new
    ones are complete: pieces are staged as Parquet files, outside any transaction (inside one
    DuckDB keeps every Arrow piece it inserted until the commit, so its memory would grow with the
    day), and one short transaction replaces the dates in `dates` from them at the end.
    With `beside` (the day's valid traces written to that file), the file is registered in the
    transaction that ends the ingestion: the one that says it is no longer pending, or the one
    that replaces the day from the staged files.
    Yields the writer, and whether it inserts straight into the tables."""
    if not _holds_rows(conn, partition_date):
        with transaction(conn):
            conn.execute("insert into pending_ingestions values ($date)", {"date": partition_date})
        try:
            yield (lambda cursor, number: _insert_piece(cursor)), True
            with transaction(conn):
                if beside is not None:
                    beside.register(conn)
                conn.execute("delete from pending_ingestions")
        except BaseException:
            # a connection that cannot undo it now (it broke) leaves it to the next one
            with suppress(duckdb.Error):
                undo_interrupted_ingestions(conn)
            raise
        return
    staged_files: dict[str, list[str]] = {table: [] for table in INGESTED_TABLES}
    with _staging_directory(conn) as staging:

        def stage(cursor: duckdb.DuckDBPyConnection, number: int) -> None:
            for table, path in _write_piece(cursor, staging, number).items():
                staged_files[table].append(path)

        yield stage, False
        _replace_from_staging(conn, sorted(dates), staged_files, beside)


def _holds_rows(conn: duckdb.DuckDBPyConnection, partition_date: date | None) -> bool:
    """Whether `traces` or `quarantine` holds rows of `partition_date` (None: any rows)."""
    row = conn.execute(
        "select exists (select 1 from traces where coalesce(partition_date = $date, true))"
        " or exists (select 1 from quarantine where coalesce(partition_date = $date, true))",
        {"date": partition_date},
    ).fetchone()
    return bool(row and row[0])


def _insert_piece(conn: duckdb.DuckDBPyConnection) -> None:
    """Insert piece `stg_trace_records` into the tables it fills, in one transaction."""
    with transaction(conn):
        for table, statement in INGESTED_TABLES.items():
            insert(conn, table, statement)


@contextmanager
def _staging_directory(conn: duckdb.DuckDBPyConnection) -> Iterator[Path]:
    """A fresh folder for one ingestion's staging files, removed afterwards: beside the warehouse
    file (the disk the user gave it), or in the system's temporary folder for an in-memory one."""
    database = database_file(conn)
    if database is None:
        with tempfile.TemporaryDirectory(prefix="retrieval-pipeline-staging-") as folder:
            yield Path(folder)
        return
    root = database.with_name(database.name + ".staging")
    # Holding the warehouse's write lock, no other ingestion is using this root: what is there was
    # left by a killed one.
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_piece(conn: duckdb.DuckDBPyConnection, staging: Path, number: int) -> dict[str, str]:
    """Write piece `number` (registered as `stg_trace_records`) to staging files, one per table
    in INGESTED_TABLES that it has rows for: {table: path}."""
    written = {}
    for table, statement in INGESTED_TABLES.items():
        path = staging / f"{table}-{number:06d}.parquet"
        if _write_staged(conn, statement, path):
            written[table] = str(path)
    return written


def _replace_from_staging(
    conn: duckdb.DuckDBPyConnection,
    dates: Sequence[date],
    staged_files: dict[str, list[str]],
    beside: TracesFile | None = None,
) -> None:
    """In one transaction, empty the partitions of `dates` in each staged table and insert its
    staging files (`beside`: the day's traces are that file's): the day is replaced whole or not
    at all."""
    with transaction(conn):
        for table, files in staged_files.items():
            delete_partitions(conn, table, dates)
            if files:
                insert(conn, table, "stg_staged_rows", {"files": files})
        if beside is not None:
            beside.register(conn)


def _write_staged(conn: duckdb.DuckDBPyConnection, statement: str, path: Path) -> bool:
    """Write the rows of `sql/<statement>.sql` to `path` as Parquet; False when there are none."""
    rows = conn.sql(load_sql(statement)).to_arrow_table()
    if rows.num_rows == 0:
        return False
    try:
        # read once, right after: no compression, dictionaries or statistics to pay for
        pq.write_table(
            rows,
            path,
            row_group_size=STAGING_ROW_GROUP_ROWS,
            compression="none",
            use_dictionary=False,
            write_statistics=False,
        )
    except OSError as exc:
        raise OSError(
            f"{path}: cannot write a staging file ({exc.strerror or exc}); validated rows are"
            " staged there before they are stored, and nothing was stored"
        ) from exc
    return True


# Row groups of the staging files: the final insert reads one per thread.
STAGING_ROW_GROUP_ROWS = 16_384


def _in_batches_per_thread(table: pa.Table, threads: int) -> pa.Table:
    """`table` in one record batch per DuckDB thread, for inserting it: each thread then writes
    long row groups. Of the shapes measured (one batch, batches of 8,192 rows, one per thread),
    one per thread inserts fastest (bench/README.md)."""
    rows = max(-(-table.num_rows // max(threads, 1)), 1)
    return pa.Table.from_batches(
        table.combine_chunks().to_batches(max_chunksize=rows), table.schema
    )
