"""Control versus candidate on the same queries: the comparison's settings, its result per
segment and metric, the verdicts and the review flag.

Pure: tables and arrays in, plain values out; no DuckDB, no Dagster. One rule set, entry points
that differ only in their input:

- `pairing.compare_variants(per_query, control, candidate, settings)`: a wide per-trace table
  (the engine's `EvaluationRun.per_query`: query_id, segment, variant and one column per metric).
- `compare_data(data, settings)`: the same input already aggregated (`ComparisonData`: the paired
  query means per cell, each arm's summary and the coverage counts), as the `variant_comparison`
  asset reads it from the warehouse (`sql/rpt_comparison_*.sql`) without holding per-trace rows.

Pairing. Within each arm a query's traces are averaged first (a query served five times by control
counts once, with its mean). A query enters the paired test of a metric when both arms served it
and both have a value for it (null = unannotated). Segments pair on (segment, query_id); the
overall row (`segments.OVERALL_SEGMENT`) pairs on query_id across segments. The statistics of a
cell are `stats.difference_statistics` (see `retrieval_pipeline.ab.stats`).

Random draws are seeded per cell from (seed, segment, metric): a cell's numbers do not depend on
which other cells exist.

Verdict: `better` / `worse` when the Holm-adjusted randomization p <= alpha and delta is positive /
negative (every metric here is higher-is-better), else `no significant difference`. The
randomization test is the one that decides because it assumes no normality of d (bounded,
tied metric values) and stays defined when the variance is 0.

Thresholds are a level check, not a paired one: each arm's mean over all its annotated traces in
the segment (the number the nightly `segment_metrics` computes), judged only when both arms have
at least `min_annotated_traces` of them (else `insufficient`, as in the nightly checks).

Flag for review, each reason in words: the candidate's mean is below a threshold where control's is
not (`multi_hop: ndcg@10 0.683 < 0.700 (control 0.714)`), or a guarded metric is significantly
worse.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from retrieval_pipeline.ab.stats import (
    CONFIDENCE_LEVEL,
    ArmLevel,
    ArmSummary,
    PairedDifferences,
    PairedStats,
    difference_statistics,
    holm_adjust,
    level_of,
)
from retrieval_pipeline.ab.why import PairedWhy
from retrieval_pipeline.config import (
    DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS,
    MIN_NORMAL_APPROXIMATION_PAIRS,
    PipelineConfig,
)
from retrieval_pipeline.metrics import parse_metric
from retrieval_pipeline.segments import ALL_SEGMENTS, OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import finite

Verdict = Literal["better", "worse", "no significant difference", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("better", "worse", "no significant difference", "not tested")
# fail: candidate below, control not (flagged); both_below: control misses it too (not flagged)
ThresholdStatus = Literal["pass", "fail", "both_below", "insufficient", "no_threshold"]


def threshold_for(
    thresholds: Mapping[str, Mapping[str, float]], segment: str, metric: str
) -> float | None:
    """The threshold of `metric` on `segment`: the segment's own entry, else the `*` default."""
    own = thresholds.get(segment, {})
    if metric in own:
        return own[metric]
    return thresholds.get(ALL_SEGMENTS, {}).get(metric)


def config_thresholds(config: PipelineConfig) -> dict[str, dict[str, float]]:
    """The configured thresholds keyed as `threshold_for` reads them: `*` the default of every
    segment, then each segment's overrides."""
    return {
        ALL_SEGMENTS: dict(config.thresholds),
        **{segment: dict(rule) for segment, rule in config.segment_thresholds.items()},
    }


