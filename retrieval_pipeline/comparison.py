"""Control versus candidate on the same queries: paired differences, their uncertainty, a verdict.

Pure: a DataFrame in, plain values out; no DuckDB, no Dagster. Two entry points, the same rules:

- `compare_variants(per_query, control, candidate, settings)`: a wide per-trace table (the
  engine's `EvaluationRun.per_query`: query_id, segment, variant and one column per metric).
- `compare_query_metrics(query_metrics, control, candidate, settings)`: the warehouse's long
  `query_metrics` rows (query_id, segment, variant, metric, value, trace_id, partition_date) of a
  look-back window, as the `variant_comparison` asset reads them.

Pairing. Within each arm a query's traces are averaged first (a query served five times by control
counts once, with its mean). A query enters the paired test of a metric when both arms served it
and both have a value for it (null = unannotated). Segments pair on (segment, query_id); the
overall row (`nightly.OVERALL_SEGMENT`) pairs on query_id across segments.

Statistics, per segment (and overall) and metric, on d = candidate - control over the n pairs:
means of both arms, delta = mean(d), relative delta = delta / control mean; a 95% BCa bootstrap
interval of mean(d) (`scipy.stats.bootstrap`, percentile method where BCa is undefined); the
paired t-test p (`scipy.stats.ttest_rel`); the paired randomization p (`scipy.stats.
permutation_test` flipping the signs of d, exact when 2^n <= n_resamples); and Holm's adjustment of
both p-values over every tested cell of the comparison (segments, overall and metrics together).
Random draws are seeded per cell from (seed, segment, metric): a cell's numbers do not depend on
which other cells exist.

Degenerate cells are decisions, not warnings: n = 0 is `not tested` (every statistic None);
n = 1 has no interval and no t-test, and a randomization p of 1; when every difference is equal the
interval is that value (every resample has the same mean), the t-test is undefined (None) and the
randomization p is exact (all zero: 1; a constant c != 0: 2 / 2^n, or its Monte Carlo estimate).

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
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from retrieval_pipeline.metrics import DEFAULT_METRICS, MetricConfigError, parse_metric
from retrieval_pipeline.nightly import OVERALL_SEGMENT
from retrieval_pipeline.report import segment_label

Verdict = Literal["better", "worse", "no significant difference", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("better", "worse", "no significant difference", "not tested")
# fail: candidate below, control not (flagged); both_below: control misses it too (not flagged)
ThresholdStatus = Literal["pass", "fail", "both_below", "insufficient", "no_threshold"]

# The thresholds key that applies to every segment (and the overall row) unless overridden.
ALL_SEGMENTS = "*"
CONFIDENCE_LEVEL = 0.95
# Differences this small are the rounding of averaging (metric values lie in [0, 1]): zero.
_NOISE = 1e-12
# Resampled values per batch (bootstrap and permutation): about 24 MB a copy. Measured on
# scipy 1.17, a sign-flip test of n = 3000 with 9999 resamples takes 3.8 s at this size and 5.5 s
# unbatched: its cost is n * n_resamples, mostly scipy drawing the permutations.
_BATCH_VALUES = 3_000_000
ID_COLUMNS = ("query_id", "segment", "variant")


def threshold_for(
    thresholds: Mapping[str, Mapping[str, float]], segment: str, metric: str
) -> float | None:
    """The threshold of `metric` on `segment`: the segment's own entry, else the `*` default."""
    own = thresholds.get(segment, {})
    if metric in own:
        return own[metric]
    return thresholds.get(ALL_SEGMENTS, {}).get(metric)


