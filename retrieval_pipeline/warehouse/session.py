"""What statements run inside: a transaction, Arrow tables made visible to SQL for a block, and
the file the session's database is in.

The lowest warehouse module (above `sql`): partition writes, recovery and the connection's own
migration all write in these transactions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb


@contextmanager
def transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All or nothing: a partition is never left half replaced."""
    conn.execute("begin transaction")
    try:
        yield
    except BaseException:
        conn.execute("rollback")
        raise
    conn.execute("commit")


@contextmanager
def registered(conn: duckdb.DuckDBPyConnection, name: str, table: object) -> Iterator[None]:
    """`table` (a DataFrame or Arrow table) visible to SQL as `name` for the block."""
    # DuckDB 2.0 refuses register() while an earlier execute() has unread rows.
    conn.complete()
    conn.register(name, table)
    try:
        yield
    finally:
        conn.complete()
        conn.unregister(name)


def database_file(conn: duckdb.DuckDBPyConnection) -> Path | None:
    """The file of the session's database, absolute; None for an in-memory one. What the
    warehouse keeps beside it (an ingestion's staging files, a sharded day's rows) goes in a
    folder named after it."""
    rows = conn.execute(  # fetched whole: DuckDB 2.0 holds an unfinished result against the next
        "select path from duckdb_databases() where database_name = current_database()"
    ).fetchall()
    return Path(rows[0][0]).absolute() if rows and rows[0][0] else None
