"""One evaluation of a set of traces, start to finish, in a private DuckDB database.

The `evaluate` command and the `evaluate()` Python function are this module; the nightly pipeline
runs the same warehouse steps partition by partition against the warehouse file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from retrieval_pipeline.ingest.filesystems import S3Settings
from retrieval_pipeline.ingest.source_kinds import open_sources
from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.metrics import (
    DEFAULT_GMAX,
    DEFAULT_METRICS,
    Gain,
    Metric,
    check_gain,
    check_gmax,
    check_relevance_level,
    coverage_metric,
    parse_metrics,
    with_coverage,
    with_residuals,
)
from retrieval_pipeline.pandas_deferred import numbers
from retrieval_pipeline.records import STAGE_RETRIEVER
from retrieval_pipeline.reports.judgment_join import JudgmentJoin
from retrieval_pipeline.reports.per_query import write_batches
from retrieval_pipeline.warehouse.connection import close_scratch, connect, duckdb_config
from retrieval_pipeline.warehouse.corpus import CorpusLoad, load_corpus
from retrieval_pipeline.warehouse.ingestion import IngestCounts, ingest_traces
from retrieval_pipeline.warehouse.judgments import (
    JudgedQueries,
    JudgmentsLoad,
    judged_query_counts,
    load_judgments,
)
from retrieval_pipeline.warehouse.partitions import ALL_DATES
from retrieval_pipeline.warehouse.sources import TraceSource
from retrieval_pipeline.warehouse.sql import load_sql
from retrieval_pipeline.warehouse.steps import (
    LabelCounts,
    MetricCounts,
    build_labels,
    trace_metrics,
)

if TYPE_CHECKING:  # the configuration's models load only where a mapping is given
    import pandas as pd

    from retrieval_pipeline.config import PhoenixConfig, TraceFormatConfig
    from retrieval_pipeline.ingest.phoenix_labels import LabelTally


@dataclass(frozen=True)
class EvaluationRun:
    """The per-trace table, the quarantined records (all of them, or the first
    `quarantine_rows`: see `run_evaluation`) and every count a user is told.

    The tables are Arrow (`rows`, `quarantined`, `judged_values`), so that a command that writes
    Parquet never loads pandas (pandas_deferred); `per_query`, `quarantine` and `judged` are the
    same as pandas objects, made at first use."""

    metrics: tuple[Metric, ...]
    rows: pa.Table
    quarantined: pa.Table
    ingest: IngestCounts
    labels: LabelCounts
    traces: MetricCounts
    corpus: CorpusLoad  # no documents, nothing rejected without a corpus
    # the list-level coverage: judged@K of each trace (aligned with rows, null when
    # unannotated), reported beside the annotation coverage whether or not it was asked for
    judged_metric: str = ""
    judged_values: pa.ChunkedArray | None = None
    judged_only: bool = False
    judgments: JudgmentsLoad = field(default_factory=JudgmentsLoad.none)
    judged_queries: JudgedQueries = field(default_factory=lambda: JudgedQueries(0, 0, 0))
    # how the traces' keys meet the judgments' (None without judgments)
    judgment_join: JudgmentJoin | None = None
    # what a Phoenix day's document annotations gave as labels (None: not a Phoenix day)
    phoenix_labels: LabelTally | None = None

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """`rows` as a DataFrame: one row per valid trace, one column per metric (NaN: none)."""
        return self.rows.to_pandas()

    @cached_property
    def quarantine(self) -> pd.DataFrame:
        """`quarantined` as a DataFrame."""
        return self.quarantined.to_pandas()

    @cached_property
    def judged(self) -> pd.Series | None:
        """`judged_values` as a Series aligned with `per_query` (NaN when unannotated)."""
        if self.judged_values is None:
            return None
        return self.judged_values.to_pandas().astype("float64").rename(self.judged_metric)

    @property
    def judged_share(self) -> float | None:
        """Mean judged@K over the annotated traces (None when none is annotated)."""
        return None if self.judged_values is None else _mean(self.judged_values)[0]

    def means(self) -> dict[str, float | None]:
        """Mean of each metric over its values (None when it has none)."""
        return {name: mean for name, (mean, _) in self._metric_means.items()}

    def means_over(self) -> dict[str, int]:
        """How many values each mean of `means` is taken over: the annotated traces with a value
        of the metric. A mean is never told over traces whose values are missing."""
        return {name: count for name, (_, count) in self._metric_means.items()}

    @cached_property
    def _metric_means(self) -> dict[str, tuple[float | None, int]]:
        """Each metric's mean and the count of values it is taken over (`_mean`), once."""
        return {m.name: _mean(self.rows.column(m.name)) for m in self.metrics}


