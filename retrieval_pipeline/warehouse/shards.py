"""A sharded day: each shard scored in a private database, then merged into the warehouse exactly.

A shard (`run_shard`) validates, labels and scores its files with the same functions and SQL as
the nightly's single process, in a scratch DuckDB file of its own (never the warehouse: DuckDB
allows one writer per file), and writes the warehouse's rows of its files as Parquet, with its
valid trace ids and its segment statistics, manifest last. The merge
(`merge_shards`) quarantines the valid records whose trace_id another shard holds earlier, as one
process would, and replaces the day in one transaction: the quarantine's rows inserted, the
shards' `traces`, `labels` and `query_metrics` files placed beside the warehouse and registered
(`merged_days`: linked, not inserted, so the merge's time does not grow with the day's rows),
and the day's `segment_statistics`, which `segment_metrics` reads, the shards' pooled (less the
repeated records'). Every later step reads one process's rows under the tables' names
(docs/scaling.md).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.metrics import DEFAULT_GMAX, Gain, Metric
from retrieval_pipeline.shards import MANIFEST, DayFile, filesystem
from retrieval_pipeline.text import json_text
from retrieval_pipeline.warehouse.connection import (
    close_scratch,
    connect,
    duckdb_config,
)
from retrieval_pipeline.warehouse.corpus import load_needed_corpus
from retrieval_pipeline.warehouse.ingestion import ingest_traces
from retrieval_pipeline.warehouse.judgments import load_judgments
from retrieval_pipeline.warehouse.merged_days import (
    MERGED_TABLES,
    merged_folder,
    place,
    register,
    run_file,
    sweep,
)
from retrieval_pipeline.warehouse.partitions import delete_partitions, insert
from retrieval_pipeline.warehouse.session import registered, transaction
from retrieval_pipeline.warehouse.sources import NumberedFiles, raw_record_pieces
from retrieval_pipeline.warehouse.sql import load_sql
from retrieval_pipeline.warehouse.steps import (
    build_labels,
    build_segment_statistics,
    compute_query_metrics,
)
from retrieval_pipeline.warehouse.validation import raw_records

# The warehouse tables a shard writes, whole for its day.
ROW_TABLES = ("traces", "quarantine", "labels", "query_metrics")
# Its other outputs: the statement of each.
SUMMARY_STATEMENTS = {"segment_statistics": "rpt_day_segment_statistics"}
# The counts of a shard's manifest that the merge adds up.
MANIFEST_COUNTS = ("read", "valid", "labels", "stale_labels", "annotated")
# What a shard scored with, in its manifest: every shard of a day must agree.
SCORING = "scoring"
BATCH_ROWS = 65_536


class ShardOutputError(RuntimeError):
    """A shard's output is missing or does not add up; the message names the shard."""


@dataclass(frozen=True)
class MergedDay:
    """What a merge wrote for a day: the shards' counts less the records repeated across them."""

    day: date
    shards: int
    shards_with_files: int
    files: int
    read: int
    valid: int
    quarantined: int
    repeated_across_shards: int
    # of the merged rows (the shards' counts less the repeated records'): the labels, the stale
    # ones, and the valid traces that are annotated
    labels: int
    stale_labels: int
    annotated: int
    # where the day's traces, labels and query_metrics rows are: the shards' files, linked
    rows_folder: str


def export_judgments(conn: duckdb.DuckDBPyConnection, root: str, run_id: str) -> str | None:
    """The warehouse's judgments written as one Parquet judgments file under the run's folder of
    the shard root (a path or an `s3://` URL), for every shard to load; None when there are
    none. The shards then label their traces with what a single process would, whatever the
    store's `judgments/` holds now."""
    table = conn.sql(load_sql("rpt_judgments_export")).to_arrow_table()
    if table.num_rows == 0:
        return None
    fs, base = filesystem(root)
    folder = f"{base.rstrip('/')}/run={run_id}"
    fs.create_dir(folder, recursive=True)
    pq.write_table(table, f"{folder}/judgments.parquet", filesystem=fs)
    return f"{root.rstrip('/')}/run={run_id}/judgments.parquet"


