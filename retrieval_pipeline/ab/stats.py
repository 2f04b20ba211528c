"""Paired statistics of one cell: the differences candidate - control over n paired queries,
their uncertainty, and Holm's adjustment over many cells.

Pure: arrays in, plain values out. The differences are rounded to 12 decimals and sorted before
any statistic, so the seeded resampling sees the same vector whichever entry point built it and
in whatever order the queries came.

Statistics, per segment (and overall) and metric, on d = candidate - control over the n pairs:
means of both arms, delta = mean(d), relative delta = delta / control mean; the paired t-test p
(`scipy.stats.ttest_rel`'s, computed from Student's t in `scipy.special`); a 95% interval of
mean(d); the paired randomization p of mean(d) = 0 (the signs of d flipped at random); and Holm's
adjustment of both p-values over every tested cell of the comparison (segments, overall and
metrics together). Only the bootstrap needs `scipy.stats` (an import several times the size of
`scipy.special`'s): a comparison of large cells never loads it.

Small samples are resampled, large ones use the large-sample forms of the same quantities, at
`normal_approximation_min_pairs` (N, default 1000; each cell records the method of its p-value
and interval in words):

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

Degenerate cells are decisions, not warnings: n = 0 is `not tested` (every statistic None);
n = 1 has no interval and no t-test, and a randomization p of 1; when every difference is equal the
interval is that value (every resample has the same mean), the t-test is undefined (None) and the
randomization p is exact (all zero: 1; a constant c != 0: 2 / 2^n, or its estimate).

An arm's level (`ArmSummary`, `level_of`) is its mean over all its annotated traces with an
interval that stays in [0, 1] (`intervals.bounded_mean_interval`, docs/intervals.md): what
thresholds judge.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from retrieval_pipeline.config import DEFAULT_NORMAL_APPROXIMATION_MIN_PAIRS
from retrieval_pipeline.intervals import bounded_mean_interval

CONFIDENCE_LEVEL = 0.95
# Differences this small are the rounding of averaging (metric values lie in [0, 1]): zero.
# Relative to sum(|d|), also the tolerance within which two sign-flip sums are a tie.
_NOISE = 1e-12
_DECIMALS = 12
# Bootstrap values per batch: about 24 MB a copy.
_BATCH_VALUES = 3_000_000
# Random signs per batch of the sign-flip test: a 16 MB copy as floats.
_SIGN_BATCH = 2_000_000


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
    """One arm's mean over all its annotated traces of a segment, with its 95% interval
    (`level_of`)."""

    traces: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None


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


def _scipy_stats() -> ModuleType:
    """`scipy.stats`, imported only for the bootstrap (a cell of fewer than N pairs): it costs
    about as much as DuckDB, pandas and pyarrow together, and a command that computes no
    interval or p-value (`evaluate` without `--stages`, `monitor`, the report's text), or only
    large cells (a nightly comparison), should not pay for it."""
    from scipy import stats

    return stats


def _scipy_special() -> ModuleType:
    """`scipy.special`, whose Student t distribution (`stdtr`, `stdtrit`) `scipy.stats.t` and
    `ttest_1samp` call, without the rest of `scipy.stats`."""
    from scipy import special

    return special


def t_test_p(d: np.ndarray) -> float | None:
    """The two-sided p of the one-sample t-test of mean(d) = 0: `scipy.stats.ttest_1samp(d,
    0).pvalue`, computed as scipy 1.17 computes it (the mean, the variance as the mean squared
    deviation times n / (n - 1), t = mean / sqrt(variance / n), p = 2 * stdtr(n - 1, -|t|)).
    None where scipy warns or gives no number: fewer than 2 values, values nearly identical
    (every deviation from the mean within 10 eps of it: scipy's "precision loss"), no spread."""
    n = len(d)
    if n < 2:
        return None
    mean = float(np.mean(d))
    deviations = d - mean
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.max(np.abs(deviations)) / abs(mean)
    if spread < np.finfo(float).eps * 10:
        return None
    variance = float(np.mean(deviations * deviations)) * (n / (n - 1))
    if variance == 0.0 or not math.isfinite(variance):
        return None
    t = mean / math.sqrt(variance / n)
    p = 2 * float(_scipy_special().stdtr(n - 1, -abs(t)))
    return p if math.isfinite(p) else None


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
            result = _scipy_stats().bootstrap(
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
    quantile = float(_scipy_special().stdtrit(n - 1, 0.5 + CONFIDENCE_LEVEL / 2))  # t.ppf's
    half = quantile * sd / math.sqrt(n)
    return mean - half, mean + half


def level_of(summary: ArmSummary) -> ArmLevel:
    """An arm's mean with its 95% interval; no mean when n = 0.

    For values in [0, 1] (every metric) the interval is `intervals.bounded_mean_interval`
    (Wilson's on an effective sample size: never outside [0, 1], and not zero-width when every
    value is equal); for other values, the Student t interval (none when n < 2, the value itself
    when every value is equal)."""
    if summary.n == 0 or summary.mean is None:
        return ArmLevel(0, None, None, None)
    mean = summary.mean
    if summary.low is None or summary.high is None:
        return ArmLevel(summary.n, mean, None, None)
    scale = max(1.0, abs(summary.low), abs(summary.high))
    equal = summary.high - summary.low <= _NOISE * scale
    if summary.low >= 0.0 and summary.high <= 1.0:
        interval = bounded_mean_interval(summary.n, mean, 0.0 if equal else summary.sd)
        assert interval is not None  # n > 0 and a mean
        return ArmLevel(summary.n, mean, interval.low, interval.high)
    if summary.n < 2 or summary.sd is None:
        return ArmLevel(summary.n, mean, None, None)
    if equal:
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
    on the mean, batched as a product of a 0/1 matrix with d: one matrix product per batch of
    sign patterns instead of scipy's general resampling loop, which is much slower at the
    nightly's sizes."""
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
        # `scipy.stats.ttest_rel(candidate, control)`: the one-sample test of the differences
        p_t = t_test_p(raw)
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
