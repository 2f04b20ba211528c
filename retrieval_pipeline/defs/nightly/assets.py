"""The nightly pipeline's assets: traces -> labels -> query_metrics -> segment_metrics ->
regression_report, with the corpus snapshot beside them; the deploy gate follows (`gate.py`).

Thin wiring: each asset calls the warehouse on the run's partition range and returns metadata in
words and numbers. Every asset that touches the DuckDB file is in the `duckdb` pool
(limited to one in dagster_home/dagster.yaml) so runs queue instead of failing on the file lock,
and every partitioned asset backfills a range in one run.
"""

import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd

from retrieval_pipeline import gate
from retrieval_pipeline.defs.executor import POOL
from retrieval_pipeline.defs.nightly import history
from retrieval_pipeline.defs.nightly.metrics_file import write_day
from retrieval_pipeline.defs.partitions import daily_partitions, partition_days
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.files import write_atomically
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.ingest.filesystems import StoreError
from retrieval_pipeline.ingest.phoenix import PhoenixDay, PhoenixError
from retrieval_pipeline.ingest.phoenix_labels import LabelTally
from retrieval_pipeline.labels.agreement import agreement_by_segment
from retrieval_pipeline.reports import judged, regression_html
from retrieval_pipeline.reports.regression import RegressionReport, build_report
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.store import MissingDayError, TraceStoreError, day_source
from retrieval_pipeline.warehouse import attribution, nightly
from retrieval_pipeline.warehouse.corpus import load_corpus
from retrieval_pipeline.warehouse.ingestion import IngestCounts, ingest_traces
from retrieval_pipeline.warehouse.judgments import judged_query_counts
from retrieval_pipeline.warehouse.phoenix import read_label_pairs, replace_label_pairs
from retrieval_pipeline.warehouse.sources import TraceSource
from retrieval_pipeline.warehouse.stage_why import explain_stage_day
from retrieval_pipeline.warehouse.stages import read_stage_gains, read_stage_metrics
from retrieval_pipeline.warehouse.steps import (
    LabelCounts,
    MetricCounts,
    build_labels,
    compute_query_metrics,
)
from retrieval_pipeline.warehouse.trend import read_segment_trend

# Single-run backfills need `backfill_policy`, which Dagster 1.13 still labels beta; the warning
# would print once per asset on every load and says nothing a user can act on.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)

KINDS = {"duckdb"}
SINGLE_RUN = dg.BackfillPolicy.single_run()
GROUP = "retrieval_eval"


def warehouse_asset(
    deps: Sequence[dg.AssetsDefinition | dg.AssetKey] = (),
) -> Callable[[Callable[..., dg.MaterializeResult]], dg.AssetsDefinition]:
    """A daily asset that writes the warehouse: one pool, single-run backfills, DuckDB kind."""
    return dg.asset(
        partitions_def=daily_partitions,
        backfill_policy=SINGLE_RUN,
        pool=POOL,
        kinds=KINDS,
        group_name=GROUP,
        deps=list(deps),
    )


def range_metadata(start: date, end: date) -> dict[str, str]:
    """The run's partition range as metadata (the checks record it, and the gate compares)."""
    return {"partition_start": start.isoformat(), "partition_end": end.isoformat()}