def run_shard(
    files: Sequence[DayFile],
    day: date,
    corpus: Path | None,
    metrics: Sequence[Metric],
    gain: Gain,
    relevance_level: float,
    folder: str,
    shard: int,
    share: int = 1,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
    spans: SpanReading | None = None,
    judgments: Sequence[str | Path] = (),
    keep_retrieved_ids: bool = True,
) -> dict[str, object]:
    """Score shard `shard`'s `files` of `day` and write its outputs under `folder` (a path or an
    `s3://` URL); returns its manifest. `share`: shards running at once on this machine. The
    rest as the single-process steps take them: the scoring options, how span exports are read,
    and the store's judgments (loaded into the shard's own database, as the `judgments` asset
    loads them into the warehouse). `keep_retrieved_ids`: the id lists kept in `traces.parquet`
    as the warehouse's `store_retrieved_ids` keeps them, so that a merged day's Why names the
    documents one process's would (the merge links the file: they cost it nothing).

    Of the corpus snapshot the shard loads only the documents its traces' labels name
    (`load_needed_corpus`), read a batch at a time: its labels are marked stale exactly as against
    the whole snapshot, for the memory of those documents and one batch rather than of the whole
    corpus. The snapshot's unreadable rows are rejected for the needed documents with the
    warehouse's reasons and not reported (the nightly's `corpus` step reports them all), and no
    snapshot is remembered for a next load (the shard's database is thrown away)."""
    numbered = NumberedFiles(tuple((f.order, Path(f.path)) for f in files))
    with tempfile.TemporaryDirectory(prefix="retrieval-pipeline-shard-") as scratch:
        conn = connect(Path(scratch) / "shard.duckdb", duckdb_config(share), scratch=True)
        try:
            load_judgments(conn, judgments)
            ingest = ingest_traces(
                conn,
                numbered,
                partition_date=day,
                keep_retrieved_ids=keep_retrieved_ids,
                spans=spans,
                traces_beside=True,  # as the nightly's: not inserted, read from the file
            )
            corpus_load = load_needed_corpus(conn, corpus, day, day)
            labels = build_labels(conn, day, day, use_corpus=corpus_load.snapshot_has_documents)
            scored = compute_query_metrics(
                conn,
                metrics,
                day,
                day,
                gain,
                relevance_level,
                gmax=gmax,
                judged_only=judged_only,
            )
            build_segment_statistics(conn, day, day)
            fs, base = filesystem(folder)
            fs.create_dir(base, recursive=True)
            rows = _write_outputs(conn, fs, base, day, shard, files)
        finally:
            close_scratch(conn)
    manifest: dict[str, object] = {
        "day": day.isoformat(),
        "shard": shard,
        "folder": folder,
        "files": [f.path for f in files],
        "read": ingest.read,
        "valid": ingest.valid,
        "quarantined": ingest.quarantined,
        "labels": labels.labels,
        "stale_labels": labels.stale,
        "annotated": scored.annotated,
        "rows": rows,
        SCORING: {
            "metrics": [m.name for m in metrics],
            "gain": gain,
            "relevance_level": relevance_level,
            "gmax": gmax,
            "judged_only": judged_only,
        },
    }
    with fs.open_output_stream(f"{base}/{MANIFEST}") as out:  # last: the shard is complete
        out.write(json_text(manifest, indent=2).encode())
    return manifest


def _write_outputs(
    conn: duckdb.DuckDBPyConnection,
    fs: pafs.FileSystem,
    base: str,
    day: date,
    shard: int,
    files: Sequence[DayFile],
) -> dict[str, int]:
    """Write the shard's Parquet files; returns each one's rows."""
    orders = pa.table(
        {"source_file": [f.path for f in files], "file_order": [f.order for f in files]},
        schema=pa.schema([("source_file", pa.string()), ("file_order", pa.int32())]),
    )
    rows = {}
    for table in ROW_TABLES:  # the day's rows, each with its shard
        conn.complete()  # DuckDB 2.0: the result before must be finished first
        relation = conn.table(table).filter(
            duckdb.ColumnExpression("partition_date") == duckdb.ConstantExpression(day)
        )
        relation = relation.select(
            duckdb.StarExpression(), duckdb.ConstantExpression(shard).alias("shard")
        )
        rows[table] = _write_parquet(relation, fs, f"{base}/{table}.parquet")
    conn.complete()
    with registered(conn, "shard_files", orders):
        valid_ids = conn.sql(
            "select $shard as shard, traces.trace_id, shard_files.file_order,"
            " traces.source_file, traces.source_line"
            " from traces inner join shard_files using (source_file)"
            " where traces.partition_date = $day",
            params={"shard": shard, "day": day},
        )
        rows["valid_ids"] = _write_parquet(valid_ids, fs, f"{base}/valid_ids.parquet")
    for name, statement in SUMMARY_STATEMENTS.items():
        conn.complete()
        summary = conn.sql(load_sql(statement), params={"day": day})
        rows[name] = _write_parquet(summary, fs, f"{base}/{name}.parquet")
    return rows


