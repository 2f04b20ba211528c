"""The nightly pipeline's assets: traces -> labels -> query_metrics -> segment_metrics ->
regression_report, with the corpus snapshot beside them; the deploy gate follows (`gate.py`).

Thin wiring: each asset calls the warehouse on the run's partition range and returns metadata in
words and numbers. Every asset that touches the DuckDB file is in the `duckdb` pool
(limited to one in dagster_home/dagster.yaml) so runs queue instead of failing on the file lock,
and every partitioned asset backfills a range in one run.
"""

import warnings
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

import dagster as dg

from retrieval_pipeline import gate
from retrieval_pipeline.defs.executor import POOL
from retrieval_pipeline.defs.partitions import daily_partitions, partition_days
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.files import write_atomically
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.reports import regression_html
from retrieval_pipeline.reports.regression import RegressionReport, build_report
from retrieval_pipeline.store import TraceStoreError
from retrieval_pipeline.text import markdown_table
from retrieval_pipeline.warehouse import nightly
from retrieval_pipeline.warehouse.corpus import load_corpus
from retrieval_pipeline.warehouse.ingestion import IngestCounts, ingest_traces
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
    deps: Sequence[dg.AssetsDefinition] = (),
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


@warehouse_asset()
def traces(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    trace_store: TraceStoreResource,
) -> dg.MaterializeResult:
    """The day's trace records, validated into `traces`; the rest in `quarantine` with reasons.

    Each day is replaced in one transaction, so re-running a day never duplicates rows."""
    start, end = partition_days(context)
    store = trace_store.get_store()
    per_day: list[tuple[date, IngestCounts]] = []
    try:
        files_by_day = [(day, store.trace_files(day)) for day in gate.days_between(start, end)]
    except TraceStoreError as exc:
        raise dg.Failure(description=str(exc)) from exc
    with warehouse.get_connection() as conn:
        for day, files in files_by_day:
            try:
                counts = ingest_traces(
                    conn,
                    files,
                    partition_date=day,
                    keep_retrieved_ids=warehouse.store_retrieved_ids,
                )
                per_day.append((day, counts))
            except (TraceFileError, OSError) as exc:
                # the day keeps what it held before: its replacement is one transaction (an
                # OSError: a staging file could not be written, e.g. a full disk)
                raise dg.Failure(description=f"cannot ingest {day.isoformat()}: {exc}") from exc
    read = sum(c.read for _, c in per_day)
    quarantined = sum(c.quarantined for _, c in per_day)
    outside = sum(c.outside_day for _, c in per_day)
    empty = [d.isoformat() for d, c in per_day if c.read == 0]
    summary = (
        f"{read} records from {sum(c.files for _, c in per_day)} file(s): "
        f"{read - quarantined} valid, {quarantined} quarantined"
    )
    if outside:
        summary += (
            f"; {outside} valid record(s) have a timestamp on another UTC day"
            " (kept under the store's day)"
        )
    if empty:
        summary += "; no data for " + ", ".join(empty)
    if not warehouse.store_retrieved_ids:
        summary += (
            "; retrieved id lists not stored (RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS):"
            " n_retrieved keeps each list's length"
        )
    context.log.info(summary)
    return dg.MaterializeResult(
        metadata={
            **range_metadata(start, end),
            "summary": summary,
            "records_read": read,
            "records_valid": read - quarantined,
            "records_quarantined": quarantined,
            "quarantine_rate": quarantined / read if read else float("nan"),
            "duplicate_ids_dropped": sum(c.duplicate_ids_dropped for _, c in per_day),
            "records_outside_day": outside,
            "retrieved_ids_stored": warehouse.store_retrieved_ids,
            "store": store.describe(),
            "per_day": dg.MetadataValue.md(
                markdown_table(
                    ["day", "files", "read", "valid", "quarantined"],
                    [[d.isoformat(), c.files, c.read, c.valid, c.quarantined] for d, c in per_day],
                )
            ),
        }
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
        context.log.warning(summary)
    else:
        context.log.info(summary)
    return dg.MaterializeResult(
        metadata={
            "summary": summary,
            "documents": loaded.documents,
            "rows_rejected": loaded.rejected,
            "first_rejected_rows": "\n".join(loaded.first_rejects),
            "snapshot": str(path or ""),
            "snapshot_read": not loaded.kept,
            "loaded_at": loaded.loaded_at.isoformat() if loaded.loaded_at else "",
        }
    )


@warehouse_asset(deps=[traces, corpus])
def labels(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """(trace, document, grade) for the day, each label marked fresh or stale against the corpus;
    stale labels are never scored."""
    start, end = partition_days(context)
    with warehouse.get_connection() as conn:
        quality = nightly.quality_counts(conn, start, end)
        # a day at a time, so that a backfill's memory is one day's whatever its length
        counts = LabelCounts.total(
            build_labels(conn, day, day, use_corpus=quality.corpus_documents > 0)
            for day in gate.days_between(start, end)
        )
    rate = counts.stale / counts.labels if counts.labels else float("nan")
    summary = (
        f"{counts.labels} labels, {counts.stale} dropped as stale"
        f" ({counts.traces_with_stale} traces affected)"
    )
    return dg.MaterializeResult(
        metadata={
            **range_metadata(start, end),
            "summary": summary,
            "labels": counts.labels,
            "stale_labels": counts.stale,
            "stale_label_rate": rate,
            "traces_with_stale_labels": counts.traces_with_stale,
            "corpus_used": quality.corpus_documents > 0,
        }
    )


@warehouse_asset(deps=[labels])
def query_metrics(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Every configured metric at every configured K for each trace (sql/fct_query_metrics.sql),
    long form: one row per trace and metric, null for unannotated traces."""
    start, end = partition_days(context)
    config = settings.load()
    with warehouse.get_connection() as conn:
        # a day at a time, so that a backfill's memory is one day's whatever its length
        counts = MetricCounts.total(
            compute_query_metrics(
                conn, config.metric_objects(), day, day, config.gain, config.relevance_level
            )
            for day in gate.days_between(start, end)
        )
    summary = (
        f"{counts.traces} traces scored on {', '.join(config.metrics)}: {counts.annotated} "
        f"annotated, {counts.unannotated} unannotated, {counts.no_relevant} with no relevant label"
    )
    return dg.MaterializeResult(
        metadata={
            **range_metadata(start, end),
            "summary": summary,
            "traces": counts.traces,
            "annotated_traces": counts.annotated,
            "unannotated_traces": counts.unannotated,
            "no_relevant_traces": counts.no_relevant,
            "coverage": counts.annotated / counts.traces if counts.traces else float("nan"),
            "metrics": ", ".join(config.metrics),
        }
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
    misses = gate.misses_of(rows)
    statuses = rows["status"].value_counts().to_dict() if not rows.empty else {}
    groups = rows.drop_duplicates(["partition_date", "segment", "variant"]) if len(rows) else rows
    summary = (
        f"{len(groups)} segment/variant rows: "
        + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        if len(rows)
        else "no data: no traces in these partitions"
    )
    return dg.MaterializeResult(
        metadata={
            **range_metadata(start, end),
            "summary": summary,
            "rows": len(rows),
            "misses": len(misses),
            "misses_in_words": "\n".join(m.words(with_day=start != end) for m in misses) or "none",
        }
    )


@warehouse_asset(deps=[segment_metrics])
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
            reports.append(
                build_report(nightly.build_regression_rows(conn, config, day), config, day)
            )
            metrics = regression_html.trend_metrics(reports[-1], config)
            day_trend = read_segment_trend(conn, day, metrics)
            regression_html.write_regression_html(reports[-1], day_trend, config, folder)
    written: list[str] = []
    for day_report in reports:
        stem = folder / f"regression_report_{day_report.partition.isoformat()}"
        write_atomically(
            {
                Path(f"{stem}.md"): day_report.to_markdown(),
                Path(f"{stem}.json"): day_report.to_json(),
            }
        )
        written += [f"{stem}.md", f"{stem}.json", f"{stem}.html"]
    last = reports[-1]
    metadata: dict[str, dg.RawMetadataValue] = {
        **range_metadata(start, end),
        "summary": "\n".join(r.summary() for r in reports),
        "misses": sum(len(r.misses) for r in reports),
        "report": dg.MetadataValue.md(last.to_markdown()),
        "files": "\n".join(written),
        "markdown_path": dg.MetadataValue.path(f"{folder}/regression_report_{end}.md"),
    }
    if start == end:
        # one point per partition: a range run would stamp one day's numbers on every day
        metadata |= {name: value for name, value in last.headline_values().items()}
    return dg.MaterializeResult(metadata=metadata)