@warehouse_asset(deps=[dg.AssetKey("judgments")])
def traces(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    trace_store: TraceStoreResource,
) -> dg.MaterializeResult:
    """The day's trace records, validated into `traces`; the rest in `quarantine` with reasons.

    Span exports among the day's files, or a Phoenix store's spans, become records through the
    config's `[trace_format]`; their first stage (the retriever) is what is scored. A trace with
    no labels of its own is labelled by its query's judgments, if any; on a Phoenix store, by
    its document annotations first (docs/phoenix.md). Each day is replaced in one transaction,
    so re-running a day never duplicates rows."""
    start, end = partition_days(context)
    spans = trace_store.span_reading()
    per_day: list[tuple[date, IngestCounts]] = []
    files_by_day: list[tuple[date, TraceSource]] = []
    missing: dict[date, str] = {}
    tallies: dict[date, LabelTally] = {}  # what a Phoenix store's annotations gave, per day
    try:
        store = trace_store.get_store()
        for day in gate.days_between(start, end):
            try:
                files_by_day.append((day, day_source(store, day)))
            except MissingDayError as exc:
                missing[day] = str(exc)  # the days the store has are scored all the same
    except (TraceStoreError, StoreError) as exc:
        raise dg.Failure(description=str(exc)) from exc
    if not files_by_day:
        raise dg.Failure(description="\n".join(missing.values()))
    with warehouse.get_connection() as conn:
        for day, files in files_by_day:
            try:
                counts = ingest_traces(
                    conn,
                    files,
                    partition_date=day,
                    keep_retrieved_ids=warehouse.store_retrieved_ids,
                    spans=spans,
                    traces_beside=True,
                )
                per_day.append((day, counts))
                if isinstance(files, PhoenixDay) and files.store.labels is not None:
                    replace_label_pairs(conn, day, files.tally.pairs)
                    tallies[day] = files.tally
            except (TraceFileError, PhoenixError, OSError) as exc:
                # the day keeps what it held before: its replacement is one transaction (an
                # OSError: a staging file could not be written, e.g. a full disk)
                raise dg.Failure(description=f"cannot ingest {day.isoformat()}: {exc}") from exc
            except (duckdb.IOException, duckdb.OutOfMemoryException) as exc:
                # a new day's rows go straight in: a full disk fails the write itself (what was
                # written is removed, `warehouse.ingestion`)
                words = " ".join(str(exc).split())
                raise dg.Failure(
                    description=f"cannot ingest {day.isoformat()}: the warehouse could not be "
                    f"written ({words})"
                ) from exc
    note = (
        ""
        if warehouse.store_retrieved_ids
        else "; retrieved id lists not stored (RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS):"
        " n_retrieved keeps each list's length"
    )
    total = history.ingest_metadata(per_day, missing, note)
    level = trace_store.pipeline_config().relevance_level if tallies else 1.0
    phoenix = history.phoenix_label_metadata(list(tallies.values()), level) if tallies else {}
    context.log.info(str(total["summary"]))
    for day, reason in missing.items():
        context.log.warning(f"{reason}: nothing scored for {day.isoformat()}")
    by_day = {day: history.ingest_metadata([(day, c)], {}, note) for day, c in per_day}
    for day, tally in tallies.items():
        by_day[day] |= history.phoenix_label_metadata([tally], level)
        if tally.quarantined:
            context.log.warning(f"{day.isoformat()}: {tally.summary()}")
    for day, reason in missing.items():
        by_day[day] = history.ingest_metadata([], {day: reason}, note)
    return history.result(
        context,
        start,
        end,
        by_day,
        {
            **range_metadata(start, end),
            "range_summary": total["summary"],
            "retrieved_ids_stored": warehouse.store_retrieved_ids,
            # the days' traces are written there, not inserted (docs/ingestion.md)
            "rows_folder": dg.MetadataValue.path(warehouse.rows_folder()),
            "store": store.describe(),
            "per_day": history.ingest_table(per_day),
            **phoenix,
        },
    )


@dg.asset(backfill_policy=SINGLE_RUN, pool=POOL, kinds=KINDS, group_name=GROUP)
def corpus(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    trace_store: TraceStoreResource,
) -> dg.MaterializeResult:
    """The current corpus snapshot (the store's newest file), which makes labels stale.

    Without a snapshot the table is empty and no label is treated as stale. A snapshot file that
    has not changed since it was loaded is not read again."""
    store = trace_store.get_store()
    try:
        path = store.corpus_file()
    except TraceStoreError as exc:
        raise dg.Failure(description=str(exc)) from exc
    with warehouse.get_connection() as conn:
        loaded = load_corpus(conn, path)
    if path is None:
        summary = f"no corpus snapshot in {store.describe()}: stale-label filtering is off"
    elif loaded.kept:
        summary = (
            f"{loaded.documents} documents from {path}, kept as loaded at"
            f" {loaded.loaded_at:%Y-%m-%d %H:%M:%S} UTC: the file has not changed since"
        )
    else:
        summary = f"{loaded.documents} documents read from {path}"
    if loaded.rejected:
        summary += (
            f"; {loaded.rejected} row(s) could not be read and their documents are left out"
            f" (table corpus_rejects), first: {loaded.first_rejects[0]}"
        )
    return history.told(
        context,
        summary,
        bool(loaded.rejected),
        {
            "documents": loaded.documents,
            "rows_rejected": loaded.rejected,
            "first_rejected_rows": "\n".join(loaded.first_rejects),
            "snapshot": str(path or ""),
            "snapshot_read": not loaded.kept,
            "loaded_at": loaded.loaded_at.isoformat() if loaded.loaded_at else "",
        },
    )