@dataclass(frozen=True)
class ComparisonSettings:
    """How a comparison decides: significance level, guarded metrics, thresholds, resampling.

    `thresholds` maps segment -> metric -> minimum mean, `*` being the default of every segment
    (the overall row included, its own key being `segments.OVERALL_SEGMENT`); a threshold is judged
    only where both arms have `min_annotated_traces` annotated traces. From the pipeline's config:
    `thresholds={"*": config.thresholds, **config.segment_thresholds}` and
    `min_annotated_traces=config.checks.min_annotated_traces`. Metric names are stored canonical
    (`nDCG@10` -> `ndcg@10`); an unknown name raises `MetricConfigError`.

    `normal_approximation_min_pairs` (N): a cell with at least N pairs gets the Student t
    interval instead of the bootstrap, and one with at least N nonzero differences the normal
    approximation of the sign-flip p instead of resampled signs (see `retrieval_pipeline.ab.stats`).

    Resolution: a randomized p is at least 1 / (n_resamples + 1) and an exact one at least
    2 / 2^k, and Holm multiplies the smallest by the number m of tested cells; no cell decided by
    resampling can be called better or worse unless m / (n_resamples + 1) <= alpha (9999
    resamples: m <= 500). The normal approximation has no such floor.
    """

    alpha: float = 0.05
    guarded_metrics: tuple[str, ...] = ()
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    n_resamples: int = 9999
    seed: int = 0
    min_annotated_traces: int = 20
    normal_approximation_min_pairs: int = DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, int | float) and 0 < self.alpha < 1):
            raise ValueError(f"alpha must be a number in (0, 1), got {self.alpha!r}")
        if not isinstance(self.n_resamples, int) or self.n_resamples < 1:
            raise ValueError(f"n_resamples must be an integer >= 1, got {self.n_resamples!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.min_annotated_traces, int) or self.min_annotated_traces < 1:
            raise ValueError(
                f"min_annotated_traces must be an integer >= 1, got {self.min_annotated_traces!r}"
            )
        large = self.normal_approximation_min_pairs
        if not isinstance(large, int) or large < MIN_NORMAL_APPROXIMATION_PAIRS:
            raise ValueError(
                "normal_approximation_min_pairs must be an integer >= "
                f"{MIN_NORMAL_APPROXIMATION_PAIRS}, got {large!r}"
            )
        guarded = tuple(dict.fromkeys(parse_metric(name).name for name in self.guarded_metrics))
        thresholds: dict[str, dict[str, float]] = {}
        for segment, per_metric in self.thresholds.items():
            for name, value in per_metric.items():
                metric = parse_metric(name).name
                if finite(value, numbers_only=True) is None:
                    raise ValueError(f"threshold {segment}: {name} must be a number, got {value!r}")
                thresholds.setdefault(str(segment), {})[metric] = float(value)
        object.__setattr__(self, "guarded_metrics", guarded)
        object.__setattr__(self, "thresholds", thresholds)

    def threshold(self, segment: str, metric: str) -> float | None:
        return threshold_for(self.thresholds, segment, metric)


@dataclass(frozen=True)
class CellResult(PairedStats):
    """One segment and metric: `PairedStats`, Holm-adjusted p-values, the verdict, and each
    arm's level (`ArmLevel`) with the threshold it is judged against.

    `ci_low`/`ci_high` bound the paired difference (`ci_method`); the `*_trace_*` fields describe
    each arm over all its annotated traces, for the threshold rule and the report's bars."""

    segment: str = ""
    metric: str = ""
    p_t_holm: float | None = None
    p_randomization_holm: float | None = None
    verdict: Verdict = "not tested"
    control_traces: int = 0
    control_trace_mean: float | None = None
    control_trace_ci_low: float | None = None
    control_trace_ci_high: float | None = None
    candidate_traces: int = 0
    candidate_trace_mean: float | None = None
    candidate_trace_ci_low: float | None = None
    candidate_trace_ci_high: float | None = None
    threshold: float | None = None
    threshold_status: ThresholdStatus = "no_threshold"


def cell_record(cell: CellResult) -> dict[str, Any]:
    """A cell as a plain dict, segment and metric first."""
    record = asdict(cell)
    return {"segment": record.pop("segment"), "metric": record.pop("metric"), **record}


@dataclass(frozen=True)
class SegmentCoverage:
    """Who served what in one segment: traces, and queries by arm and pairing.

    control_queries = paired + shared_unpaired + control_only (candidate likewise), where
    shared_unpaired were served by both arms but lack a value in at least one."""

    segment: str
    control_traces: int
    candidate_traces: int
    control_annotated_traces: int
    candidate_annotated_traces: int
    control_queries: int
    candidate_queries: int
    paired: int
    shared_unpaired: int
    control_only: int
    candidate_only: int


@dataclass(frozen=True)
class JudgedShare:
    """Each arm's judged share of its top K in one segment: the mean of the comparison's
    `judged_metric` (judged@K) over its annotated traces; None where the arm has none. Shown
    beside the annotation coverage: an arm whose lists are less judged can score lower only
    because its unjudged documents count as non-relevant (docs/incomplete-judgments.md)."""

    segment: str
    control: float | None
    candidate: float | None


def judged_shares(
    groups: Iterable[tuple[str, str, int, float | None]], control: str, candidate: str
) -> dict[str, JudgedShare]:
    """Per segment, and over every segment (`OVERALL_SEGMENT`), each arm's judged share from
    (segment, variant, annotated traces, their mean judged@K) groups, pooled by trace count."""
    sums: dict[tuple[str, str], list[float]] = {}
    for segment, variant, n, mean in groups:
        if variant not in (control, candidate) or n <= 0 or mean is None or math.isnan(mean):
            continue
        for key in ((segment, variant), (OVERALL_SEGMENT, variant)):
            total = sums.setdefault(key, [0.0, 0.0])
            total[0] += n * mean
            total[1] += n

    def share(segment: str, variant: str) -> float | None:
        total = sums.get((segment, variant))
        return total[0] / total[1] if total else None

    segments = {segment for segment, _ in sums}
    return {s: JudgedShare(s, share(s, control), share(s, candidate)) for s in sorted(segments)}


@dataclass(frozen=True)
class Comparison:
    """The whole comparison: cells in segment order (overall last), coverage, flag reasons, and
    each arm's judged share per segment (`judged`, of `judged_metric`), where known."""

    control: str
    candidate: str
    settings: ComparisonSettings
    metrics: tuple[str, ...]
    segments: tuple[str, ...]
    cells: tuple[CellResult, ...]
    coverage: tuple[SegmentCoverage, ...]
    reasons: tuple[str, ...]
    judged_metric: str | None = None
    judged: tuple[JudgedShare, ...] = ()
    # the paired queries behind each worse cell (`ab.why`, docs/why.md), where read
    why: tuple[PairedWhy, ...] = ()

    @property
    def flagged(self) -> bool:
        """True when the experiment needs a person's review (see `reasons`)."""
        return bool(self.reasons)

    def cell(self, segment: str, metric: str) -> CellResult:
        for cell in self.cells:
            if cell.segment == segment and cell.metric == metric:
                return cell
        raise KeyError((segment, metric))

    def cells_frame(self) -> pd.DataFrame:
        """One row per segment and metric, every field of `CellResult` a column."""
        return pd.DataFrame([cell_record(cell) for cell in self.cells])

    def coverage_frame(self) -> pd.DataFrame:
        columns = list(SegmentCoverage.__dataclass_fields__)
        return pd.DataFrame([asdict(row) for row in self.coverage], columns=columns)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (None for undefined numbers, never NaN)."""
        return {
            "control": self.control,
            "candidate": self.candidate,
            "flagged": self.flagged,
            "reasons": list(self.reasons),
            "settings": {
                "alpha": self.settings.alpha,
                "confidence_level": CONFIDENCE_LEVEL,
                "guarded_metrics": list(self.settings.guarded_metrics),
                "thresholds": {s: dict(t) for s, t in self.settings.thresholds.items()},
                "n_resamples": self.settings.n_resamples,
                "seed": self.settings.seed,
                "min_annotated_traces": self.settings.min_annotated_traces,
                "normal_approximation_min_pairs": self.settings.normal_approximation_min_pairs,
                "verdict_rule": "Holm-adjusted paired randomization (sign-flip) p <= alpha",
                # which cell fields are adjusted for the cells tested together (Holm), which
                # hold for their cell alone: an unadjusted interval may exclude 0 while the
                # adjusted p stays above alpha
                "holm_adjusted": ["p_randomization_holm", "p_t_holm"],
                "unadjusted": ["ci_low", "ci_high", "p_randomization", "p_t"],
            },
            "overall_segment": OVERALL_SEGMENT,
            "metrics": list(self.metrics),
            "segments": list(self.segments),
            "coverage": [asdict(row) for row in self.coverage],
            "judged_metric": self.judged_metric,
            "judged": [asdict(row) for row in self.judged],
            "cells": [cell_record(cell) for cell in self.cells],
            "why": [w.to_dict() for w in self.why],
        }


def _seed(seed: int, *keys: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, *(zlib.crc32(key.encode("utf-8")) for key in keys)])


def _verdict(delta: float | None, p_adjusted: float | None, alpha: float) -> Verdict:
    if delta is None or p_adjusted is None:
        return "not tested"
    if p_adjusted <= alpha and delta > 0:
        return "better"
    if p_adjusted <= alpha and delta < 0:
        return "worse"
    return "no significant difference"


def check_request(
    control: str, candidate: str, metrics: Sequence[str], settings: ComparisonSettings
) -> None:
    """ValueError for a request no input can answer: one variant as both arms, or a guarded
    metric or threshold on a metric not compared."""
    if control == candidate:
        raise ValueError(f"control and candidate are the same variant {control!r}")
    for name in settings.guarded_metrics:
        if name not in metrics:
            raise ValueError(f"guarded metric {name} is not compared ({', '.join(metrics)})")
    for segment, per_metric in settings.thresholds.items():
        for name in per_metric:
            if name not in metrics:
                raise ValueError(
                    f"threshold {segment}: {name} names a metric not compared "
                    f"({', '.join(metrics)})"
                )


@dataclass(frozen=True)
class ComparisonData:
    """What a comparison is computed from, aggregated: enough to state every number of the report
    without the per-trace rows.

    `variants`: every variant of the input (named when an arm is missing); `segments`: the trace
    segments either arm served, sorted (the overall row is implied). `pairs[(segment, metric)]`:
    the cell's `PairedDifferences` (absent: no query paired);
    `levels[(segment, metric, variant)]`: each arm's summary over its annotated traces;
    `coverage[segment]`: the counts, the overall row under `segments.OVERALL_SEGMENT`;
    `not_a_number[(segment, metric, variant)]`: values that are NaN (a score that could not be
    computed), left out of everything above; each flags the comparison in words.
    `judged[segment]`: each arm's judged share of `judged_metric` (`judged_shares`), if known."""

    control: str
    candidate: str
    metrics: tuple[str, ...]
    variants: tuple[str, ...]
    segments: tuple[str, ...]
    pairs: Mapping[tuple[str, str], PairedDifferences]
    levels: Mapping[tuple[str, str, str], ArmSummary]
    coverage: Mapping[str, SegmentCoverage]
    not_a_number: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    judged_metric: str | None = None
    judged: Mapping[str, JudgedShare] = field(default_factory=dict)


_NO_PAIRS = PairedDifferences(math.nan, math.nan, np.array([], dtype=float))


def compare_data(data: ComparisonData, settings: ComparisonSettings | None = None) -> Comparison:
    """The comparison of aggregated input (see `ComparisonData`); ValueError for a request that
    cannot be answered (an arm without traces, a guarded metric not compared, ...)."""
    settings = settings or ComparisonSettings()
    control, candidate, metrics = data.control, data.candidate, data.metrics
    check_request(control, candidate, metrics, settings)
    for role, variant in (("control", control), ("candidate", candidate)):
        if variant not in data.variants:
            raise ValueError(
                f"{role} variant {variant!r} has no traces; variants present: "
                f"{', '.join(data.variants) or '(none)'}"
            )
    if OVERALL_SEGMENT in data.segments:
        raise ValueError(f"segment name {OVERALL_SEGMENT!r} is reserved for the overall row")
    segments = (*data.segments, OVERALL_SEGMENT)
    raw: list[tuple[str, str, PairedStats, ArmLevel, ArmLevel]] = []
    for segment in segments:
        for metric in metrics:
            stats_ = difference_statistics(
                data.pairs.get((segment, metric), _NO_PAIRS),
                n_resamples=settings.n_resamples,
                seed=_seed(settings.seed, segment, metric),
                normal_approximation_min_pairs=settings.normal_approximation_min_pairs,
            )
            arms = [
                level_of(data.levels.get((segment, metric, variant), ArmSummary(0)))
                for variant in (control, candidate)
            ]
            raw.append((segment, metric, stats_, arms[0], arms[1]))

    p_t_holm = holm_adjust([s.p_t for _, _, s, _, _ in raw])
    p_rand_holm = holm_adjust([s.p_randomization for _, _, s, _, _ in raw])
    cells = tuple(
        _cell(segment, metric, s, c, k, pt, pr, settings)
        for (segment, metric, s, c, k), pt, pr in zip(raw, p_t_holm, p_rand_holm, strict=True)
    )
    return Comparison(
        control=control,
        candidate=candidate,
        settings=settings,
        metrics=metrics,
        segments=segments,
        cells=cells,
        coverage=tuple(data.coverage.get(s) or _no_coverage(s) for s in segments),
        reasons=(*not_a_number_reasons(data, segments), *flag_reasons(cells, settings)),
        judged_metric=data.judged_metric,
        judged=tuple(data.judged[s] for s in segments if s in data.judged),
    )


def not_a_number_reasons(data: ComparisonData, segments: Sequence[str]) -> list[str]:
    """One sentence per segment and metric holding NaN values, which never pass: they are left
    out of the numbers, and the comparison needs review."""
    reasons: list[str] = []
    for segment in segments:
        for metric in data.metrics:
            counts = [
                f"{count} {variant} trace{'s' if count != 1 else ''}"
                for variant in (data.control, data.candidate)
                if (count := data.not_a_number.get((segment, metric, variant), 0))
            ]
            if counts:
                reasons.append(
                    f"{segment_label(segment)}: {metric} is not a number (NaN) for "
                    f"{' and '.join(counts)}, left out of the comparison"
                )
    return reasons


def _cell(
    segment: str,
    metric: str,
    paired: PairedStats,
    control: ArmLevel,
    candidate: ArmLevel,
    p_t_holm: float | None,
    p_randomization_holm: float | None,
    settings: ComparisonSettings,
) -> CellResult:
    limit = settings.threshold(segment, metric)
    return CellResult(
        **asdict(paired),
        segment=segment,
        metric=metric,
        p_t_holm=p_t_holm,
        p_randomization_holm=p_randomization_holm,
        verdict=_verdict(paired.delta, p_randomization_holm, settings.alpha),
        control_traces=control.traces,
        control_trace_mean=control.mean,
        control_trace_ci_low=control.ci_low,
        control_trace_ci_high=control.ci_high,
        candidate_traces=candidate.traces,
        candidate_trace_mean=candidate.mean,
        candidate_trace_ci_low=candidate.ci_low,
        candidate_trace_ci_high=candidate.ci_high,
        threshold=limit,
        threshold_status=_threshold_status(limit, control, candidate, settings),
    )


def _threshold_status(
    limit: float | None, control: ArmLevel, candidate: ArmLevel, settings: ComparisonSettings
) -> ThresholdStatus:
    if limit is None:
        return "no_threshold"
    enough = min(control.traces, candidate.traces) >= settings.min_annotated_traces
    if not enough or control.mean is None or candidate.mean is None:
        return "insufficient"
    if candidate.mean >= limit:
        return "pass"
    return "both_below" if control.mean < limit else "fail"


def _no_coverage(segment: str) -> SegmentCoverage:
    return SegmentCoverage(segment, *(0,) * (len(SegmentCoverage.__dataclass_fields__) - 1))


# --- the flag --------------------------------------------------------------------------------


def flag_reasons(cells: Sequence[CellResult], settings: ComparisonSettings) -> list[str]:
    """Why the experiment needs review, one sentence per cell, in cell order (empty: no flag)."""
    reasons: list[str] = []
    for cell in cells:
        where = f"{segment_label(cell.segment)}: {cell.metric}"
        if cell.threshold_status == "fail":
            reasons.append(
                f"{where} {cell.candidate_trace_mean:.3f} < {cell.threshold:.3f} "
                f"(control {cell.control_trace_mean:.3f})"
            )
        if cell.verdict == "worse" and cell.metric in settings.guarded_metrics:
            interval = (
                f", {CONFIDENCE_LEVEL:.0%} CI {cell.ci_low:+.3f}..{cell.ci_high:+.3f}"
                if cell.ci_low is not None and cell.ci_high is not None
                else ""
            )
            reasons.append(
                f"{where} significantly worse, {cell.candidate_mean:.3f} vs control "
                f"{cell.control_mean:.3f} ({cell.delta:+.3f}{interval}, "
                f"Holm-adjusted randomization p {cell.p_randomization_holm:.3g})"
            )
    return reasons
