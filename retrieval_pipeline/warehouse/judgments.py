"""Judgments in the warehouse: loaded whole into `judgments`, and given as labels to the traces
of their query that carry none of their own, as each piece of a day is ingested.

The rule (issue 23): judgments label every trace of their query that has neither relevant_ids nor
relevance_scores; a trace that names labels of its own (even an empty list) is scored on those
alone. A trace labelled by judgments keeps `is_judged` false (it named no labels) and gets the
judgments as its `labels`, each with its rank in retrieved_ids, so that the stale-label rules and
the metrics treat them exactly as labels given inline; "labelled by judgments" is then `not
is_judged and labels <> []`. Judgments apply when a day is ingested: after a new judgments file,
re-run the days it should label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.ingest.filesystems import S3Settings
from retrieval_pipeline.warehouse.session import registered, transaction
from retrieval_pipeline.warehouse.sql import load_sql

if TYPE_CHECKING:
    from retrieval_pipeline.ingest.judgments import Judgments


@dataclass(frozen=True)
class JudgmentsLoad:
    """What a load of judgments did: `read == kept + quarantined`, `kept == judgments +
    superseded` (a pair judged again keeps its latest judgment)."""

    files: int
    read: int
    kept: int
    quarantined: int
    superseded: int
    judgments: int
    queries: int
    first_rejects: tuple[str, ...] = ()
    repeats: tuple[str, ...] = ()

    @classmethod
    def none(cls) -> JudgmentsLoad:
        return cls(0, 0, 0, 0, 0, 0, 0)

    def words(self) -> str:
        """One sentence for a summary or a log."""
        text = (
            f"{self.judgments} judgments of {self.queries} queries from {self.files} file(s): "
            f"{self.read} lines read, {self.quarantined} quarantined"
        )
        if self.superseded:
            text += f", {self.superseded} replaced by a later judgment of the same pair"
        return text


@dataclass(frozen=True)
class JudgedQueries:
    """Judged queries against the traces of a range of days: a judged query with no trace is
    counted, not an error."""

    judged: int
    with_traces: int
    without_trace: int


def load_judgments(
    conn: duckdb.DuckDBPyConnection,
    sources: Sequence[str | Path],
    settings: S3Settings | None = None,
) -> JudgmentsLoad:
    """Read the judgments of `sources` (files, folders, `s3://` URLs; none: no judgments) and
    replace `judgments` and `judgment_rejects` with them in one transaction."""
    read = None
    if sources:  # the judgment readers are imported only where judgments are given
        from retrieval_pipeline.ingest.judgments import read_judgments

        read = read_judgments(list(sources), settings)
    with transaction(conn):
        conn.execute("delete from judgments")
        conn.execute("delete from judgment_rejects")
        if read is not None:
            with (
                registered(conn, "loaded_judgments", read.table),
                registered(conn, "loaded_rejects", read.quarantine),
            ):
                conn.execute("insert into judgments by name " + load_sql("stg_loaded_judgments"))
                conn.execute(
                    "insert into judgment_rejects by name " + load_sql("stg_judgment_rejects")
                )
    return _load_counts(read) if read is not None else JudgmentsLoad.none()


def _load_counts(read: Judgments) -> JudgmentsLoad:
    rejects = read.quarantine.slice(0, 5).to_pylist()
    return JudgmentsLoad(
        files=read.files,
        read=read.read,
        kept=read.kept,
        quarantined=read.quarantined,
        superseded=read.superseded,
        judgments=read.table.num_rows,
        queries=read.queries,
        first_rejects=tuple(
            f"{row['source_file']}:{row['source_line']}: {row['reason']}" for row in rejects
        ),
        repeats=read.repeats,
    )


def judged_queries(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether any query is judged; if so the temporary table `judged_queries`
    (sql/int_judged_queries.sql) holds them for this connection's ingestion."""
    row = conn.execute("select count(*) from judgments").fetchone()
    if not row or not row[0]:
        conn.execute("drop table if exists judged_queries")
        return False
    conn.execute("create or replace temp table judged_queries as " + load_sql("int_judged_queries"))
    return True


def with_judged_labels(conn: duckdb.DuckDBPyConnection, staged: pa.Table) -> pa.Table:
    """`staged` (rows of sql/stg_trace_records.sql, repeats not yet dropped) with the judgments'
    labels on each valid trace that carries none of its own and whose query is judged
    (`judged_queries` must exist). Only those rows go through DuckDB, with their id lists; the
    others are left as they are."""
    unlabelled = pc.and_(pc.is_null(staged["reason"]), pc.invert(staged["is_judged"]))
    rows = np.flatnonzero(pc.fill_null(unlabelled, False).to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return staged
    taken = pa.array(rows)
    subset = pa.table(
        {
            "row_number": taken,
            "query_id": staged["query_id"].take(taken),
            "retrieved_ids": staged["retrieved_ids"].take(taken),
        }
    )
    with registered(conn, "unlabelled_traces", subset):
        found = conn.sql(load_sql("stg_judged_labels")).to_arrow_table()
    if found.num_rows == 0:
        return staged
    labels = staged["labels"].combine_chunks()
    given = found["labels"].combine_chunks().cast(labels.type)
    picks = np.arange(staged.num_rows, dtype=np.int64)
    picks[found["row_number"].to_numpy()] = staged.num_rows + np.arange(found.num_rows)
    merged = pa.concat_arrays([labels, given]).take(pa.array(picks))
    sources = staged["label_source"].combine_chunks().cast(pa.string())
    judged_sources = found["label_sources"].combine_chunks().cast(pa.string())
    merged_sources = pa.concat_arrays([sources, judged_sources]).take(pa.array(picks))
    # a trace's own label_source, where it names one, is kept
    merged_sources = pc.coalesce(sources, merged_sources)
    staged = staged.set_column(staged.schema.get_field_index("labels"), "labels", merged)
    index = staged.schema.get_field_index("label_source")
    return staged.set_column(index, "label_source", merged_sources)


def judged_query_counts(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> JudgedQueries:
    """Judged queries, and how many have a trace in partitions start..end."""
    row = conn.execute(
        load_sql("agg_judged_queries"), {"start_date": start, "end_date": end}
    ).fetchone()
    judged, with_traces, without = row if row else (0, 0, 0)
    return JudgedQueries(int(judged), int(with_traces), int(without))