def _write_parquet(result: duckdb.DuckDBPyRelation, fs: pafs.FileSystem, path: str) -> int:
    """Stream a result's rows into one Parquet file (its schema even when it has none). A local
    file is written under another name and renamed, so a retried shard writes a new file, never
    into one a merge has linked beside the warehouse."""
    reader = result.to_arrow_reader(BATCH_ROWS)
    assert reader is not None  # a statement that returns rows
    local = isinstance(fs, pafs.LocalFileSystem)
    written = f"{path}.part" if local else path
    count = 0
    with fs.open_output_stream(written) as out, pq.ParquetWriter(out, reader.schema) as writer:
        for batch in reader:
            writer.write_batch(batch)
            count += batch.num_rows
    if local:
        fs.move(written, path)
    return count


@contextmanager
def _local_copies(folders: Sequence[str]) -> Iterator[list[Path]]:
    """Each shard folder as a local folder DuckDB can read: itself, or a downloaded copy."""
    if all(not folder.startswith("s3://") for folder in folders):
        yield [Path(filesystem(folder)[1]) for folder in folders]
        return
    with tempfile.TemporaryDirectory(prefix="retrieval-pipeline-merge-") as scratch:
        local = []
        for number, folder in enumerate(folders):
            fs, base = filesystem(folder)
            target = Path(scratch) / str(number)
            target.mkdir()
            pafs.copy_files(base, str(target), source_filesystem=fs)
            local.append(target)
        yield local


def read_manifest(folder: str) -> dict[str, object]:
    """A shard's manifest; `ShardOutputError` when it is missing (the shard did not finish)."""
    fs, base = filesystem(folder)
    try:
        with fs.open_input_stream(f"{base}/{MANIFEST}") as source:
            return dict(json.loads(source.read().decode()))
    except (OSError, ValueError) as exc:
        raise ShardOutputError(f"{folder}: no readable shard manifest ({exc})") from exc


