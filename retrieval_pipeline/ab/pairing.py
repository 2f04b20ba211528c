"""Pairing: the comparison's aggregated input (`ComparisonData`) from a per-trace table, in pandas.

`compare_variants` takes the engine's wide per-trace table; `data_from_long` does the pairing on
long rows (one per trace and metric), as `sql/rpt_comparison_*.sql` do it in the warehouse: each
arm's traces of a query averaged, the queries both arms served and valued paired, each arm's
summary over its annotated traces, and the coverage counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from retrieval_pipeline.ab.compare import (
    Comparison,
    ComparisonData,
    ComparisonSettings,
    SegmentCoverage,
    check_request,
    compare_data,
)
from retrieval_pipeline.ab.stats import ArmSummary, PairedDifferences
from retrieval_pipeline.metrics import DEFAULT_METRICS, MetricConfigError, parse_metric
from retrieval_pipeline.segments import OVERALL_SEGMENT

ID_COLUMNS = ("query_id", "segment", "variant")


def _metric_columns(frame: pd.DataFrame) -> list[str]:
    found = []
    for column in frame.columns:
        try:
            if parse_metric(str(column)).name == column:
                found.append(str(column))
        except MetricConfigError:
            continue
    return found


def metric_order(names: Sequence[str]) -> list[str]:
    """Metric names in report order: the default metrics' order first, then by name."""
    order = {name: i for i, name in enumerate(DEFAULT_METRICS)}
    return sorted(names, key=lambda name: (order.get(name, len(order)), name))


def choose_metrics(available: Sequence[str], metrics: Sequence[str] | None) -> tuple[str, ...]:
    """The metrics to compare: `metrics` (canonical, each among `available`), default all of
    `available`; ValueError naming what is missing."""
    if metrics is None:
        chosen = tuple(available)
    else:
        chosen = tuple(dict.fromkeys(parse_metric(name).name for name in metrics))
        missing = [name for name in chosen if name not in available]
        if missing:
            raise ValueError(
                f"metric(s) {', '.join(missing)} not in the table; it has: "
                f"{', '.join(available) or '(none)'}"
            )
    if not chosen:
        raise ValueError("the table holds no metric column (e.g. ndcg@10, mrr)")
    return chosen


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """ValueError naming the columns `frame` lacks of `columns`; `what` names the table."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s): {', '.join(missing)}")


def compare_variants(
    per_query: pd.DataFrame,
    control: str,
    candidate: str,
    settings: ComparisonSettings | None = None,
    metrics: Sequence[str] | None = None,
) -> Comparison:
    """Compare `candidate` with `control` on a wide per-trace table (one row per trace: query_id,
    segment, variant, one column per metric, NaN when unannotated); `metrics` default: every
    metric column."""
    settings = settings or ComparisonSettings()
    require_columns(per_query, ID_COLUMNS, "the per-query table")
    chosen = choose_metrics(_metric_columns(per_query), metrics)
    check_request(control, candidate, chosen, settings)
    frame = per_query.reset_index(drop=True)
    frame["_trace"] = np.arange(len(frame))
    long = frame.melt(
        id_vars=[*ID_COLUMNS, "_trace"],
        value_vars=list(chosen),
        var_name="metric",
        value_name="value",
    )
    return compare_data(data_from_long(long, control, candidate, chosen), settings)


def data_from_long(
    long: pd.DataFrame, control: str, candidate: str, metrics: tuple[str, ...]
) -> ComparisonData:
    """`ComparisonData` of long rows (query_id, segment, variant, _trace: a trace number, metric,
    value), in pandas; `sql/rpt_comparison_*.sql` compute the same in the warehouse."""
    if control == candidate:
        raise ValueError(f"control and candidate are the same variant {control!r}")
    long = long.astype({"query_id": str, "segment": str, "variant": str})
    long["value"] = pd.to_numeric(long["value"], errors="coerce").astype(float)
    variants = tuple(sorted(pd.unique(long["variant"])))
    long = long[long["variant"].isin([control, candidate])]
    segments = tuple(sorted(pd.unique(long["segment"])))
    pairs: dict[tuple[str, str], PairedDifferences] = {}
    levels: dict[tuple[str, str, str], ArmSummary] = {}
    coverage: dict[str, SegmentCoverage] = {}
    for segment in (*segments, OVERALL_SEGMENT):
        rows = long if segment == OVERALL_SEGMENT else long[long["segment"] == segment]
        coverage[segment] = _coverage(rows, segment, control, candidate)
        valued = rows[rows["value"].notna()]
        for (metric, variant), group in valued.groupby(["metric", "variant"])["value"]:
            levels[(segment, str(metric), str(variant))] = ArmSummary.of(group)
        # a query's traces in one arm averaged first (NaN: no value in that arm)
        means = rows.groupby(["metric", "query_id", "variant"])["value"].mean().unstack("variant")
        means = means.reindex(columns=[control, candidate])
        for metric in metrics:
            if metric not in means.index:
                continue
            paired = means.loc[metric].dropna()
            if len(paired):
                x = paired[control].to_numpy(dtype=float)
                y = paired[candidate].to_numpy(dtype=float)
                pairs[(segment, metric)] = PairedDifferences(
                    float(x.mean()), float(y.mean()), y - x
                )
    return ComparisonData(
        control=control,
        candidate=candidate,
        metrics=metrics,
        variants=variants,
        segments=segments,
        pairs=pairs,
        levels=levels,
        coverage=coverage,
    )


def _coverage(rows: pd.DataFrame, segment: str, control: str, candidate: str) -> SegmentCoverage:
    traces = rows.groupby("variant")["_trace"].nunique()
    annotated = rows[rows["value"].notna()].groupby("variant")["_trace"].nunique()
    has_value = rows.assign(has=rows["value"].notna()).groupby(["variant", "query_id"])["has"].any()

    def queries(variant: str) -> tuple[set[str], set[str]]:
        if variant not in has_value.index.get_level_values(0):
            return set(), set()
        arm = has_value.loc[variant]
        return set(arm.index), set(arm.index[arm.to_numpy()])

    control_served, control_valued = queries(control)
    candidate_served, candidate_valued = queries(candidate)
    shared = control_served & candidate_served
    paired = control_valued & candidate_valued
    return SegmentCoverage(
        segment=segment,
        control_traces=int(traces.get(control, 0)),
        candidate_traces=int(traces.get(candidate, 0)),
        control_annotated_traces=int(annotated.get(control, 0)),
        candidate_annotated_traces=int(annotated.get(candidate, 0)),
        control_queries=len(control_served),
        candidate_queries=len(candidate_served),
        paired=len(paired),
        shared_unpaired=len(shared - paired),
        control_only=len(control_served - candidate_served),
        candidate_only=len(candidate_served - control_served),
    )
