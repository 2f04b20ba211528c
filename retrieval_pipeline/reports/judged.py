"""List-level coverage in the reports: the judged share of each variant's top K (judged@K, mean
over its annotated traces) beside the annotation coverage, and a warning in words when a variant's
share is more than `GAP` below another's: its lower scores may be unjudged documents, counted as
non-relevant, rather than worse ones (docs/incomplete-judgments.md).

Pure: DataFrames and plain values in, words out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd

from retrieval_pipeline.ab.compare import Comparison
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import finite

# A variant whose judged share is more than this far (10 percentage points) below another's is
# named in a warning.
GAP = 0.10


def judged_shares(rows: pd.DataFrame, metric: str) -> dict[tuple[str, str], float]:
    """(segment, variant) -> mean of `metric` (a judged@K) from segment-metric or regression
    rows (columns segment, variant, metric, mean); pairs without a value are left out."""
    if rows.empty or metric not in set(rows["metric"]):
        return {}
    found = rows[rows["metric"] == metric]
    return {
        (str(row["segment"]), str(row["variant"])): float(row["mean"])
        for row in found.to_dict(orient="records")
        if finite(row["mean"], numbers_only=True) is not None
    }


def gap_warnings(
    shares: Mapping[str, float | None],
    metric: str,
    where: str = "",
    escape: Callable[[str], str] = str,
) -> list[str]:
    """One sentence per variant whose judged share is more than GAP below the best-judged one's,
    e.g. "candidate: 52% of its top 10 documents are judged, against 81% for control: ...".
    `shares`: variant -> judged share (None: unknown, never compared); `where` names the segment
    in the sentence; `escape` is applied to every name that comes from the traces."""
    known = {variant: share for variant, share in shares.items() if share is not None}
    if len(known) < 2:
        return []
    best_variant = max(sorted(known), key=lambda v: known[v])
    best = known[best_variant]
    k = metric.partition("@")[2] or "K"
    prefix = f"{where}: " if where else ""
    return [
        f"{prefix}{escape(variant)} has {share:.0%} of its top {k} documents judged "
        f"({metric}), against {best:.0%} for {escape(best_variant)}: its lower scores "
        "may be unjudged documents, counted as non-relevant, not worse ones"
        for variant, share in sorted(known.items())
        if best - share > GAP + 1e-12
    ]


def segment_gap_warnings(
    rows: pd.DataFrame, metric: str, escape: Callable[[str], str] = str
) -> list[str]:
    """`gap_warnings` for every segment of regression or segment-metric rows, overall first."""
    shares = judged_shares(rows, metric)
    segments = sorted({segment for segment, _ in shares}, key=lambda s: (s != OVERALL_SEGMENT, s))
    warnings: list[str] = []
    for segment in segments:
        per_variant: dict[str, float | None] = {
            variant: share for (s, variant), share in shares.items() if s == segment
        }
        warnings += gap_warnings(per_variant, metric, escape(segment_label(segment)), escape)
    return warnings


def comparison_warnings(comparison: Comparison, escape: Callable[[str], str] = str) -> list[str]:
    """`gap_warnings` between the two arms of an A/B comparison, per segment (overall last, as
    the comparison orders them)."""
    if comparison.judged_metric is None:
        return []
    warnings: list[str] = []
    for row in comparison.judged:
        shares = {comparison.control: row.control, comparison.candidate: row.candidate}
        where = escape(segment_label(row.segment))
        warnings += gap_warnings(shares, comparison.judged_metric, where, escape)
    return warnings


def comparison_judged_columns(comparison: Comparison) -> dict[str, list[float | None]]:
    """`control_judged` and `candidate_judged` per row of the comparison's coverage, in its
    order (None where unknown), for the coverage tables."""
    by_segment = {row.segment: row for row in comparison.judged}
    found = [by_segment.get(row.segment) for row in comparison.coverage]
    return {
        "control_judged": [row.control if row else None for row in found],
        "candidate_judged": [row.candidate if row else None for row in found],
    }