def _mean(column: pa.ChunkedArray) -> tuple[float | None, int]:
    """The mean of `column`'s values, null and NaN left out (None when none is left), and their
    count: pandas' `dropna().mean()`, summed as numpy sums, so the figures are the same."""
    values = numbers(column.cast(pa.float64()), fill=np.nan)
    kept = values[~np.isnan(values)]
    return (float(kept.mean()) if len(kept) else None), len(kept)


def run_evaluation(
    traces: TraceSource | str | Path,
    metrics: str | Sequence[str] | Sequence[Metric] = DEFAULT_METRICS,
    corpus: str | Path | None = None,
    gain: str = "exponential",
    relevance_level: float = 1,
    quarantine_rows: int | None = None,
    quarantine_file: Path | None = None,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
    spans: SpanReading | None = None,
    judgments: Sequence[str | Path] = (),
    settings: S3Settings | None = None,
    left_out_lines: pa.Table | None = None,
    phoenix: PhoenixConfig | None = None,
) -> EvaluationRun:
    """Validate, filter stale labels and score `traces` (paths or `s3://` URLs, a DataFrame or an
    Arrow table); each rbp@P is reported with its residual; `judged_only` scores condensed lists;
    span exports among the files are read as `spans` says (ingest.span_pieces); `judgments`
    (files, folders, URLs) label the traces that carry no labels of their own
    (`warehouse.judgments`). A Phoenix day named here reads its document annotations as labels
    as `phoenix` (the `[phoenix]` section; None: its defaults) says, as the nightly does, and
    `EvaluationRun.phoenix_labels` counts what they gave.

    Quarantined records (and judgment lines that could not be read) are kept in
    `EvaluationRun.quarantine` all (`quarantine_rows` None) or the first `quarantine_rows`, and
    written to `quarantine_file` (Parquet, CSV or JSON lines) a batch at a time: ten million bad
    lines are not held in memory at once. `left_out_lines` (ingest.line_stream.QUARANTINE_SCHEMA:
    the lines of a TREC run that could not be read) come first in both."""
    parsed = with_residuals(_metrics(metrics))
    checked_gain = check_gain(gain)
    level = check_relevance_level(relevance_level)
    top = check_gmax(gmax)
    if isinstance(traces, str | Path):
        traces = [traces]
    if isinstance(traces, list | tuple):  # named sources: their kinds (ingest.source_kinds)
        traces = open_sources(traces, settings, phoenix)
    # a temporary database file, not an in-memory one: its memory stays within the limit, where
    # an in-memory database holds every table (bench/README.md)
    with tempfile.TemporaryDirectory(prefix="retrieval-pipeline-evaluate-") as folder:
        database = Path(folder) / "evaluation.duckdb"
        conn = connect(database, duckdb_config(), scratch=True)
        try:
            judged = load_judgments(conn, judgments, settings)
            run = _evaluate_in(
                conn,
                traces,
                parsed,
                corpus,
                checked_gain,
                level,
                quarantine_rows,
                gmax=top,
                judged_only=judged_only,
                spans=spans,
                keep_retrieved_ids=bool(judgments),
            )
            tally = getattr(traces, "tally", None)  # a Phoenix day's (ingest.phoenix.PhoenixDay)
            if tally is not None:
                run = replace(run, phoenix_labels=tally)
            if left_out_lines is not None and left_out_lines.num_rows:
                run = replace(run, quarantined=_lines_first(left_out_lines, run.quarantined))
            if quarantine_file is not None:
                batches = _quarantine_batches(conn, bool(judgments), left_out_lines)
                write_batches(batches, quarantine_file)
            if not judgments:
                return run
            start, end = ALL_DATES
            return replace(
                run,
                judgments=judged,
                judged_queries=judged_query_counts(conn, start, end),
                judgment_join=judgment_join(conn),
                quarantined=_with_judgment_rejects(conn, run.quarantined, quarantine_rows),
            )
        finally:
            close_scratch(conn)


