"""The corpus snapshot in the warehouse: `corpus`, `corpus_rejects` and `corpus_snapshot`, read
again only when the file or its statements changed; and a shard's corpus, only the documents its
labels name."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from retrieval_pipeline.ingest.corpus import corpus_fingerprint, corpus_table, scan_corpus
from retrieval_pipeline.warehouse.session import registered, transaction
from retrieval_pipeline.warehouse.sql import load_sql


@dataclass(frozen=True)
class CorpusLoad:
    """What `load_corpus` left in `corpus` and `corpus_rejects`."""

    documents: int
    rejected: int  # rows that could not be read: their documents are left out
    # True: the file was unchanged since it was loaded at `loaded_at`, and was not read again
    kept: bool
    loaded_at: datetime | None  # when the table's snapshot was read; None without a snapshot
    first_rejects: tuple[str, ...] = ()  # `file:line: reason` of the first few rejected rows


# The statements that read a corpus snapshot: a change to them reads an unchanged file again.
_CORPUS_STATEMENTS = ("stg_corpus_rows", "int_corpus")


def load_corpus(conn: duckdb.DuckDBPyConnection, path: Path | None) -> CorpusLoad:
    """Replace `corpus` with the snapshot at `path` (Parquet or CSV); None empties it. Rows that
    cannot be read go to `corpus_rejects` with their reason (sql/stg_corpus_rows.sql).

    A snapshot is not read again while its file and the loader are unchanged since it was loaded
    (`corpus_snapshot` in sql/schema.sql): the nightly job finds the same snapshot most nights, and
    reading tens of millions of documents would be most of its `corpus` step."""
    if path is None:
        with transaction(conn):
            _empty_corpus(conn)
        return CorpusLoad(0, 0, False, None)
    loader = "".join(load_sql(name) for name in _CORPUS_STATEMENTS)
    snapshot = corpus_fingerprint(Path(path)) | {
        "loader": hashlib.sha256(loader.encode()).hexdigest()[:16]
    }
    kept = conn.execute(load_sql("stg_corpus_kept"), snapshot).fetchall()
    if kept:
        ((documents, rejected, loaded_at),) = kept
        return CorpusLoad(documents, rejected, True, loaded_at, _first_corpus_rejects(conn))
    raw = _with_times(corpus_table(Path(path)))
    with registered(conn, "raw_corpus", raw), transaction(conn):
        conn.execute("create or replace temp view corpus_rows as " + load_sql("stg_corpus_rows"))
        _fill_corpus(conn, path)
        conn.execute("drop view corpus_rows")
        ((documents, rejected, loaded_at),) = conn.execute(
            "insert into corpus_snapshot by name select $source_file as source_file,"
            " $size_bytes as size_bytes, $modified_ns as modified_ns, $changed_ns as changed_ns,"
            " $loader as loader, (select count(*) from corpus) as documents,"
            " (select count(*) from corpus_rejects) as rejected, now() as loaded_at"
            " returning documents, rejected, loaded_at",
            snapshot,
        ).fetchall()
    return CorpusLoad(documents, rejected, False, loaded_at, _first_corpus_rejects(conn))


@dataclass(frozen=True)
class NeededCorpus:
    """What `load_needed_corpus` left in `corpus` and `corpus_rejects`."""

    documents: int  # the documents named by the labels that the snapshot holds
    rejected: int  # rows of those documents that could not be read
    # whether the whole snapshot holds a document: the labels are checked against the corpus
    # when it does, as the nightly's `labels` are when the warehouse's `corpus` has documents
    snapshot_has_documents: bool


def load_needed_corpus(
    conn: duckdb.DuckDBPyConnection, path: Path | None, start: date, end: date
) -> NeededCorpus:
    """Replace `corpus` with the documents of the snapshot at `path` that the labels of the traces
    in partitions start..end name (sql/int_label_doc_ids.sql: all that sql/int_labels.sql looks
    up), for a shard (warehouse.shards.run_shard); None empties it. The labels' staleness is then
    the whole snapshot's, for the memory of those documents rather than of the whole snapshot:
    the file is read a part at a time (ingest.corpus.scan_corpus: parts as large as the needed
    documents, each matched against them all), its rows checked by sql/stg_corpus_rows.sql as
    `load_corpus` checks them and only the needed ones kept.

    A needed document's unreadable rows go to `corpus_rejects` with the same reason as in the
    warehouse; other documents' rows, and the rows without a doc_id, are not kept (the shard's
    database is thrown away, and the nightly's `corpus` step reports them all). Nothing goes to
    `corpus_snapshot` (it is emptied): `corpus` is not the whole file, so `load_corpus` must never
    take it for a loaded snapshot, and a shard's private database has none to keep."""
    if path is None:
        with transaction(conn):
            _empty_corpus(conn)
        return NeededCorpus(0, 0, False)
    conn.execute(
        "create or replace temp table corpus_needed_ids as " + load_sql("int_label_doc_ids"),
        {"start_date": start, "end_date": end},
    )
    ((needed,),) = conn.execute("select count(*) from corpus_needed_ids").fetchall()
    try:
        has_documents = scan_corpus(
            Path(path), lambda tables: _keep_needed(conn, tables), rows=int(needed)
        )
        with transaction(conn):
            _fill_corpus(conn, path)
    finally:
        conn.execute("drop table if exists corpus_rows")
        conn.execute("drop view if exists corpus_file_rows")
        conn.execute("drop table corpus_needed_ids")
    ((documents, rejected),) = conn.execute(
        "select (select count(*) from corpus), (select count(*) from corpus_rejects)"
    ).fetchall()
    return NeededCorpus(int(documents), int(rejected), has_documents)