@dataclass(frozen=True)
class ComparisonSettings:
    """How a comparison decides: significance level, guarded metrics, thresholds, resampling.

    `thresholds` maps segment -> metric -> minimum mean, `*` being the default of every segment
    (the overall row included, its own key being `nightly.OVERALL_SEGMENT`); a threshold is judged
    only where both arms have `min_annotated_traces` annotated traces. From the pipeline's config:
    `thresholds={"*": config.thresholds, **config.segment_thresholds}` and
    `min_annotated_traces=config.checks.min_annotated_traces`. Metric names are stored canonical
    (`nDCG@10` -> `ndcg@10`); an unknown name raises `MetricConfigError`.

    Resolution: a randomized p is at least 1 / (n_resamples + 1) and an exact one at least
    2 / 2^n, and Holm multiplies the smallest by the number m of tested cells; no cell can be
    called better or worse unless m / (n_resamples + 1) <= alpha (9999 resamples: m <= 500).
    """

    alpha: float = 0.05
    guarded_metrics: tuple[str, ...] = ()
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    n_resamples: int = 9999
    seed: int = 0
    min_annotated_traces: int = 20

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
        guarded = tuple(dict.fromkeys(parse_metric(name).name for name in self.guarded_metrics))
        thresholds: dict[str, dict[str, float]] = {}
        for segment, per_metric in self.thresholds.items():
            for name, value in per_metric.items():
                metric = parse_metric(name).name
                if not (isinstance(value, int | float) and math.isfinite(value)):
                    raise ValueError(f"threshold {segment}: {name} must be a number, got {value!r}")
                thresholds.setdefault(str(segment), {})[metric] = float(value)
        object.__setattr__(self, "guarded_metrics", guarded)
        object.__setattr__(self, "thresholds", thresholds)

    def threshold(self, segment: str, metric: str) -> float | None:
        return threshold_for(self.thresholds, segment, metric)


@dataclass(frozen=True)
class PairedStats:
    """The paired statistics of one cell (over its n paired queries), before Holm."""

    n: int
    control_mean: float | None
    candidate_mean: float | None
    delta: float | None
    relative_delta: float | None
    ci_low: float | None
    ci_high: float | None
    p_t: float | None
    p_randomization: float | None


@dataclass(frozen=True)
class ArmLevel:
    """One arm's mean over all its annotated traces of a segment, with a Student t interval."""

    traces: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class CellResult(PairedStats):
    """One segment and metric: `PairedStats`, Holm-adjusted p-values, the verdict, and each
    arm's level (`ArmLevel`) with the threshold it is judged against.

    `ci_low`/`ci_high` bound the paired difference (bootstrap); the `*_trace_*` fields describe
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
class Comparison:
    """The whole comparison: cells in segment order (overall last), coverage, flag reasons."""

    control: str
    candidate: str
    settings: ComparisonSettings
    metrics: tuple[str, ...]
    segments: tuple[str, ...]
    cells: tuple[CellResult, ...]
    coverage: tuple[SegmentCoverage, ...]
    reasons: tuple[str, ...]

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
                "verdict_rule": "Holm-adjusted paired randomization (sign-flip) p <= alpha",
            },
            "overall_segment": OVERALL_SEGMENT,
            "metrics": list(self.metrics),
            "segments": list(self.segments),
            "coverage": [asdict(row) for row in self.coverage],
            "cells": [cell_record(cell) for cell in self.cells],
        }


# --- statistics ------------------------------------------------------------------------------


def holm_adjust(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (Holm 1979); None (no test) stays None.

    Holm, S. (1979). A simple sequentially rejective multiple test procedure. Scandinavian
    Journal of Statistics 6(2), 65-70. With the m defined p-values sorted ascending,
    p_(1) <= ... <= p_(m): adjusted p_(i) = max over j <= i of min(1, (m - j + 1) * p_(j)).
    Rejecting where adjusted p <= alpha controls the family-wise error rate at alpha.
    """
    defined = sorted((p, i) for i, p in enumerate(pvalues) if p is not None and not math.isnan(p))
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, index) in enumerate(defined):
        running = max(running, min(1.0, (len(defined) - rank) * p))
        out[index] = running
    return out


def _seed(seed: int, *keys: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, *(zlib.crc32(key.encode("utf-8")) for key in keys)])


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _constant(values: np.ndarray) -> bool:
    """All equal, up to the rounding of a difference of means."""
    scale = max(1.0, float(np.max(np.abs(values))))
    return float(np.ptp(values)) <= _NOISE * scale


