"""The `live_retrieval_metrics` asset, materialized by the live sensor once per closed window,
and its `live_sustained_drop` check, which fails while a sustained drop is open."""

from __future__ import annotations

import dagster as dg

from retrieval_pipeline.defs.executor import POOL
from retrieval_pipeline.defs.resources import WarehouseResource
from retrieval_pipeline.live.events import drop_verdict
from retrieval_pipeline.warehouse.live import open_alert_reasons

GROUP = "live_monitoring"
LIVE_ASSET_KEY = dg.AssetKey("live_retrieval_metrics")
CHECK_NAME = "live_sustained_drop"

live_retrieval_metrics = dg.AssetSpec(
    LIVE_ASSET_KEY,
    description=(
        "Retrieval quality on sampled live traces, one materialization per closed window "
        "(reported by the live sensor): mean per metric overall and per segment, coverage, "
        "sampled and labelled counts. Rows in the warehouse tables live_window_metrics and "
        "live_alerts."
    ),
    kinds={"duckdb"},
    group_name=GROUP,
)


@dg.asset_check(
    asset=LIVE_ASSET_KEY,
    name=CHECK_NAME,
    blocking=False,
    pool=POOL,
    description="Fails while a live alert (a sustained drop of a metric or of coverage on a "
    "segment) is open. The live sensor evaluates it after every window; run on its own it "
    "reads the open alerts from the warehouse.",
)
def live_sustained_drop(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    """Fails while the warehouse holds a live alert that no recovery closed."""
    with warehouse.get_connection() as conn:
        rows = open_alert_reasons(conn)
    passed, description = drop_verdict([reason for _, _, reason in rows])
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=description,
        metadata={"open_alerts": len(rows)},
    )