# A snapshot without rows: the shape of its checked rows when the file has none.
_NO_ROWS = pa.schema(
    [(name, pa.string()) for name in ("doc_id", "added_at", "deleted_at")]
    + [("source_line", pa.int64())]
).empty_table()


def _keep_needed(conn: duckdb.DuckDBPyConnection, tables: Iterator[pa.Table]) -> bool:
    """Fill the temp table `corpus_rows` with the rows of the needed documents in `tables`,
    checked (sql/stg_corpus_rows.sql, then sql/stg_corpus_needed_rows.sql), a statement per table
    (one statement over the whole file as a stream held memory that grew with the file). Returns
    whether any row of them all can be read (sql/agg_corpus_has_documents.sql, asked until one
    can). Starts over when called again, as `scan_corpus` may."""
    conn.execute("drop table if exists corpus_rows")
    has_documents = False
    for table in tables:
        with registered(conn, "raw_corpus", _with_times(table)):
            _checked_rows(conn)
            if not has_documents:
                ((has_documents,),) = conn.execute(load_sql("agg_corpus_has_documents")).fetchall()
            conn.execute("insert into corpus_rows " + load_sql("stg_corpus_needed_rows"))
    with registered(conn, "raw_corpus", _NO_ROWS):
        _checked_rows(conn)  # no table at all: `corpus_rows` without rows
    return bool(has_documents)


def _checked_rows(conn: duckdb.DuckDBPyConnection) -> None:
    """The view `corpus_file_rows`: the rows of `raw_corpus` checked (sql/stg_corpus_rows.sql);
    and the table `corpus_rows` of their shape, if there is none yet."""
    conn.execute("create or replace temp view corpus_file_rows as " + load_sql("stg_corpus_rows"))
    conn.execute(
        "create temp table if not exists corpus_rows as select * from corpus_file_rows limit 0"
    )


_Raw = TypeVar("_Raw", pa.Table, pa.RecordBatch)


def _with_times(raw: _Raw) -> _Raw:
    """The snapshot's rows with added_at and deleted_at, null where it has no such column."""
    for column in ("added_at", "deleted_at"):
        if column not in raw.column_names:
            raw = raw.append_column(column, pa.nulls(raw.num_rows, pa.string()))
    return raw


def _fill_corpus(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    """`corpus` and `corpus_rejects` from the checked rows in `corpus_rows` (sql/int_corpus.sql),
    replacing what they held; `corpus_snapshot` is emptied."""
    _empty_corpus(conn)
    conn.execute("insert into corpus by name " + load_sql("int_corpus"))
    conn.execute(
        "insert into corpus_rejects by name select $source_file as source_file, source_line,"
        " doc_id, field, reason, added_given::varchar as added_at,"
        " deleted_given::varchar as deleted_at"
        " from corpus_rows where reason is not null",
        {"source_file": str(path)},
    )


def _empty_corpus(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("delete from corpus")
    conn.execute("delete from corpus_rejects")
    conn.execute("delete from corpus_snapshot")


def _first_corpus_rejects(conn: duckdb.DuckDBPyConnection, count: int = 5) -> tuple[str, ...]:
    rows = conn.execute(
        "select source_file, source_line, reason from corpus_rejects"
        " order by source_line limit $count",
        {"count": count},
    ).fetchall()
    return tuple(f"{file}:{line}: {reason}" for file, line, reason in rows)
