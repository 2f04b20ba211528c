"""The reranker's stages in the nightly: the `stage_metrics` asset scores a day's reranker input
and output (where its span exports hold RERANKER spans) and the reranker's gain, labelled as the
day's first stage is (docs/spans.md, "Stages in the nightly"). The `reranker_stage` check
(checks.py) holds them to `[stages]`."""

from datetime import date

import dagster as dg

from retrieval_pipeline import gate
from retrieval_pipeline.defs.nightly import history
from retrieval_pipeline.defs.nightly.assets import query_metrics, range_metadata, warehouse_asset
from retrieval_pipeline.defs.partitions import partition_days
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.ingest.files import TraceFileError
from retrieval_pipeline.ingest.filesystems import StoreError
from retrieval_pipeline.ingest.phoenix import PhoenixError
from retrieval_pipeline.reports.stages import stage_day_metadata
from retrieval_pipeline.store import MissingDayError, TraceStoreError, day_source, judgment_sources
from retrieval_pipeline.warehouse.sources import TraceSource
from retrieval_pipeline.warehouse.stages import StageDay, score_stage_day, write_stage_day


@warehouse_asset(deps=[query_metrics, dg.AssetKey("corpus"), dg.AssetKey("judgments")])
def stage_metrics(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    trace_store: TraceStoreResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """The reranker's input and output per segment and variant, and its gain over its input per
    segment (paired per span, 95% interval), in `stage_metrics` and `stage_gains`; each span's
    input and output values in `stage_query_metrics`, which the Why of a reranker finding splits
    per query (docs/why.md, "The reranker's stages").

    Each stage is scored in a private run against the retriever's labels, the store's judgments
    and corpus snapshot, with the config's gain, gmax and `judged_only`, as `evaluate --stages`
    scores it. A day without RERANKER spans stores nothing and says "no reranker stage"."""
    start, end = partition_days(context)
    config = settings.load()
    reading = trace_store.span_reading()
    metrics = config.metric_objects()
    per_day: dict[date, StageDay] = {}
    try:
        store = trace_store.get_store()
        corpus = store.corpus_file()
        labelled = {
            "corpus": corpus,
            "gain": config.gain,
            "relevance_level": config.relevance_level,
            "gmax": config.gmax,
            "judged_only": config.judged_only,
            "judgments": list(judgment_sources(store)),
        }
        for day in gate.days_between(start, end):
            try:
                day_source(store, day)
            except MissingDayError:
                continue  # `traces` reports the missing day; nothing is stored for it

            def traces(day: date = day) -> TraceSource:
                return day_source(store, day)

            per_day[day] = score_stage_day(traces, metrics, reading, **labelled)
    except (TraceStoreError, StoreError, TraceFileError, PhoenixError, OSError) as exc:
        raise dg.Failure(description=f"cannot score the reranker stages: {exc}") from exc
    with warehouse.get_connection() as conn:
        for day in gate.days_between(start, end):
            if day in per_day:
                write_stage_day(conn, day, per_day[day])
    headline = list(config.headline_metrics)
    by_day = {
        day: _shown(stage_day_metadata(rows.means, rows.gains, headline))
        for day, rows in per_day.items()
    }
    summary = "\n".join(f"{day.isoformat()}: {meta['summary']}" for day, meta in by_day.items())
    return history.result(
        context,
        start,
        end,
        by_day,
        {**range_metadata(start, end), "range_summary": summary or "no day in the store"},
    )


def _shown(metadata: dict[str, object]) -> history.Metadata:
    """The gains' table as Markdown in the UI; the rest as it is."""
    table = metadata.get("reranker_gains")
    return metadata | ({"reranker_gains": dg.MetadataValue.md(str(table))} if table else {})
