"""Recovery: the rows of an ingestion that wrote straight into the tables and did not finish are
removed when the warehouse is next opened (`connection.prepare`) or by the ingestion itself."""

from __future__ import annotations

import duckdb

from retrieval_pipeline.warehouse.partitions import ALL_DATES, INGESTED_TABLES, delete_partitions
from retrieval_pipeline.warehouse.session import transaction


def undo_interrupted_ingestions(conn: duckdb.DuckDBPyConnection) -> None:
    """Remove the rows of ingestions that wrote straight into the tables and did not finish
    (`pending_ingestions`), in one transaction: their dates are back to holding nothing."""
    pending = [
        row[0] for row in conn.execute("select partition_date from pending_ingestions").fetchall()
    ]
    if not pending:
        return
    with transaction(conn):
        for table in INGESTED_TABLES:
            # null: the tables were empty when it started, so every row is its
            delete_partitions(conn, table, ALL_DATES if None in pending else pending)
        conn.execute("delete from pending_ingestions")