def _batch(n: int) -> int:
    return max(1, _BATCH_VALUES // max(n, 1))


def _bootstrap_ci(d: np.ndarray, n_resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    """BCa interval of mean(d); the percentile interval where BCa is undefined."""
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = stats.bootstrap(
                (d,),
                _mean,
                n_resamples=n_resamples,
                batch=_batch(len(d)),
                vectorized=True,
                confidence_level=CONFIDENCE_LEVEL,
                method=method,
                rng=rng,
            )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if not caught and math.isfinite(low) and math.isfinite(high):
            return low, high
    return low, high


def arm_level(values: Sequence[float] | np.ndarray) -> ArmLevel:
    """Mean of `values` with its Student t interval (`scipy.stats.ttest_1samp`); the value itself
    when every value is equal; no interval when n < 2, no mean when n = 0."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return ArmLevel(0, None, None, None)
    mean = float(x.mean())
    if len(x) < 2:
        return ArmLevel(1, mean, None, None)
    if _constant(x):
        return ArmLevel(len(x), mean, mean, mean)
    interval = stats.ttest_1samp(x, 0.0).confidence_interval(CONFIDENCE_LEVEL)
    return ArmLevel(len(x), mean, float(interval.low), float(interval.high))


def sign_flip_pvalue(d: np.ndarray, n_resamples: int, rng: np.random.Generator) -> float:
    """Two-sided paired randomization p of mean(d) = 0: signs of d flipped at random (exact
    enumeration of all 2^n sign patterns when 2^n <= n_resamples), `scipy.stats.permutation_test`
    with `permutation_type='samples'`."""
    result = stats.permutation_test(
        (d,),
        _mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        batch=_batch(len(d)),
        alternative="two-sided",
        rng=rng,
    )
    return min(1.0, float(result.pvalue))


_UNDEFINED: tuple[None, ...] = (None,) * 8


def paired_statistics(
    control: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    n_resamples: int = 9999,
    seed: int | np.random.SeedSequence = 0,
) -> PairedStats:
    """Paired statistics of candidate - control over aligned vectors (see the module docstring)."""
    x = np.asarray(control, dtype=float)
    y = np.asarray(candidate, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("control and candidate must be 1-d vectors of the same length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("paired values must be finite numbers")
    n = len(x)
    if n == 0:
        return PairedStats(0, *_UNDEFINED)
    d = y - x
    # the means of equal metric values, summed in another order, differ by rounding only
    d[np.abs(d) <= _NOISE] = 0.0
    boot_seed, perm_seed = (
        seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    ).spawn(2)
    control_mean, candidate_mean, delta = float(x.mean()), float(y.mean()), float(d.mean())
    relative = delta / control_mean if control_mean != 0 else None
    ci: tuple[float | None, float | None] = (None, None)
    p_t: float | None = None
    if n >= 2 and _constant(d):
        ci = (delta, delta)
    elif n >= 2:
        ci = _bootstrap_ci(d, n_resamples, np.random.default_rng(boot_seed))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t_p = float(stats.ttest_rel(y, x).pvalue)
        p_t = t_p if not caught and math.isfinite(t_p) else None
    # n = 1: both sign patterns are as extreme as the observation (scipy needs n >= 2)
    p_rand = sign_flip_pvalue(d, n_resamples, np.random.default_rng(perm_seed)) if n >= 2 else 1.0
    return PairedStats(
        n,
        control_mean,
        candidate_mean,
        delta,
        relative,
        *ci,
        p_t,
        p_rand,
    )


def _verdict(delta: float | None, p_adjusted: float | None, alpha: float) -> Verdict:
    if delta is None or p_adjusted is None:
        return "not tested"
    if p_adjusted <= alpha and delta > 0:
        return "better"
    if p_adjusted <= alpha and delta < 0:
        return "worse"
    return "no significant difference"


# --- pairing ---------------------------------------------------------------------------------


def _metric_columns(frame: pd.DataFrame) -> list[str]:
    found = []
    for column in frame.columns:
        try:
            if parse_metric(str(column)).name == column:
                found.append(str(column))
        except MetricConfigError:
            continue
    return found


def _checked_metrics(available: Sequence[str], metrics: Sequence[str] | None) -> tuple[str, ...]:
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


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
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
    _require(per_query, ID_COLUMNS, "the per-query table")
    chosen = _checked_metrics(_metric_columns(per_query), metrics)
    frame = per_query.reset_index(drop=True)
    frame["_trace"] = np.arange(len(frame))
    long = frame.melt(
        id_vars=[*ID_COLUMNS, "_trace"],
        value_vars=list(chosen),
        var_name="metric",
        value_name="value",
    )
    return _compare(long, control, candidate, settings or ComparisonSettings(), chosen)


def compare_query_metrics(
    query_metrics: pd.DataFrame,
    control: str,
    candidate: str,
    settings: ComparisonSettings | None = None,
    metrics: Sequence[str] | None = None,
) -> Comparison:
    """Compare on the warehouse's long `query_metrics` rows of a look-back window (query_id,
    segment, variant, metric, value, trace_id and, when present, partition_date); the
    `variant_comparison` asset's entry point. `metrics` default: every metric in the rows, the
    default metrics' order first (pass `config.metrics` for the configured order)."""
    _require(query_metrics, [*ID_COLUMNS, "trace_id", "metric", "value"], "query_metrics")
    order = {name: i for i, name in enumerate(DEFAULT_METRICS)}
    available = sorted(
        (str(m) for m in pd.unique(query_metrics["metric"])),
        key=lambda name: (order.get(name, len(order)), name),
    )
    chosen = _checked_metrics(available, metrics)
    trace_keys = [c for c in ("partition_date", "trace_id") if c in query_metrics.columns]
    long = query_metrics[query_metrics["metric"].isin(chosen)].copy()
    long["_trace"] = long.groupby(trace_keys, sort=False).ngroup()
    long = long[[*ID_COLUMNS, "_trace", "metric", "value"]]
    return _compare(long, control, candidate, settings or ComparisonSettings(), chosen)


def _compare(
    long: pd.DataFrame,
    control: str,
    candidate: str,
    settings: ComparisonSettings,
    metrics: tuple[str, ...],
) -> Comparison:
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
    long = long.astype({"query_id": str, "segment": str, "variant": str})
    long["value"] = pd.to_numeric(long["value"], errors="coerce").astype(float)
    present = sorted(pd.unique(long["variant"]))
    for role, variant in (("control", control), ("candidate", candidate)):
        if variant not in present:
            raise ValueError(
                f"{role} variant {variant!r} has no traces; variants present: "
                f"{', '.join(present) or '(none)'}"
            )
    if (long["segment"] == OVERALL_SEGMENT).any():
        raise ValueError(f"segment name {OVERALL_SEGMENT!r} is reserved for the overall row")
    long = long[long["variant"].isin([control, candidate])]
    segments = (*sorted(pd.unique(long["segment"])), OVERALL_SEGMENT)

    coverage: list[SegmentCoverage] = []
    raw: list[tuple[str, str, PairedStats, ArmLevel, ArmLevel]] = []
    for segment in segments:
        rows = long if segment == OVERALL_SEGMENT else long[long["segment"] == segment]
        coverage.append(_coverage(rows, segment, control, candidate))
        valued = rows[rows["value"].notna()]
        levels = {
            key: group.to_numpy() for key, group in valued.groupby(["metric", "variant"])["value"]
        }
        # a query's traces in one arm averaged first (NaN: no value in that arm)
        means = rows.groupby(["metric", "query_id", "variant"])["value"].mean().unstack("variant")
        means = means.reindex(columns=[control, candidate])
        for metric in metrics:
            pairs = means.loc[metric].dropna() if metric in means.index else means.iloc[:0]
            stats_ = paired_statistics(
                pairs[control].to_numpy(),
                pairs[candidate].to_numpy(),
                n_resamples=settings.n_resamples,
                seed=_seed(settings.seed, segment, metric),
            )
            empty = np.array([], dtype=float)
            control_level = arm_level(levels.get((metric, control), empty))
            candidate_level = arm_level(levels.get((metric, candidate), empty))
            raw.append((segment, metric, stats_, control_level, candidate_level))

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
        coverage=tuple(coverage),
        reasons=tuple(flag_reasons(cells, settings)),
    )


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
