"""Opening the warehouse: the DuckDB file attached with the warehouse's row groups, a UTC session,
the tables and macros of sql/, a migration for older files, and the threads and memory limit.

Knows nothing of Dagster: the pipeline's assets and the `evaluate` command open the same
connections. Opening a warehouse also removes what an interrupted ingestion left
(`recovery.undo_interrupted_ingestions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from retrieval_pipeline import resources_budget
from retrieval_pipeline.warehouse.merged_days import (
    merged_folder,
    missing_parts,
    registered_files,
    show_merged_rows,
)
from retrieval_pipeline.warehouse.recovery import undo_interrupted_ingestions
from retrieval_pipeline.warehouse.session import transaction
from retrieval_pipeline.warehouse.sql import load_sql


class UnreadableDatabaseError(Exception):
    """The database file exists but DuckDB cannot read it (a failed checksum, a file that is not
    DuckDB's): retrying cannot help, unlike a lock another process holds."""


# What DuckDB says, opening a file, when the file itself is damaged or is not a DuckDB database.
_UNREADABLE_FILE_ERRORS = (
    "Corrupt database file",
    "is not a valid DuckDB database file",
    "No more data remaining in MetadataReader",
    "Failed to load metadata pointer",
)


# DuckDB's threads and memory_limit for the warehouse and for `evaluate`, chosen together so that
# no core count runs out of memory (`resources_budget`: 128 MiB a thread, at least 512 MiB, within
# half the machine's memory; $RETRIEVAL_PIPELINE_DUCKDB_THREADS and
# $RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT override either side). DuckDB's own defaults, a thread per
# core and 80% of RAM, failed on 16 cores under a fixed 512MB (docs/scaling.md), and let its block
# cache grow with every day of a backfill.
MEMORY_LIMIT_ENV = resources_budget.MEMORY_LIMIT_ENV
THREADS_ENV = resources_budget.THREADS_ENV


def duckdb_budget(share: int = 1) -> resources_budget.DuckDBBudget:
    """This process's DuckDB threads and memory limit, when `share` processes run at once on this
    machine (the shards of a day); raises `resources_budget.BudgetError` naming a bad variable."""
    return resources_budget.from_environment(share=share)


def duckdb_config(share: int = 1) -> dict[str, object]:
    """`duckdb_budget(share)` as the `config` that `connect` takes."""
    return duckdb_budget(share).config()


def memory_limit() -> str:
    """DuckDB's memory_limit for this process (`duckdb_budget`)."""
    return duckdb_budget().memory_limit


# Rows per row group of the warehouse's tables. DuckDB scans a table a row group per thread: at its
# default of 122,880 rows a day of 100k traces is one row group, scored on one core.
ROW_GROUP_ROWS = 16_384


def connect(
    database: str | Path = ":memory:",
    config: dict[str, Any] | None = None,
    compact_strings: bool = False,
    scratch: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse file (or a private in-memory database) with the warehouse's row groups,
    a UTC session and the tables and macros of sql/; `config` is DuckDB's (e.g. memory_limit).

    The database is attached, not opened directly: the row group size is an option of ATTACH
    only, and DuckDB does not keep it in the file. A `scratch` database is thrown away after use
    (`evaluate`'s): it keeps no write-ahead log, and `close_scratch` closes it without writing
    it out."""
    if str(database) != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    conn = duckdb.connect(":memory:", config=config or {})
    try:
        params = {"database": str(database), "rows": ROW_GROUP_ROWS}
        try:
            if scratch:
                conn.execute(
                    "attach $database as warehouse"
                    " (row_group_size $rows, recovery_mode no_wal_writes)",
                    params,
                )
                conn.execute("set checkpoint_on_detach = 'DISABLED'")
            else:
                conn.execute("attach $database as warehouse (row_group_size $rows)", params)
        except duckdb.Error as exc:
            if not any(words in str(exc) for words in _UNREADABLE_FILE_ERRORS):
                raise
            raise UnreadableDatabaseError(
                f"{database}: DuckDB cannot read this database file ({exc}). The nightly job's"
                " tables are derived from the trace store: move the file aside (keep it to report"
                " the problem) and rebuild the days you need with a backfill (README,"
                ' "Rebuilding the warehouse")'
            ) from exc
        conn.execute("use warehouse")
        prepare(conn, compact_strings)
        merged = merged_folder(conn)
        runs = registered_files(conn, merged)
        show_merged_rows(conn, merged, runs)  # the days' rows left in Parquet, under their names
        missing = missing_parts(runs)
        if missing:
            table, day, run, folder = missing[0]
            raise UnreadableDatabaseError(
                f"{database}: the rows of {day} ({table}, and {len(missing) - 1} more"
                f" table-day(s)) are not in {folder}, where the nightly left them beside the"
                f" warehouse file (run {run}). Put the folder {Path(folder).parents[2]} back"
                " (it goes with the file: copy or move both), or rebuild the warehouse from the"
                ' store (docs/ingestion.md, "Rebuilding the warehouse")'
            )
    except BaseException:
        conn.close()
        raise
    return conn


def close_scratch(conn: duckdb.DuckDBPyConnection) -> None:
    """Close a `scratch` connection without the checkpoint that closing a database does: it
    would write the whole database out once more just before it is deleted."""
    conn.execute("use memory")
    conn.execute("detach warehouse")
    conn.close()


def prepare(conn: duckdb.DuckDBPyConnection, compact_strings: bool = False) -> None:
    """Set the session up for the statements in sql/ and create missing tables.

    Unless `compact_strings`, DuckDB's DICT_FSST string compression is off: on the id lists it
    cost more than validating them, at each checkpoint, for smaller files (bench/README.md,
    "Where the time goes"). `query_metrics` is written with it on all the same
    (`strings_compressed`)."""
    set_time_zone(conn)
    if compact_strings:
        conn.execute("reset disabled_compression_methods")
    else:
        conn.execute("set disabled_compression_methods = 'dict_fsst'")
    conn.execute(load_sql("schema"))
    _add_label_ranks(conn)
    undo_interrupted_ingestions(conn)
    create_macros(conn)


def create_macros(conn: duckdb.DuckDBPyConnection) -> None:
    """The statements' macros (temporary: a connection's own, so each cursor needs them)."""
    conn.execute(load_sql("macros"))
    conn.execute(load_sql("macros_intervals"))


@contextmanager
def strings_compressed(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DICT_FSST string compression on for the block, whatever `prepare` chose.

    For `query_metrics`: its strings repeat (five metric names, a few segments and variants, each
    trace's ids once per metric), so compressed rows are faster to write than raw ones, and the
    comparison window reads its seven days faster (bench/README.md). DuckDB compresses rows when
    it writes them out: an insert of a row group or more as it goes, a smaller one at the next
    checkpoint, which may come after the block (harmless: it is small). The setting is the
    database's, not the cursor's: nothing else may write while the block runs, and `prepare`
    sets no other method."""
    row = conn.execute("select current_setting('disabled_compression_methods')").fetchone()
    was_disabled = bool(row and row[0])
    conn.execute("reset disabled_compression_methods")
    try:
        yield
    finally:
        if was_disabled:
            conn.execute("set disabled_compression_methods = 'dict_fsst'")


def _add_label_ranks(conn: duckdb.DuckDBPyConnection) -> None:
    """Bring a warehouse written before labels carried their rank up to date, in one
    transaction (a no-op for any other)."""
    row = conn.execute(
        "select count(*) from duckdb_columns() where database_name = current_database()"
        " and table_name = 'traces' and column_name = 'n_retrieved'"
    ).fetchone()
    if row is not None and row[0] > 0:
        return
    with transaction(conn):
        conn.execute("alter table traces rename to traces_without_ranks")
        conn.execute(load_sql("schema"))
        conn.execute("insert into traces by name " + load_sql("migrate_label_ranks"))
        conn.execute("drop table traces_without_ranks")


def set_time_zone(conn: duckdb.DuckDBPyConnection) -> None:
    """The session in UTC: a timestamp without an offset means UTC (the trace contract),
    whatever the machine says."""
    conn.execute("set TimeZone = 'UTC'")


def cursor_like(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A second connection to `conn`'s database, in its session's database and time zone (its
    temporary tables, views and macros are its own)."""
    ((database,),) = conn.execute("select current_database()").fetchall()
    cursor = conn.cursor()
    set_time_zone(cursor)
    if database == "warehouse":  # `connect`'s
        cursor.execute("use warehouse")
    elif database != "memory":
        cursor.close()
        raise ValueError(f"a connection to database {database!r}: use warehouse.connection.connect")
    return cursor
