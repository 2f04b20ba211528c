"""What statements run inside: a transaction, and Arrow tables made visible to SQL for a block.

The lowest warehouse module (above `sql`): partition writes, recovery and the connection's own
migration all write in these transactions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