@warehouse_asset(deps=[traces, corpus])
def labels(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """(trace, document, grade) for the day, each label marked fresh or stale against the corpus;
    stale labels are never scored."""
    start, end = partition_days(context)
    with warehouse.get_connection() as conn:
        quality = nightly.quality_counts(conn, start, end)
        # a day at a time, so that a backfill's memory is one day's whatever its length
        per_day = {
            day: build_labels(conn, day, day, use_corpus=quality.corpus_documents > 0)
            for day in gate.days_between(start, end)
        }
        judged_queries = judged_query_counts(conn, start, end)
    total = history.label_metadata(LabelCounts.total(per_day.values()))
    if judged_queries.judged:
        total["summary"] = (
            f"{total['summary']}; {judged_queries.judged} judged queries,"
            f" {judged_queries.without_trace} of them with no trace in these days"
        )
    return history.result(
        context,
        start,
        end,
        {day: history.label_metadata(c) for day, c in per_day.items()},
        {
            **range_metadata(start, end),
            "range_summary": total["summary"],
            "corpus_used": quality.corpus_documents > 0,
            "judged_queries": judged_queries.judged,
            "judged_queries_without_trace": judged_queries.without_trace,
        },
    )


@warehouse_asset(deps=[labels])
def query_metrics(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Every configured metric at every configured K for each trace (sql/fct_query_metrics.sql),
    and the judged share of its top K (the list-level coverage), long form: one row per trace and
    metric, null for unannotated traces; on condensed lists with `judged_only`."""
    start, end = partition_days(context)
    config = settings.load()
    metrics = config.scored_metrics()
    names = [m.name for m in metrics]
    with warehouse.get_connection() as conn:
        # a day at a time, so that a backfill's memory is one day's whatever its length
        per_day = {
            day: compute_query_metrics(
                conn,
                metrics,
                day,
                day,
                config.gain,
                config.relevance_level,
                gmax=config.gmax,
                judged_only=config.judged_only,
            )
            for day in gate.days_between(start, end)
        }
    lists = config.judged_only
    total = history.metric_metadata(MetricCounts.total(per_day.values()), names, lists)
    return history.result(
        context,
        start,
        end,
        {day: history.metric_metadata(c, names, lists) for day, c in per_day.items()},
        {
            **range_metadata(start, end),
            "range_summary": total["summary"],
            "judged_only": config.judged_only,
        },
    )


@warehouse_asset(deps=[query_metrics])
def segment_metrics(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Per segment and variant, and overall per variant (segment `__all__`): traces, annotated
    traces, coverage, each metric's mean with a 95% interval, its threshold status and margin."""
    start, end = partition_days(context)
    config = settings.load()
    with warehouse.get_connection() as conn:
        rows = nightly.build_segment_metrics(conn, config, start, end)
    coverage_metric = config.coverage_metric()
    by_day = {}
    for day in gate.days_between(start, end):
        of_day = rows[rows["partition_date"].dt.date == day] if len(rows) else rows
        by_day[day] = history.segment_metadata(of_day, False) | _judged_metadata(
            of_day, coverage_metric
        )
    total = history.segment_metadata(rows, with_day=True)
    return history.result(
        context,
        start,
        end,
        by_day,
        {
            **range_metadata(start, end),
            "range_summary": total["summary"],
            "range_misses_in_words": total["misses_in_words"],
        },
    )


@warehouse_asset(deps=[segment_metrics, dg.AssetKey("stage_metrics")])
def regression_report(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """The day against its baseline (trailing 7 days by default), per segment, variant and metric:
    value, baseline, delta, threshold, status; every miss in words. Written as Markdown, JSON and
    self-contained HTML files; the headline metrics are numeric metadata so the UI plots them."""
    start, end = partition_days(context)
    config = settings.load()
    folder = settings.reports_folder(warehouse)
    reports: list[RegressionReport] = []
    with warehouse.get_connection() as conn:
        for day in gate.days_between(start, end):
            rows = nightly.build_regression_rows(conn, config, day)
            stages = (read_stage_metrics(conn, day, day), read_stage_gains(conn, day, day))
            sources = nightly.label_sources(conn, day)
            pairs = agreement_by_segment(read_label_pairs(conn, day), config.relevance_level)
            agreement = tuple((segment, a.describe()) for segment, a in pairs.items())
            report = build_report(rows, config, day, sources, stages, agreement)
            report = replace(report, stage_why=explain_stage_day(conn, config, day, *stages))
            reports.append(attribution.with_why(conn, config, report))
            metrics = regression_html.trend_metrics(reports[-1], config)
            day_trend = read_segment_trend(conn, day, metrics)
            regression_html.write_regression_html(reports[-1], day_trend, config, folder)
    written: list[str] = []
    by_day: dict[date, history.Metadata] = {}
    for day_report in reports:
        stem = folder / f"regression_report_{day_report.partition.isoformat()}"
        write_atomically(
            {
                Path(f"{stem}.md"): day_report.to_markdown(),
                Path(f"{stem}.json"): day_report.to_json(),
            }
        )
        written += [f"{stem}.md", f"{stem}.json", f"{stem}.html"]
        by_day[day_report.partition] = history.report_metadata(day_report, str(stem))
    with warehouse.get_connection() as conn:
        metrics_file = write_day(conn, end)  # the newest day of the range, for Prometheus
    return history.result(
        context,
        start,
        end,
        by_day,
        {
            **range_metadata(start, end),
            **metrics_file,
            "range_summary": "\n".join(r.summary() for r in reports),
            "range_files": "\n".join(written),
        },
    )


def _judged_metadata(rows: pd.DataFrame, coverage_metric: str) -> history.Metadata:
    """The list-level coverage beside the annotation coverage: each variant's judged share
    (overall), and the warnings of a variant judged much less than another."""
    shares = judged.judged_shares(rows, coverage_metric) if len(rows) else {}
    words = judged.segment_gap_warnings(rows, coverage_metric) if len(rows) else []
    return {
        **{
            f"{coverage_metric} ({variant})": share
            for (segment, variant), share in sorted(shares.items())
            if segment == OVERALL_SEGMENT
        },
        "judged_share_warnings": "\n".join(words) or "none",
    }