def merge_shards(
    conn: duckdb.DuckDBPyConnection, day: date, manifests: Sequence[dict[str, object]]
) -> MergedDay:
    """Replace `day` in the warehouse with the shards' rows, exactly as one process writes it:
    the quarantine and the pooled statistics inserted, the rows of `MERGED_TABLES` placed beside
    the warehouse file and registered (`merged_days`), all in one transaction."""
    folders = [str(manifest["folder"]) for manifest in manifests]
    counts: list[dict[str, int]] = []
    for folder, manifest in zip(folders, manifests, strict=True):
        if read_manifest(folder) != manifest:
            raise ShardOutputError(f"{folder}: its manifest is not the one this run's shard wrote")
        counts.append(_checked_counts(folder, manifest))
    _check_one_scoring(folders, manifests)
    rows_folder = merged_folder(conn)
    if rows_folder is None:
        raise ValueError("a sharded day is merged into a warehouse file, not an in-memory database")
    run = uuid.uuid4().hex
    with _local_copies(folders) as local:

        def files(name: str) -> list[str]:
            return [str(folder / f"{name}.parquet") for folder in local]

        _check_rows(folders, manifests, local)
        conn.execute(  # only the trace_ids valid in two shards or more: few
            "create or replace temp table shard_valid_ids as "
            + load_sql("stg_shard_shared_valid_ids"),
            {"files": files("valid_ids")},
        )
        conn.execute(
            "create or replace temp table shard_repeated as "
            + load_sql("int_shard_repeated_trace_ids")
        )
        ((repeated,),) = conn.execute("select count(*) from shard_repeated").fetchall()
        left_out = [0, 0, 0]  # labels, stale labels, annotated traces of the repeated records
        if repeated:
            row = conn.execute(
                load_sql("agg_shard_repeated_counts"),
                {"label_files": files("labels"), "metric_files": files("query_metrics")},
            ).fetchone()
            assert row is not None  # one row of counts, always
            left_out = [int(count) for count in row]
        conn.execute(  # what the repeated records added to their shards' statistics
            "create or replace temp table shard_repeated_statistics as "
            + load_sql("agg_shard_repeated_statistics")
            + ("" if repeated else " with no data"),
            {
                "trace_files": files("traces"),
                "metric_files": files("query_metrics"),
            },
        )
        texts = _repeated_texts(conn)
        try:
            placed = {table: files(table) for table in MERGED_TABLES}
            numbers = [int(str(m["shard"])) for m in manifests]
            _place_rows(conn, rows_folder, day, run, placed, numbers)
            with registered(conn, "shard_repeated_texts", texts), transaction(conn):
                for table in ROW_TABLES:  # forgets an earlier merge's files of the day too
                    delete_partitions(conn, table, [day])
                register(conn, day, run)
                insert(
                    conn,
                    "quarantine",
                    "int_shard_quarantine",
                    {"day": day, "files": files("quarantine")},
                )
                _pool_statistics(conn, day, files("segment_statistics"), len(manifests))
        finally:  # the files of the run the day had, or of this one when it failed
            sweep(conn, rows_folder)
    conn.execute("drop table shard_valid_ids")
    conn.execute("drop table shard_repeated")
    conn.execute("drop table shard_repeated_statistics")
    read, valid, labels, stale, annotated = (
        sum(shard[key] for shard in counts) for key in MANIFEST_COUNTS
    )
    valid -= int(repeated)
    shard_files = [m["files"] for m in manifests]
    return MergedDay(
        day=day,
        shards=len(manifests),
        shards_with_files=sum(1 for f in shard_files if f),
        files=sum(len(f) for f in shard_files if isinstance(f, list)),
        read=read,
        valid=valid,
        quarantined=read - valid,
        repeated_across_shards=int(repeated),
        labels=labels - left_out[0],
        stale_labels=stale - left_out[1],
        annotated=annotated - left_out[2],
        rows_folder=str(rows_folder),
    )


def _place_rows(
    conn: duckdb.DuckDBPyConnection,
    folder: Path,
    day: date,
    run: str,
    files: dict[str, list[str]],
    numbers: list[int],
) -> None:
    """Each table's shard files in the merged `folder` for the day's `run` (`files`: in the
    order of the shards `numbers`): linked as they are, except a shard's files that hold a
    record repeated across shards, written again without its rows (sql/stg_shard_rows.sql;
    rare: a record repeated across files of two shards)."""
    ((shards,),) = conn.execute("select list(distinct shard) from shard_repeated").fetchall()
    rewritten = [numbers.index(shard) for shard in shards or ()]
    place(folder, day, run, files, skip=rewritten)
    local = pafs.LocalFileSystem()
    for table, paths in files.items():
        for number in rewritten:
            conn.complete()  # DuckDB 2.0: the result before must be finished first
            kept = conn.sql(load_sql("stg_shard_rows"), params={"files": [paths[number]]})
            _write_parquet(kept, local, str(run_file(folder, table, day, run, number)))


def _check_one_scoring(folders: Sequence[str], manifests: Sequence[dict[str, object]]) -> None:
    """Every shard of the day scored with the same metrics and options: else `ShardOutputError`
    naming the first that differs (an output of another configuration, or of an earlier release
    without the record); the fix is to run the day again."""
    for folder, manifest in zip(folders, manifests, strict=True):
        if not isinstance(manifest.get(SCORING), dict):
            raise ShardOutputError(
                f"{folder}: the shard manifest does not say what it scored with (written by an"
                " earlier release?); run the day again"
            )
    first = manifests[0][SCORING] if manifests else None
    for folder, manifest in zip(folders, manifests, strict=True):
        if manifest[SCORING] != first:
            raise ShardOutputError(
                f"{folder}: the shard scored with {manifest[SCORING]}, another shard of the day"
                f" with {first}: the outputs are of two configurations; run the day again"
            )