def _evaluate_in(
    conn: duckdb.DuckDBPyConnection,
    traces: TraceSource,
    metrics: tuple[Metric, ...],
    corpus: str | Path | None,
    gain: Gain,
    relevance_level: float,
    quarantine_rows: int | None = None,
    *,
    gmax: float,
    judged_only: bool,
    spans: SpanReading | None = None,
    keep_retrieved_ids: bool = False,
) -> EvaluationRun:
    # the lists of retrieved ids are kept only to tell how they meet judgments (judgment_join)
    ingest = ingest_traces(conn, traces, keep_retrieved_ids=keep_retrieved_ids, spans=spans)
    corpus_load = load_corpus(conn, Path(corpus) if corpus is not None else None)
    start, end = ALL_DATES  # the private database holds just this evaluation
    labels = build_labels(conn, start, end, use_corpus=corpus is not None, stale_only=True)
    scored = with_coverage(metrics)
    wide, counts = trace_metrics(
        conn, scored, start, end, gain, relevance_level, gmax=gmax, judged_only=judged_only
    )
    judged_metric = coverage_metric(metrics).name
    judged = wide.column(judged_metric)
    # the coverage column stays out of the per-trace table unless it was asked for
    per_query = (
        wide if judged_metric in {m.name for m in metrics} else wide.drop_columns([judged_metric])
    )
    shown = {"max_rows": _EVERY_ROW if quarantine_rows is None else quarantine_rows}
    conn.complete()
    quarantine = conn.sql(load_sql("rpt_quarantined_records"), params=shown).to_arrow_table()
    return EvaluationRun(
        metrics,
        per_query,
        quarantine,
        ingest,
        labels,
        counts,
        corpus_load,
        judged_metric=judged_metric,
        judged_values=judged,
        judged_only=judged_only,
    )


def judgment_join(conn: duckdb.DuckDBPyConnection) -> JudgmentJoin:
    """How the evaluation's traces meet its judgments (sql/rpt_judgment_join.sql)."""
    row = conn.execute(load_sql("rpt_judgment_join")).fetchone()
    assert row is not None  # one row of counts, always
    shared, judged_ids, retrieved, *examples = row
    keys = [tuple(str(key) for key in (values or ())) for values in examples]
    return JudgmentJoin(int(shared), int(judged_ids), int(retrieved), *keys)


# Quarantined records are written to a file this many at a time; "every row" as a row limit.
_QUARANTINE_BATCH_ROWS = 100_000
_EVERY_ROW = 2**62


def _with_judgment_rejects(
    conn: duckdb.DuckDBPyConnection, quarantine: pa.Table, max_rows: int | None
) -> pa.Table:
    """The quarantined records followed by the judgment lines that could not be read (no
    trace_id), at most `max_rows` in all, so that the quarantine holds every line left out."""
    room = _EVERY_ROW if max_rows is None else max(max_rows - quarantine.num_rows, 0)
    conn.complete()  # DuckDB 2.0: no new query while an earlier execute() has unread rows
    table = conn.sql(load_sql("rpt_judgment_rejects"), params={"max_rows": room}).to_arrow_table()
    if table.num_rows == 0:
        return quarantine
    return pa.concat_tables([quarantine, table.cast(quarantine.schema)])


def _as_quarantined_records(lines: pa.Table, schema: pa.Schema) -> pa.Table:
    """Lines left out (QUARANTINE_SCHEMA) as quarantined records of `schema`: no trace_id."""
    return lines.add_column(2, "trace_id", pa.nulls(lines.num_rows, pa.string())).cast(schema)


def _lines_first(lines: pa.Table, quarantine: pa.Table) -> pa.Table:
    """The quarantine shown in a summary, `lines` first (all of them: they are few, read whole)."""
    return pa.concat_tables([_as_quarantined_records(lines, quarantine.schema), quarantine])


