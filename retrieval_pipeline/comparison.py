"""Control versus candidate on the same queries: paired differences, their uncertainty, a verdict.

Pure: tables and arrays in, plain values out; no DuckDB, no Dagster. One rule set, three entry
points:

- `compare_variants(per_query, control, candidate, settings)`: a wide per-trace table (the
  engine's `EvaluationRun.per_query`: query_id, segment, variant and one column per metric).
- `compare_query_metrics(query_metrics, control, candidate, settings)`: the warehouse's long
  `query_metrics` rows (query_id, segment, variant, metric, value, trace_id, partition_date).
- `compare_data(data, settings)`: the same input already aggregated (`ComparisonData`: the paired
  query means per cell, each arm's summary and the coverage counts), as the `variant_comparison`
  asset reads it from the warehouse (`sql/rpt_comparison_*.sql`) without holding per-trace rows.

Pairing. Within each arm a query's traces are averaged first (a query served five times by control
counts once, with its mean). A query enters the paired test of a metric when both arms served it
and both have a value for it (null = unannotated). Segments pair on (segment, query_id); the
overall row (`nightly.OVERALL_SEGMENT`) pairs on query_id across segments. The differences are
rounded to 12 decimals and sorted before any statistic, so the seeded resampling sees the same
vector whichever entry point built it and in whatever order the queries came.

Statistics, per segment (and overall) and metric, on d = candidate - control over the n pairs:
means of both arms, delta = mean(d), relative delta = delta / control mean; the paired t-test p
(`scipy.stats.ttest_rel`); a 95% interval of mean(d); the paired randomization p of mean(d) = 0
(the signs of d flipped at random); and Holm's adjustment of both p-values over every tested cell
of the comparison (segments, overall and metrics together).

Small samples are resampled, large ones use the large-sample forms of the same quantities, at
`ComparisonSettings.normal_approximation_min_pairs` (N, default 1000; each cell records the method
of its p-value and interval in words):

- Interval: below N pairs, the BCa bootstrap of mean(d) (`scipy.stats.bootstrap`, `n_resamples`,
  the percentile method where BCa is undefined); from N pairs on, the Student t interval of
  mean(d) (mean +- t(0.975, n - 1) * sd / sqrt(n)), which the bootstrap approaches as n grows.
- Randomization p: only the k nonzero differences move when signs flip, so k decides. Below N,
  the sign-flip test over them: every one of the 2^k sign patterns when 2^k <= n_resamples (exact),
  else `n_resamples` random ones, p = (hits + 1) / (n_resamples + 1), a hit being a pattern with
  |sum(s * d)| >= |sum(d)| (equal up to rounding counts). From N on, its normal approximation:
  under the null, mean(s * d) has mean 0 and variance sum(d^2) / n^2 exactly and is
  asymptotically normal (the distribution is symmetric, so the error is of order 1 / k), giving
  p = 2 * (1 - Phi(|sum(d)| / sqrt(sum(d^2)))).

Random draws are seeded per cell from (seed, segment, metric): a cell's numbers do not depend on
which other cells exist.

Degenerate cells are decisions, not warnings: n = 0 is `not tested` (every statistic None);
n = 1 has no interval and no t-test, and a randomization p of 1; when every difference is equal the
interval is that value (every resample has the same mean), the t-test is undefined (None) and the
randomization p is exact (all zero: 1; a constant c != 0: 2 / 2^n, or its estimate).

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from retrieval_pipeline.config import (
    DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS,
    MIN_NORMAL_APPROXIMATION_PAIRS,
)
from retrieval_pipeline.metrics import DEFAULT_METRICS, MetricConfigError, parse_metric
from retrieval_pipeline.report import segment_label
from retrieval_pipeline.segments import OVERALL_SEGMENT

Verdict = Literal["better", "worse", "no significant difference", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("better", "worse", "no significant difference", "not tested")
# fail: candidate below, control not (flagged); both_below: control misses it too (not flagged)
ThresholdStatus = Literal["pass", "fail", "both_below", "insufficient", "no_threshold"]

# The thresholds key that applies to every segment (and the overall row) unless overridden.
ALL_SEGMENTS = "*"
CONFIDENCE_LEVEL = 0.95
# Differences this small are the rounding of averaging (metric values lie in [0, 1]): zero.
# Relative to sum(|d|), also the tolerance within which two sign-flip sums are a tie.
_NOISE = 1e-12
_DECIMALS = 12
# Bootstrap values per batch: about 24 MB a copy.
_BATCH_VALUES = 3_000_000
# Random signs per batch of the sign-flip test: a 16 MB copy as floats.
_SIGN_BATCH = 2_000_000
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

    `normal_approximation_min_pairs` (N): a cell with at least N pairs gets the Student t
    interval instead of the bootstrap, and one with at least N nonzero differences the normal
    approximation of the sign-flip p instead of resampled signs (see the module docstring).

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
    # how p_randomization and the interval were obtained, in words (None: not computed)
    p_randomization_method: str | None
    ci_method: str | None


@dataclass(frozen=True)
class ArmSummary:
    """One arm's annotated values in a segment and metric: count, mean, sample standard deviation,
    smallest and largest (None where undefined). What `level_of` needs, so the warehouse can
    compute it without handing over the values."""

    n: int
    mean: float | None = None
    sd: float | None = None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> ArmSummary:
        x = np.asarray(values, dtype=float)
        if len(x) == 0:
            return cls(0)
        sd = float(x.std(ddof=1)) if len(x) > 1 else None
        return cls(len(x), float(x.mean()), sd, float(x.min()), float(x.max()))

    @classmethod
    def pooled(cls, parts: Iterable[ArmSummary]) -> ArmSummary:
        """The summary of all the values `parts` summarize, without the values: counts and
        means add up, and so do the squared deviations once each part's are moved to the
        pooled mean (Chan, Golub and LeVeque's update; no sum of squares to cancel)."""
        filled: list[tuple[int, float, float, float, float]] = []
        for part in parts:
            if part.n == 0:
                continue
            if part.mean is None or part.low is None or part.high is None:
                raise ValueError(f"a summary of {part.n} values lacks their mean or range")
            filled.append((part.n, part.mean, part.sd or 0.0, part.low, part.high))
        n = sum(count for count, *_ in filled)
        if n == 0:
            return cls(0)
        mean = sum(count * m for count, m, *_ in filled) / n
        squares = sum(
            (count - 1) * sd**2 + count * (m - mean) ** 2 for count, m, sd, _, _ in filled
        )
        sd = math.sqrt(squares / (n - 1)) if n > 1 else None
        low = min(low for *_, low, _ in filled)
        high = max(high for *_, high in filled)
        return cls(n, mean, sd, low, high)


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
                "normal_approximation_min_pairs": self.settings.normal_approximation_min_pairs,
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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _bootstrap_ci(
    d: np.ndarray, n_resamples: int, rng: np.random.Generator
) -> tuple[float, float, str]:
    """BCa interval of mean(d); the percentile interval where BCa is undefined; and its method."""
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
            break
    if method == "BCa":
        return low, high, f"BCa bootstrap, {n_resamples} resamples"
    return low, high, f"percentile bootstrap, {n_resamples} resamples (BCa undefined here)"


def t_interval(n: int, mean: float, sd: float) -> tuple[float, float]:
    """The Student t interval of a mean: mean +- t(1 - (1 - level) / 2, n - 1) * sd / sqrt(n)."""
    half = float(stats.t.ppf(0.5 + CONFIDENCE_LEVEL / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def level_of(summary: ArmSummary) -> ArmLevel:
    """An arm's mean with its Student t interval; the value itself when every value is equal; no
    interval when n < 2, no mean when n = 0."""
    if summary.n == 0 or summary.mean is None:
        return ArmLevel(0, None, None, None)
    mean = summary.mean
    if summary.n < 2 or summary.sd is None or summary.low is None or summary.high is None:
        return ArmLevel(summary.n, mean, None, None)
    scale = max(1.0, abs(summary.low), abs(summary.high))
    if summary.high - summary.low <= _NOISE * scale:
        return ArmLevel(summary.n, mean, mean, mean)
    return ArmLevel(summary.n, mean, *t_interval(summary.n, mean, summary.sd))


def _sign_sums(bits: np.ndarray, d: np.ndarray, total: float) -> np.ndarray:
    """sum(s * d) per row, s = +1 where the bit is set and -1 where not."""
    return 2.0 * (bits @ d) - total


def sign_flip_pvalue(d: np.ndarray, n_resamples: int, rng: np.random.Generator) -> float:
    """Two-sided paired randomization p of mean(d) = 0, from the signs of d flipped at random.

    Zeros are dropped first (their sign changes nothing). Over the k nonzero differences: every
    one of the 2^k sign patterns when 2^k <= n_resamples (exact: the share of patterns with
    |sum(s * d)| >= |sum(d)|); else `n_resamples` patterns of independent fair signs, p =
    (hits + 1) / (n_resamples + 1). Sums within `_NOISE * sum(|d|)` of the observed one are ties
    and count as hits. The same test as `scipy.stats.permutation_test(permutation_type='samples')`
    on the mean, batched as a product of a 0/1 matrix with d: measured 15 to 40 times faster
    than scipy's at n = 200 to 5000 and 9999 resamples."""
    nonzero = np.asarray(d, dtype=float)
    nonzero = nonzero[nonzero != 0.0]
    k = len(nonzero)
    if k == 0:
        return 1.0
    total = float(nonzero.sum())
    bar = abs(total) - _NOISE * float(np.abs(nonzero).sum())
    if 2**k <= n_resamples:
        every = (np.arange(2**k)[:, None] >> np.arange(k)) & 1
        return float(np.mean(np.abs(_sign_sums(every, nonzero, total)) >= bar))
    width, per_batch = (k + 7) // 8, max(1, _SIGN_BATCH // k)
    hits = done = 0
    while done < n_resamples:
        rows = min(per_batch, n_resamples - done)
        packed = np.frombuffer(rng.bytes(rows * width), dtype=np.uint8).reshape(rows, width)
        bits = np.unpackbits(packed, axis=1, count=k)
        hits += int(np.count_nonzero(np.abs(_sign_sums(bits, nonzero, total)) >= bar))
        done += rows
    return (hits + 1) / (n_resamples + 1)


def _sign_flip_method(k: int, n_resamples: int) -> str:
    if k == 0:
        return "sign-flip permutation: every difference is 0, p = 1"
    if 2**k <= n_resamples:
        return (
            f"sign-flip permutation, exact: all 2^{k} = {2**k} sign patterns of "
            f"{_plural(k, 'nonzero difference')}"
        )
    return (
        f"sign-flip permutation, {n_resamples} resamples of the signs of "
        f"{_plural(k, 'nonzero difference')}"
    )


def normal_sign_flip_pvalue(d: np.ndarray) -> float:
    """The large-sample sign-flip p: under the null, sum(s * d) has mean 0 and variance sum(d^2)
    and is asymptotically normal, so p = 2 * (1 - Phi(|sum(d)| / sqrt(sum(d^2))))."""
    x = np.asarray(d, dtype=float)
    spread = math.sqrt(float(np.dot(x, x)))
    if spread == 0.0:
        return 1.0
    return min(1.0, math.erfc(abs(float(x.sum())) / spread / math.sqrt(2.0)))


_UNDEFINED: tuple[None, ...] = (None,) * 10


@dataclass(frozen=True)
class PairedDifferences:
    """One cell's paired queries: both arms' means over them and the differences candidate -
    control, one per query (in any order)."""

    control_mean: float
    candidate_mean: float
    differences: np.ndarray


def paired_statistics(
    control: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    n_resamples: int = 9999,
    seed: int | np.random.SeedSequence = 0,
    normal_approximation_min_pairs: int = DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS,
) -> PairedStats:
    """Paired statistics of candidate - control over aligned vectors (see the module docstring)."""
    x = np.asarray(control, dtype=float)
    y = np.asarray(candidate, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("control and candidate must be 1-d vectors of the same length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("paired values must be finite numbers")
    if len(x) == 0:
        return PairedStats(0, *_UNDEFINED)
    pairs = PairedDifferences(float(x.mean()), float(y.mean()), y - x)
    return difference_statistics(pairs, n_resamples, seed, normal_approximation_min_pairs)


def difference_statistics(
    pairs: PairedDifferences,
    n_resamples: int = 9999,
    seed: int | np.random.SeedSequence = 0,
    normal_approximation_min_pairs: int = DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS,
) -> PairedStats:
    """`paired_statistics` from the paired differences and both arms' means over the pairs.

    The differences are sorted first: every statistic is a function of their multiset, and in
    a fixed order the seeded resampling gives the same numbers whichever order the queries came
    in (the warehouse's aggregation has none)."""
    raw = np.asarray(pairs.differences, dtype=float)
    if raw.ndim != 1 or not np.all(np.isfinite(raw)):
        raise ValueError("paired differences must be a 1-d vector of finite numbers")
    n = len(raw)
    if n == 0:
        return PairedStats(0, *_UNDEFINED)
    # Query means summed in another order (pandas here, DuckDB in the warehouse) differ in the
    # last bits, and a bootstrap of tied values turns that into visibly different BCa intervals
    # (its bias correction counts resampled means below the observed one, and ties flip): the
    # differences are rounded to 12 decimals, so both give the same vector bit for bit, and
    # those within rounding of zero are zero.
    d = np.sort(np.round(raw, _DECIMALS))
    d[np.abs(d) <= _NOISE] = 0.0
    boot_seed, perm_seed = (
        seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    ).spawn(2)
    control_mean, candidate_mean, delta = pairs.control_mean, pairs.candidate_mean, float(d.mean())
    relative = delta / control_mean if control_mean != 0 else None
    ci: tuple[float | None, float | None] = (None, None)
    ci_method: str | None = None
    p_t: float | None = None
    large = normal_approximation_min_pairs
    if n >= 2 and _constant(d):
        ci, ci_method = (delta, delta), "every difference is equal: the interval is that value"
    elif n >= 2:
        if n >= large:
            ci = t_interval(n, delta, float(d.std(ddof=1)))
            ci_method = f"Student t interval, n={n}"
        else:
            low, high, ci_method = _bootstrap_ci(d, n_resamples, np.random.default_rng(boot_seed))
            ci = (low, high)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # `scipy.stats.ttest_rel(candidate, control)`: the one-sample test of the differences
            t_p = float(stats.ttest_1samp(raw, 0.0).pvalue)
        p_t = t_p if not caught and math.isfinite(t_p) else None
    k = int(np.count_nonzero(d))
    if k >= large:
        p_rand = normal_sign_flip_pvalue(d)
        p_method = (
            f"normal approximation of the sign-flip test, n={n} "
            f"({_plural(k, 'nonzero difference')})"
        )
    else:
        # n = 1: both sign patterns are as extreme as the observation, p = 1
        p_rand = sign_flip_pvalue(d, n_resamples, np.random.default_rng(perm_seed))
        p_method = _sign_flip_method(k, n_resamples)
    return PairedStats(
        n,
        control_mean,
        candidate_mean,
        delta,
        relative,
        *ci,
        p_t,
        p_rand,
        p_method,
        ci_method,
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


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s): {', '.join(missing)}")


def _check_request(
    control: str, candidate: str, metrics: Sequence[str], settings: ComparisonSettings
) -> None:
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
    `coverage[segment]`: the counts, the overall row under `nightly.OVERALL_SEGMENT`."""

    control: str
    candidate: str
    metrics: tuple[str, ...]
    variants: tuple[str, ...]
    segments: tuple[str, ...]
    pairs: Mapping[tuple[str, str], PairedDifferences]
    levels: Mapping[tuple[str, str, str], ArmSummary]
    coverage: Mapping[str, SegmentCoverage]


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
    _require(per_query, ID_COLUMNS, "the per-query table")
    chosen = choose_metrics(_metric_columns(per_query), metrics)
    _check_request(control, candidate, chosen, settings)
    frame = per_query.reset_index(drop=True)
    frame["_trace"] = np.arange(len(frame))
    long = frame.melt(
        id_vars=[*ID_COLUMNS, "_trace"],
        value_vars=list(chosen),
        var_name="metric",
        value_name="value",
    )
    return compare_data(data_from_long(long, control, candidate, chosen), settings)


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
    _check_request(control, candidate, chosen, settings)
    return compare_data(query_metrics_data(query_metrics, control, candidate, chosen), settings)


def query_metrics_choice(
    query_metrics: pd.DataFrame, metrics: Sequence[str] | None
) -> tuple[str, ...]:
    """`choose_metrics` among the metrics of long `query_metrics` rows, in `metric_order`."""
    _require(query_metrics, [*ID_COLUMNS, "trace_id", "metric", "value"], "query_metrics")
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


_NO_PAIRS = PairedDifferences(math.nan, math.nan, np.array([], dtype=float))


def compare_data(data: ComparisonData, settings: ComparisonSettings | None = None) -> Comparison:
    """The comparison of aggregated input (see `ComparisonData`); ValueError for a request that
    cannot be answered (an arm without traces, a guarded metric not compared, ...)."""
    settings = settings or ComparisonSettings()
    control, candidate, metrics = data.control, data.candidate, data.metrics
    _check_request(control, candidate, metrics, settings)
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


def _no_coverage(segment: str) -> SegmentCoverage:
    return SegmentCoverage(segment, *(0,) * (len(SegmentCoverage.__dataclass_fields__) - 1))


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
