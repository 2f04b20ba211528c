"""A day's `traces` rows written beside the warehouse file by its ingestion, not inserted.

An ingestion of a day into a warehouse file (the nightly's `traces` step) writes the valid
traces' rows into one Parquet file, a row group at a time as its pieces are validated, in a run
folder of the day's merged rows (`merged_days`: `<warehouse file>.merged/traces/
partition_date=D/run=R/`), and registers the run in the transaction that replaces the day, as a
sharded day's merge registers its shards' files. Every statement then reads the rows under the
name `traces`. Writing them costs pyarrow a fraction of what DuckDB's insert of the same rows
cost (their id lists: a hundred strings a trace), the largest share of the nightly's ingestion
(bench/README.md, "A day's traces beside the warehouse").
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import suppress
from datetime import date
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.warehouse.connection import ROW_GROUP_ROWS
from retrieval_pipeline.warehouse.merged_days import (
    qualified,
    register,
    run_file,
    run_folder,
    sweep,
)
from retrieval_pipeline.warehouse.partitions import delete_partitions
from retrieval_pipeline.warehouse.validation import valid_and_quarantined

# The few-valued text columns are dictionary-encoded (cheap, and a fraction of the size); the id
# lists are written plain: encoding a hundred distinct strings a trace cost more than it saved.
_DICTIONARY = ["segment", "variant", "label_source", "source_file"]
# Statistics of the columns a statement filters on; none of the lists'.
_STATISTICS = ["partition_date", "trace_id", "query_id", "served_at", "source_line"]


class TracesFile:
    """The Parquet file of one ingestion's valid traces of `day`, in the merged `folder` of the
    session's warehouse file: written piece by piece (`keep_valid`), unregistered until the
    ingestion completes (`register`), removed when it does not (`discard`)."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, folder: Path, day: date) -> None:
        self.folder = folder
        self.day = day
        self.run = uuid.uuid4().hex
        self.path = run_file(folder, "traces", day, self.run, 0)
        # the columns of a shard's traces file (`warehouse.shards`), so one pattern reads both
        conn.complete()
        self.schema = (
            conn.sql(f"select *, 0 as shard from {qualified(conn, 'traces')} limit 0")
            .to_arrow_table()
            .schema
        )
        self._writer: pq.ParquetWriter | None = None
        self._registered = False

    @property
    def _part(self) -> Path:
        """The file while it is written (the merged rows' pattern reads `*.parquet` only)."""
        return self.path.with_name(self.path.name + ".part")

    def keep_valid(self, staged: pa.Table) -> pa.Table:
        """Write the valid rows of `staged` (rows of sql/stg_trace_records.sql, repeats dropped)
        to the file; returns the quarantined rows, for the `quarantine` table."""
        valid, quarantined = valid_and_quarantined(staged)
        self._write(valid)
        return quarantined

    def _write(self, valid: pa.Table) -> None:
        if valid.num_rows == 0:
            return
        shard = pa.array(np.zeros(valid.num_rows, dtype=np.int32))
        columns = [shard if name == "shard" else valid.column(name) for name in self.schema.names]
        rows = pa.Table.from_arrays(columns, names=self.schema.names).cast(self.schema)
        try:
            if self._writer is None:
                self._part.parent.mkdir(parents=True, exist_ok=True)
                self._writer = pq.ParquetWriter(
                    self._part,
                    self.schema,
                    compression="none",
                    use_dictionary=_DICTIONARY,
                    write_statistics=_STATISTICS,
                )
            self._writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)
        except OSError as exc:
            raise self._error(exc) from exc

    def register(self, conn: duckdb.DuckDBPyConnection) -> None:
        """The day's `traces` are this file's rows (none: a day without a valid trace), inside
        the caller's transaction that replaces the day: the day's stored rows and any earlier
        run's files are forgotten, and the session's `traces` view reads the new file."""
        delete_partitions(conn, "traces", [self.day])
        if self._finish():
            register(conn, self.day, self.run, tables=("traces",))
        self._registered = True

    def remove_earlier(self, conn: duckdb.DuckDBPyConnection) -> None:
        """After the day is replaced: remove the files no longer registered (the day's earlier
        run, one a killed ingestion left)."""
        sweep(conn, self.folder)

    def _finish(self) -> bool:
        """Close the file under its own name; whether it holds rows."""
        if self._writer is None:
            return False
        try:
            self._writer.close()
            self._writer = None
            os.replace(self._part, self.path)
        except OSError as exc:
            raise self._error(exc) from exc
        return True

    def discard(self) -> None:
        """Remove what was written (the ingestion failed: the day keeps what it held); nothing
        once the file is registered (the day's rows are then its)."""
        if self._registered:
            return
        if self._writer is not None:
            with suppress(OSError):  # a full disk: the file goes all the same
                self._writer.close()
            self._writer = None
        shutil.rmtree(run_folder(self.folder, "traces", self.day, self.run), ignore_errors=True)

    def _error(self, exc: OSError) -> OSError:
        return OSError(
            f"{self._part}: cannot write the day's traces beside the warehouse file"
            f" ({exc.strerror or exc}); nothing was stored"
        )
