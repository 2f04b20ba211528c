"""The judgments asset: the configured judgments (the TOML's `judgments`), else the store's
`judgments/`, loaded whole into the warehouse, so that each day's ingestion labels the traces that
carry no labels of their own (`warehouse.judgments`)."""

import dagster as dg

from retrieval_pipeline.defs.executor import POOL
from retrieval_pipeline.defs.nightly import history
from retrieval_pipeline.defs.nightly.assets import GROUP, KINDS, SINGLE_RUN
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.ingest.filesystems import StoreError
from retrieval_pipeline.ingest.judgments import JudgmentsFileError
from retrieval_pipeline.store import TraceStoreError, judgment_sources
from retrieval_pipeline.warehouse.judgments import load_judgments


@dg.asset(backfill_policy=SINGLE_RUN, pool=POOL, kinds=KINDS, group_name=GROUP)
def judgments(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    trace_store: TraceStoreResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Graded labels keyed by query (TREC qrels, CSV, JSON lines, Parquet) from the config's
    `judgments` locations, else the store's `judgments/`: they label every trace of their query
    that carries no labels of its own when its day is ingested, whatever the store (a Phoenix
    project included). Lines that cannot be read are kept in `judgment_rejects` with their
    reasons; with neither, the table is left empty."""
    try:
        store = trace_store.get_store()
        configured = settings.load().judgments
        sources = list(configured) if configured else judgment_sources(store)
        with warehouse.get_connection() as conn:
            loaded = load_judgments(conn, sources)
    except (TraceStoreError, StoreError, JudgmentsFileError) as exc:
        raise dg.Failure(description=f"cannot load the judgments: {exc}") from exc
    if sources:
        summary = loaded.words()
    else:
        summary = (
            f"no judgments configured and no judgments/ in {store.describe()}: traces are "
            "scored on their own labels"
        )
    if loaded.quarantined:
        summary += f"; first quarantined: {loaded.first_rejects[0]}"
    return history.told(
        context,
        summary,
        bool(loaded.quarantined),
        {
            "judgments": loaded.judgments,
            "judged_queries": loaded.queries,
            "files": loaded.files,
            "lines_read": loaded.read,
            "lines_quarantined": loaded.quarantined,
            "judgments_superseded": loaded.superseded,
            "first_quarantined_lines": "\n".join(loaded.first_rejects),
            "first_replaced_judgments": "\n".join(loaded.repeats),
            "sources": "\n".join(str(source) for source in sources),
        },
    )
