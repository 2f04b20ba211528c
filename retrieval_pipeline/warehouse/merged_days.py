"""The days' rows left in Parquet beside the warehouse file, read under the tables' own names:
a sharded day's shards' files, and the traces an ingestion writes there (`day_rows`: the
nightly's every day).

The merge of a sharded day (`warehouse.shards.merge_shards`) does not insert the day's `traces`,
`labels` and `query_metrics` rows into the warehouse file: it places each shard's Parquet file of
the table beside it (a hard link where the shard root is on the same disk, else a copy), under
`<warehouse file>.merged/<table>/partition_date=YYYY-MM-DD/run=<merge>/`, and registers the day's
run in `merged_parts` in the transaction that replaces the day. So the merge's time does not grow
with the day's rows (docs/scaling.md, "The merge step").

Every connection `connect` opens shows those rows under the table's name: a temporary view
`traces` (and `labels`, `query_metrics`) over the stored table and the registered files
(`sql/macros_merged_days.sql`), which shadows the stored table for every statement in sql/, so
no reader changes. Writes name the stored table (`partitions.stored`), and replacing a day's
partitions of a table (`partitions.delete_partitions`) unregisters its files too: one process
scoring a merged day again writes its rows as it always did. Files no longer registered (a day
written again, a merge that failed) are removed at the next merge (`sweep`).
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Collection, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import TypeAlias

import duckdb

from retrieval_pipeline.warehouse.session import database_file
from retrieval_pipeline.warehouse.sql import load_sql

# The tables whose merged days stay in Parquet; their views' file lists are session variables.
MERGED_TABLES = ("traces", "labels", "query_metrics")
FOLDER_SUFFIX = ".merged"
_VARIABLE = "merged_day_files_{table}"
_VERSIONS = itertools.count()


def merged_folder(conn: duckdb.DuckDBPyConnection) -> Path | None:
    """The folder of the session's warehouse file for merged days' rows; None for a database
    that has no file (an in-memory one keeps a merged day's rows in its tables)."""
    database = database_file(conn)
    return None if database is None else database.with_name(database.name + FOLDER_SUFFIX)


# A registered run: its table, day and run, the folder its files are in, and those files.
RunFiles: TypeAlias = tuple[str, date, str, Path, list[Path]]


def registered_files(conn: duckdb.DuckDBPyConnection, folder: Path | None) -> list[RunFiles]:
    """Every run of `merged_parts` with the Parquet files its folder in `folder` holds (none
    where `folder` is None: a database without a file)."""
    runs = []
    for table, day, run in _registered(conn):
        looked_in = run_folder(folder or Path(), table, day, run)
        found = [] if folder is None else sorted(looked_in.glob("*.parquet"))
        runs.append((table, day, run, looked_in, found))
    return runs


def show_merged_rows(
    conn: duckdb.DuckDBPyConnection,
    folder: Path | None,
    runs: list[RunFiles] | None = None,
) -> None:
    """(Re)create each table's view over its stored rows and the files of its runs registered in
    `merged_parts` (in `folder`, `merged_folder`; `runs`: `registered_files`, when the caller
    has them), or drop it where none is registered. Called whenever the registered runs change
    (`register`, `unregister`), inside their transaction: a rollback restores the view as it was.

    The view names the files one by one rather than a pattern filtered by `merged_parts`: with
    that filter DuckDB could not estimate the rows, and joined a day's 8.7M labels to the corpus
    the wrong way round (twice the time, bench/README.md)."""
    if folder is None or not folder.is_dir():  # never merged into: the tables alone
        return
    files: dict[str, list[str]] = {table: [] for table in MERGED_TABLES}
    for table, _, _, _, found in registered_files(conn, folder) if runs is None else runs:
        files[table] += [_literal_pattern(str(path)) for path in found]
    if any(files.values()):
        conn.execute(load_sql("macros_merged_days"))
    for table, paths in files.items():
        if not paths:
            conn.execute(f"drop view if exists temp.main.{table}")
            continue
        # a new variable each time: a view rolled back still reads the list it was made with
        variable = f"{_VARIABLE.format(table=table)}_{next(_VERSIONS)}"
        conn.execute(f"set variable {variable} = $files", {"files": paths})
        stored_table = qualified(conn, table)
        # identifiers of MERGED_TABLES, a counter and the session's own database; no value is
        # pasted
        conn.execute(
            f"create or replace temp view {table} as select * from {stored_table}"
            f" union all by name select * from merged_day_rows(getvariable('{variable}'))"
        )


def _literal_pattern(path: str) -> str:
    """`path` as a file pattern that matches only itself: DuckDB reads `*`, `?` and `[` in a
    pattern as wildcards, and a warehouse's folder may hold any of them."""
    return "".join(f"[{char}]" if char in "*?[" else char for char in path)


def qualified(conn: duckdb.DuckDBPyConnection, table: str) -> str:
    """`table` of the session's database, by its full name: a temporary view of the same name
    (`show_merged_rows`) takes the unqualified one. The caller checks the table's name."""
    ((database,),) = conn.execute("select current_database()").fetchall()
    return '"' + str(database).replace('"', '""') + f'".main.{table}'


def missing_parts(runs: list[RunFiles]) -> list[tuple[str, date, str, Path]]:
    """The registered runs (`registered_files`) whose folder holds no file (the folder moved or
    deleted): (table, day, run, the folder looked in). Their rows would be missing from every
    statement without a word, so `connect` refuses the warehouse instead."""
    return [(table, day, run, looked_in) for table, day, run, looked_in, found in runs if not found]


def _registered(conn: duckdb.DuckDBPyConnection) -> list[tuple[str, date, str]]:
    """Every (table, day, run) of `merged_parts`."""
    rows = conn.execute(
        "select table_name, partition_date, run from merged_parts order by all"
    ).fetchall()
    return [(str(table), day, str(run)) for table, day, run in rows]


def place(
    folder: Path,
    day: date,
    run: str,
    files: Mapping[str, Sequence[str]],
    skip: Collection[int] = (),
) -> None:
    """Put each table's shard files (`files`: table -> local Parquet paths, in shard order) in
    the day's `run` folder of the merged `folder`, unregistered until `register`. A file is
    linked, or copied where it cannot be; those at the positions `skip` are left to the caller,
    which writes them anew."""
    for table, paths in files.items():
        run_folder(folder, table, day, run).mkdir(parents=True, exist_ok=True)
        for number, source in enumerate(paths):
            if number in skip:
                continue
            destination = run_file(folder, table, day, run, number)
            try:
                os.link(source, destination)
            except OSError:  # another disk, or a file system without links
                shutil.copyfile(source, destination)


def run_folder(folder: Path, table: str, day: date, run: str) -> Path:
    """Where a merge `run` keeps the files of `table` for `day`."""
    return folder / table / f"partition_date={day.isoformat()}" / f"run={run}"


def run_file(folder: Path, table: str, day: date, run: str, number: int) -> Path:
    """Where `place` puts shard file `number` of `table` for the day's `run`."""
    return run_folder(folder, table, day, run) / f"shard-{number:04d}.parquet"


def register(
    conn: duckdb.DuckDBPyConnection,
    day: date,
    run: str,
    tables: Sequence[str] = MERGED_TABLES,
) -> None:
    """The day's rows of `tables` are those of `run`'s files (inside the transaction that has
    just deleted the day's partitions, which unregistered any earlier run)."""
    conn.execute(
        load_sql("insert_merged_parts"),
        {"tables": list(tables), "day": day, "run": run},
    )
    show_merged_rows(conn, merged_folder(conn))


def unregister(
    conn: duckdb.DuckDBPyConnection, table: str, dates: Sequence[date] | tuple[date, date]
) -> None:
    """Forget the merged files of `table` for the dates (a list, or an inclusive range)."""
    if table not in MERGED_TABLES:
        return
    span = dates if isinstance(dates, tuple) else (None, None)
    listed = [] if isinstance(dates, tuple) else list(dates)
    ((forgotten,),) = conn.execute(
        load_sql("delete_merged_parts"),
        {"table": table, "start_date": span[0], "end_date": span[1], "dates": listed},
    ).fetchall()
    if forgotten:  # the view changes only where a run was registered
        show_merged_rows(conn, merged_folder(conn))


def sweep(conn: duckdb.DuckDBPyConnection, folder: Path) -> int:
    """Remove the run folders of the merged `folder` no longer registered (a day written again,
    a merge that failed) and the day folders left empty; returns the run folders removed. Called
    with the warehouse's write lock held, by the merge, so no other process reads them."""
    if not folder.is_dir():
        return 0
    kept = {(table, day.isoformat(), run) for table, day, run in _registered(conn)}
    removed = 0
    for table in MERGED_TABLES:
        for day_folder in sorted((folder / table).glob("partition_date=*")):
            day_text = day_folder.name.partition("=")[2]
            for run_folder in sorted(day_folder.glob("run=*")):
                if (table, day_text, run_folder.name.partition("=")[2]) not in kept:
                    shutil.rmtree(run_folder, ignore_errors=True)
                    removed += 1
            if not any(day_folder.iterdir()):
                day_folder.rmdir()
    return removed