def _check_rows(
    folders: Sequence[str], manifests: Sequence[dict[str, object]], local: Sequence[Path]
) -> None:
    """Each output file holds the rows its manifest says (read from the file's footer, not its
    rows): else `ShardOutputError` naming the shard and the file, an output cut short or
    written again since; checked before the merge writes anything."""
    for folder, manifest, copy in zip(folders, manifests, local, strict=True):
        rows = manifest["rows"]
        assert isinstance(rows, dict)  # _checked_counts
        for name, expected in rows.items():
            try:
                found = pq.read_metadata(copy / f"{name}.parquet").num_rows
            except (OSError, pa.ArrowInvalid) as exc:
                raise ShardOutputError(
                    f"{folder}: {name}.parquet cannot be read ({exc}); run the day again"
                ) from exc
            if found != expected:
                raise ShardOutputError(
                    f"{folder}: {name}.parquet holds {found} rows where the shard's manifest says"
                    f" {expected}: the output was cut short or written again; run the day again"
                )


def _checked_counts(folder: str, manifest: dict[str, object]) -> dict[str, int]:
    """The shard's counts (`MANIFEST_COUNTS`), once its manifest is known to list every count
    and output file the merge reads: else `ShardOutputError` naming the shard and what is
    missing, a shard of an earlier release (before `segment_statistics.parquet`, say), whose
    outputs this merge cannot read or add up; the fix is to run the day again. Checked before
    the merge writes anything."""
    counts = {key: _count(folder, manifest, key) for key in MANIFEST_COUNTS}
    rows = manifest.get("rows")
    wanted = (*ROW_TABLES, "valid_ids", *SUMMARY_STATEMENTS)
    missing = [name for name in wanted if not isinstance(rows, dict) or name not in rows]
    if missing:
        raise ShardOutputError(
            f"{folder}: the shard wrote no {', '.join(f'{m}.parquet' for m in missing)}"
            " (written by an earlier release?); run the day again"
        )
    return counts


def _count(folder: str, manifest: dict[str, object], key: str) -> int:
    """A count of a shard's manifest; `ShardOutputError` naming the shard when it has none (a
    manifest written by an earlier release: run the day again)."""
    value = manifest.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShardOutputError(
            f"{folder}: the shard manifest has no count {key!r} (written by an earlier release?);"
            " run the day again"
        )
    return value


def _repeated_texts(conn: duckdb.DuckDBPyConnection) -> pa.Table:
    """The text of each record in `shard_repeated`, read again from its file with the same
    reader as the ingestion (a valid record's text is not kept; these are few)."""
    wanted = conn.execute(
        "select file_order, source_file, list(source_line) from shard_repeated"
        " group by file_order, source_file order by file_order"
    ).fetchall()
    found: list[pa.Table] = []
    for order, source_file, lines in wanted:
        _, pieces = raw_record_pieces(conn, NumberedFiles(((int(order), Path(source_file)),)))
        for piece in pieces:
            with raw_records(conn, piece):
                found.append(
                    conn.sql(
                        "select file_order, source_line, raw_record from raw_records"
                        " where list_contains($lines, source_line)",
                        params={"lines": lines},
                    ).to_arrow_table()
                )
    schema = pa.schema(
        [("file_order", pa.int32()), ("source_line", pa.int64()), ("raw_record", pa.string())]
    )
    return pa.concat_tables([t.cast(schema) for t in found]) if found else schema.empty_table()


def _pool_statistics(
    conn: duckdb.DuckDBPyConnection, day: date, statistics: list[str], shards: int
) -> None:
    """Replace `day`'s `segment_statistics` with the shards' pooled, less the repeated records'
    (sql/agg_shard_segment_statistics.sql), inside the merge's transaction. No statement reads
    the day's rows here: the merge's time follows the segments, not the traces."""
    delete_partitions(conn, "segment_statistics", [day])
    insert(
        conn,
        "segment_statistics",
        "agg_shard_segment_statistics",
        {"day": day, "statistics": statistics, "shards": shards},
    )
