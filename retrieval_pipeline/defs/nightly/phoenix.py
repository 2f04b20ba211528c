"""Scores out to a Phoenix store (docs/phoenix.md): the `phoenix_scores` asset, which writes each
scored RETRIEVER span's metrics back to Phoenix as CODE span annotations, and each RERANKER
span's: its output's value and what reranking added (`ndcg@10 gain`).

The labels Phoenix gave are the `traces` asset's metadata (their sources, the HUMAN/LLM
agreement per segment: `history.phoenix_label_metadata`). `phoenix_scores` is defined when the
definitions load with a Phoenix store (`defs.build_defs`); on another store, or with
`[phoenix] write_scores = false`, it writes nothing and says so. A write that fails is a warning
in its metadata: the day is scored and stays materialized, and a rerun writes it again (under
the same identifier, so it updates).
"""

from datetime import date

import dagster as dg

from retrieval_pipeline import gate
from retrieval_pipeline.defs.nightly.assets import query_metrics, range_metadata, warehouse_asset
from retrieval_pipeline.defs.partitions import partition_days
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.ingest.phoenix_annotations import write_span_scores
from retrieval_pipeline.warehouse.phoenix import span_scores

# The warnings of failed writes kept in the metadata; the rest are counted.
KEPT_WARNINGS = 10


def explanation(run_id: str, day: date) -> str:
    """What each span annotation says of where its score came from."""
    return f"retrieval_pipeline nightly run {run_id}, partition {day.isoformat()}"


@warehouse_asset(deps=[query_metrics, dg.AssetKey("stage_metrics")])
def phoenix_scores(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    trace_store: TraceStoreResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Each scored RETRIEVER span's configured metrics, written to Phoenix as CODE span
    annotations (name `ndcg@10`, score the trace's value) under `[phoenix] identifier`, so that
    a rerun updates them, and each scored RERANKER span's: its output's value (`ndcg@10`) and
    output less input (`ndcg@10 gain`); a write that fails is a warning here, never a lost day."""
    start, end = partition_days(context)
    config = settings.load()
    store = trace_store.get_store()
    base = range_metadata(start, end)
    if not isinstance(store, PhoenixStore):
        return dg.MaterializeResult(metadata={**base, "summary": "not a Phoenix store: nothing"})
    if not config.phoenix.write_scores:
        words = "[phoenix] write_scores = false: nothing written"
        return dg.MaterializeResult(metadata={**base, "summary": words})
    written, warnings = 0, []
    with warehouse.get_connection() as conn:
        for day in gate.days_between(start, end):
            scores = span_scores(conn, day, config.metrics, config.phoenix.batch_size)
            result = write_span_scores(
                store,
                scores,
                identifier=config.phoenix.identifier,
                explanation=explanation(context.run.run_id, day),
                batch=config.phoenix.batch_size,
            )
            written += result.written
            warnings += result.warnings
    for warning in warnings:
        context.log.warning(warning)
    metrics = ", ".join(config.metrics)
    summary = f"{written} span annotations written to {store.describe()} ({metrics})"
    if warnings:
        summary += f"; {len(warnings)} batches not written (see warnings): rerun the day to retry"
    return dg.MaterializeResult(
        metadata={
            **base,
            "summary": summary,
            "annotations_written": written,
            "batches_failed": len(warnings),
            "warnings": "\n".join(warnings[:KEPT_WARNINGS]) or "none",
        }
    )
