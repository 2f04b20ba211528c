"""The warehouse steps after ingestion: labels with their staleness, and every metric of every
trace (`query_metrics`, long), each replacing its partitions whole; and the per-trace table
that `evaluate` hands back (wide)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import date
from typing import Self

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.metrics import (
    DEFAULT_GMAX,
    Gain,
    Metric,
    check_gain,
    check_gmax,
    check_relevance_level,
)
from retrieval_pipeline.warehouse.connection import strings_compressed
from retrieval_pipeline.warehouse.partitions import delete_partitions, insert, replace_partitions
from retrieval_pipeline.warehouse.session import registered, transaction
from retrieval_pipeline.warehouse.sql import load_sql


class _Counts:
    """Counts that add up over days."""

    @classmethod
    def total(cls, parts: Iterable[Self]) -> Self:
        items = list(parts)
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        return cls(**{name: sum(getattr(item, name) for item in items) for name in names})


@dataclass(frozen=True)
class LabelCounts(_Counts):
    labels: int
    stale: int
    traces_with_stale: int


@dataclass(frozen=True)
class MetricCounts(_Counts):
    traces: int
    annotated: int
    unannotated: int
    no_relevant: int
    # annotated by the judgments (warehouse.judgments), the others by labels of their own
    by_judgments: int = 0
    # annotated traces that retrieved nothing: empty results, scored 0, never dropped
    empty: int = 0

    @property
    def by_own_labels(self) -> int:
        return self.annotated - self.by_judgments


def build_labels(
    conn: duckdb.DuckDBPyConnection,
    start: date,
    end: date,
    use_corpus: bool,
    stale_only: bool = False,
) -> LabelCounts:
    """Rebuild `labels` for partitions start..end (inclusive), marking stale ones.

    `stale_only` (a private evaluation's): only the stale labels are written, the others counted
    where they are in `traces`: the metrics and the per-trace table read the stale ones only, so
    a copy of every fresh label would be written for nothing. The counts are the same."""
    params = {
        "start_date": start,
        "end_date": end,
        "use_corpus": use_corpus,
        "stale_only": stale_only,
    }
    replace_partitions(conn, "labels", (start, end), "int_labels", params)
    counts = "agg_trace_label_counts" if stale_only else "agg_label_counts"
    row = conn.execute(load_sql(counts), {"start_date": start, "end_date": end}).fetchone()
    labels, stale, traces_with_stale = row if row else (0, 0, 0)
    return LabelCounts(int(labels), int(stale), int(traces_with_stale))


def compute_query_metrics(
    conn: duckdb.DuckDBPyConnection,
    metrics: Sequence[Metric],
    start: date,
    end: date,
    gain: Gain = "exponential",
    relevance_level: float = 1.0,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
) -> MetricCounts:
    """Rebuild `query_metrics` (long: one row per trace and metric) for start..end inclusive;
    `gmax` is the top grade of rbp@P and err@K, `judged_only` scores condensed lists."""
    params = metric_params(metrics, start, end, gain, relevance_level, gmax, judged_only)
    with strings_compressed(conn), transaction(conn):
        # the statistics of the old rows go with them (rebuilt on demand: segment_statistics)
        delete_partitions(conn, "segment_statistics", (start, end))
        delete_partitions(conn, "query_metrics", (start, end))
        insert(conn, "query_metrics", "fct_query_metrics", params)
    row = conn.execute(
        load_sql("agg_metric_counts"),
        {"start_date": start, "end_date": end, "metric": metrics[0].name},
    ).fetchone()
    traces, annotated, no_relevant, by_judgments, empty = row if row else (0, 0, 0, 0, 0)
    return MetricCounts(
        traces=int(traces),
        annotated=int(annotated),
        unannotated=int(traces) - int(annotated),
        no_relevant=int(no_relevant),
        by_judgments=int(by_judgments),
        empty=int(empty),
    )


def metric_params(
    metrics: Sequence[Metric],
    start: date,
    end: date,
    gain: Gain,
    relevance_level: float,
    gmax: float,
    judged_only: bool,
) -> dict[str, object]:
    """The parameters of sql/fct_query_metrics.sql, checked."""
    return {
        "start_date": start,
        "end_date": end,
        "cutoffs": sorted({m.k for m in metrics if m.k is not None}),
        "metric_names": [m.name for m in metrics],
        "relevance_level": check_relevance_level(relevance_level),
        "exponential_gain": check_gain(gain) == "exponential",
        "gmax": check_gmax(gmax),
        "judged_only": bool(judged_only),
    }


def build_segment_statistics(conn: duckdb.DuckDBPyConnection, start: date, end: date) -> None:
    """Rebuild the `segment_statistics` of partitions start..end from their `query_metrics` rows
    (sql/agg_segment_statistics.sql): what `segment_metrics` reads, and what a shard hands the
    merge. A sharded day's, pooled by the merge from its shards, stay (`compute_query_metrics`
    removes them when it rewrites the day's rows); every other partition's are computed again,
    so that they never outlive the rows they sum up."""
    dates: dict[str, object] = {"start_date": start, "end_date": end}
    with transaction(conn):
        conn.execute(load_sql("delete_segment_statistics_of_rows"), dates)
        insert(conn, "segment_statistics", "agg_segment_statistics", dates)


def trace_metrics(
    conn: duckdb.DuckDBPyConnection,
    metrics: Sequence[Metric],
    start: date,
    end: date,
    gain: Gain = "exponential",
    relevance_level: float = 1.0,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
) -> tuple[pa.Table, MetricCounts]:
    """`evaluate`'s per-trace table and its counts, the metrics computed as
    `compute_query_metrics` computes them but never written: the long rows of
    sql/fct_query_metrics.sql are grouped per trace as they come (sql/rpt_query_metrics.sql
    reads them as `scored_rows`), so a private evaluation writes no `query_metrics` rows it
    would read only once.

    One row per trace, in input order: trace_id, query_id, segment, variant, n_retrieved,
    n_relevant, n_stale_labels, then one column per metric (canonical names), null when
    unannotated; an Arrow table, so that `evaluate` writing Parquet never loads pandas
    (pandas_deferred). The counts are `compute_query_metrics`' (sql/agg_metric_counts.sql's)."""
    params = metric_params(metrics, start, end, gain, relevance_level, gmax, judged_only)
    names = [m.name for m in metrics]
    conn.complete()  # DuckDB 2.0: no new query while an earlier execute() has unread rows
    scored = conn.sql(load_sql("fct_query_metrics"), params=params)
    with registered(conn, "scored_rows", scored):
        table = conn.sql(
            load_sql("rpt_query_metrics"),
            params={"start_date": start, "end_date": end, "metric_names": names},
        ).to_arrow_table()
    counts = _trace_counts(table)
    values = table.column("metric_values")
    wide = {column: table.column(column) for column in _TRACE_COLUMNS}
    for i, name in enumerate(names):
        wide[name] = pc.list_element(values, pa.scalar(i, pa.int64())).cast(pa.float64())
    return pa.Table.from_arrays(list(wide.values()), names=list(wide)), counts


# the per-trace table's columns before its metrics (sql/rpt_query_metrics.sql)
_TRACE_COLUMNS = (
    "trace_id",
    "query_id",
    "segment",
    "variant",
    "n_retrieved",
    "n_relevant",
    "n_stale_labels",
)


def _trace_counts(table: pa.Table) -> MetricCounts:
    """sql/agg_metric_counts.sql's counts over a per-trace table (one row per trace, with
    is_annotated and is_judged): annotated, of them with no relevant label, labelled by the
    judgments rather than by labels of their own, and with nothing retrieved."""
    annotated = table.column("is_annotated")

    def among_annotated(mask: pa.ChunkedArray) -> int:
        return int(pc.sum(pc.and_kleene(annotated, mask)).as_py() or 0)

    def none(column: str) -> pa.ChunkedArray:
        values = table.column(column)
        # a typed scalar: pyarrow infers a Python int's type by importing pandas (pandas_deferred)
        return pc.equal(values, pa.scalar(0, values.type))

    n_annotated = int(pc.sum(annotated).as_py() or 0)
    return MetricCounts(
        traces=table.num_rows,
        annotated=n_annotated,
        unannotated=table.num_rows - n_annotated,
        no_relevant=among_annotated(none("n_relevant")),
        by_judgments=among_annotated(pc.invert(table.column("is_judged"))),
        empty=among_annotated(none("n_retrieved")),
    )
