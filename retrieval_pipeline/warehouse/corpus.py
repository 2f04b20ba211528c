"""The corpus snapshot in the warehouse: `corpus`, `corpus_rejects` and `corpus_snapshot`, read
again only when the file or its statements changed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from retrieval_pipeline.ingest.corpus import corpus_fingerprint, corpus_table
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
    raw = corpus_table(Path(path))
    for column in ("added_at", "deleted_at"):
        if column not in raw.column_names:
            raw = raw.append_column(column, pa.nulls(raw.num_rows, pa.string()))
    with registered(conn, "raw_corpus", raw), transaction(conn):
        conn.execute("create or replace temp view corpus_rows as " + load_sql("stg_corpus_rows"))
        _empty_corpus(conn)
        conn.execute("insert into corpus by name " + load_sql("int_corpus"))
        conn.execute(
            "insert into corpus_rejects by name select $source_file as source_file, source_line,"
            " doc_id, field, reason, added_given::varchar as added_at,"
            " deleted_given::varchar as deleted_at"
            " from corpus_rows where reason is not null",
            {"source_file": str(path)},
        )
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
