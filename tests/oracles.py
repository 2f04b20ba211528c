"""The pandas comparison oracle: the A/B comparison computed from the warehouse's long
`query_metrics` rows in pandas, to hold the warehouse's aggregation (`warehouse.ab_window`) and
the engine's wide table (`ab.pairing.compare_variants`) to the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from retrieval_pipeline.ab.compare import (
    Comparison,
    ComparisonData,
    ComparisonSettings,
    check_request,
    compare_data,
)
from retrieval_pipeline.ab.day import WindowData, arms_present
from retrieval_pipeline.ab.pairing import (
    ID_COLUMNS,
    choose_metrics,
    data_from_long,
    metric_order,
    require_columns,
)
from retrieval_pipeline.config import PipelineConfig


def compare_query_metrics(
    query_metrics: pd.DataFrame,
    control: str,
    candidate: str,
    settings: ComparisonSettings | None = None,
    metrics: Sequence[str] | None = None,
) -> Comparison:
    """Compare on the warehouse's long `query_metrics` rows of a look-back window (query_id,
    segment, variant, metric, value, trace_id and, when present, partition_date). `metrics`
    default: every metric in the rows, the default metrics' order first (pass `config.metrics`
    for the configured order)."""
    settings = settings or ComparisonSettings()
    chosen = query_metrics_choice(query_metrics, metrics)
    check_request(control, candidate, chosen, settings)
    return compare_data(query_metrics_data(query_metrics, control, candidate, chosen), settings)


def query_metrics_choice(
    query_metrics: pd.DataFrame, metrics: Sequence[str] | None
) -> tuple[str, ...]:
    """`choose_metrics` among the metrics of long `query_metrics` rows, in `metric_order`."""
    require_columns(query_metrics, [*ID_COLUMNS, "trace_id", "metric", "value"], "query_metrics")
    available = metric_order([str(m) for m in pd.unique(query_metrics["metric"])])
    return choose_metrics(available, metrics)


def query_metrics_data(
    query_metrics: pd.DataFrame, control: str, candidate: str, metrics: tuple[str, ...]
) -> ComparisonData:
    """`ComparisonData` of long `query_metrics` rows, for `metrics` (see `query_metrics_choice`)."""
    trace_keys = [c for c in ("partition_date", "trace_id") if c in query_metrics.columns]
    long = query_metrics[query_metrics["metric"].isin(metrics)].copy()
    long["_trace"] = long.groupby(trace_keys, sort=False).ngroup()
    long = long[[*ID_COLUMNS, "_trace", "metric", "value"]]
    return data_from_long(long, control, candidate, metrics)


def window_from_rows(rows: pd.DataFrame, config: PipelineConfig) -> WindowData:
    """`WindowData` of a window's long `query_metrics` rows (`compare_query_metrics`' input), in
    pandas; ValueError when a configured metric is not among them."""
    section = config.comparison
    variants = tuple(sorted(str(v) for v in pd.unique(rows["variant"])))
    days = int(rows["partition_date"].nunique()) if len(rows) else 0
    if rows.empty or not arms_present(variants, config):
        return WindowData(days, variants, None)
    metrics = query_metrics_choice(rows, config.metrics)
    data = query_metrics_data(rows, section.control, section.candidate, metrics)
    return WindowData(days, variants, data)