def _quarantine_batches(
    conn: duckdb.DuckDBPyConnection, with_judgments: bool, lines: pa.Table | None = None
) -> pa.RecordBatchReader:
    """`lines` left out before ingestion (a TREC run's), every quarantined record, then every
    judgment line that could not be read, a batch at a time (each statement runs once the one
    before is read: one connection, one result)."""
    every = {"max_rows": _EVERY_ROW}
    records = conn.sql(load_sql("rpt_quarantined_records"), params=every)
    first = records.to_arrow_reader(_QUARANTINE_BATCH_ROWS)
    schema = first.schema

    def batches() -> Iterator[pa.RecordBatch]:
        if lines is not None and lines.num_rows:
            yield from _as_quarantined_records(lines, schema).to_batches()
        yield from first
        if with_judgments:
            rejects = conn.sql(load_sql("rpt_judgment_rejects"), params=every)
            for batch in rejects.to_arrow_reader(_QUARANTINE_BATCH_ROWS):
                yield from pa.Table.from_batches([batch]).cast(schema).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def evaluate(
    traces: TraceSource | str | Path,
    metrics: str | Sequence[str] | Sequence[Metric] = DEFAULT_METRICS,
    corpus: str | Path | None = None,
    gain: str = "exponential",
    relevance_level: float = 1,
    *,
    gmax: float = DEFAULT_GMAX,
    judged_only: bool = False,
    judgments: str | Path | Sequence[str | Path] = (),
    trace_format: TraceFormatConfig | Mapping[str, object] | None = None,
    topics: str | Path | None = None,
    stage: str = STAGE_RETRIEVER,
    settings: S3Settings | None = None,
    phoenix: PhoenixConfig | Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """Per-query metrics: one row per valid trace, one column per metric (null: unannotated).

    `traces` is any source `evaluate` reads (`ingest.source_kinds`: files, folders, `s3://`
    URLs, a Delta table's folder, `phoenix+http://HOST:PORT/PROJECT?day=YYYY-MM-DD`), a DataFrame
    or an Arrow table; `judgments` label the traces without labels of their own; `trace_format`
    (the TOML's `[trace_format]` keys, or its model) and `topics` (a query text to query id file)
    map spans onto records; `stage` picks the stage of reranked spans to score; `phoenix` (the
    TOML's `[phoenix]` keys, or its model) says which document annotations of a Phoenix day are
    labels (None: the section's defaults, as in the nightly)."""
    run = run_evaluation(
        traces,
        metrics,
        corpus,
        gain,
        relevance_level,
        gmax=gmax,
        judged_only=judged_only,
        spans=span_reading(trace_format, topics, stage),
        judgments=[judgments] if isinstance(judgments, str | Path) else list(judgments),
        settings=settings,
        phoenix=_phoenix_section(phoenix),
    )
    return run.per_query


def _phoenix_section(phoenix: PhoenixConfig | Mapping[str, object] | None) -> PhoenixConfig | None:
    """The `[phoenix]` section as its model: a mapping is validated as the TOML's section is."""
    if phoenix is None or not isinstance(phoenix, Mapping):
        return phoenix
    from retrieval_pipeline.config import config_from_mapping

    return config_from_mapping({"phoenix": dict(phoenix)}).phoenix


def span_reading(
    trace_format: TraceFormatConfig | Mapping[str, object] | None = None,
    topics: str | Path | None = None,
    stage: str = STAGE_RETRIEVER,
) -> SpanReading:
    """How spans become records, from the `[trace_format]` keys (a mapping is validated as the
    TOML's section is), a topics file that overrides the section's, and the stage to score.
    With neither, the configuration's models are not loaded (`SpanReading.format`)."""
    if trace_format is None and topics is None:
        return SpanReading(stage=stage)
    from retrieval_pipeline.config import TraceFormatConfig, config_from_mapping

    if trace_format is None:
        chosen = TraceFormatConfig()
    elif isinstance(trace_format, TraceFormatConfig):
        chosen = trace_format
    else:
        chosen = config_from_mapping({"trace_format": dict(trace_format)}).trace_format
    if topics is not None:
        chosen = chosen.model_copy(update={"topics_file": str(topics)})
    return SpanReading(chosen, stage=stage)


def _metrics(metrics: str | Sequence[str] | Sequence[Metric]) -> tuple[Metric, ...]:
    if isinstance(metrics, str):
        return parse_metrics(metrics)
    items = list(metrics)
    if items and all(isinstance(m, Metric) for m in items):
        return tuple(dict.fromkeys(items))  # type: ignore[arg-type]
    return parse_metrics([str(m) for m in items])
