"""Confidence intervals for a mean of per-trace values in [0, 1] that never leave [0, 1].

Every metric here takes a value in [0, 1] per trace, and many take few values: hit rate and P@1
are 0 or 1, MRR is 1/r. A Student t interval (mean +- t * sd / sqrt(n)) ignores the bounds: at
n = 45 with one miss it reads `0.934 .. 1.021`, and with no miss `1.000 .. 1.000`, as if 45 traces
proved the mean is exactly 1. The interval here is the Wilson score interval (Wilson 1927), on an
effective sample size where the values are not 0/1:

- For 0/1 values (hit rate, P@1, any metric on a day where it came out 0 or 1 on every trace) it
  is exactly Wilson's interval for a proportion: the means mu whose score statistic
  |mean - mu| / sqrt(mu (1 - mu) / n) is at most z.
- For values between 0 and 1 the variance is at most mu (1 - mu), Bernoulli's, and usually less:
  the interval is Wilson's with n replaced by n / phi, phi = sd^2 / (mean (1 - mean)) the
  observed share of that largest variance (the quasi-binomial dispersion; n / phi is Kish's
  effective sample size, as survey statistics use Wilson with a design effect). phi is shrunk
  towards 1 by one trace's weight, phi = (n phi_hat + 1) / (n + 1), so that a handful of equal
  values does not claim a zero-width interval, and capped at 1 (never wider than Wilson).
- A mean of exactly 0 or 1 means every value sits at that bound; the interval is then Wilson's:
  `0.921 .. 1.000` for 45 traces all at 1 (the data cannot rule out a mean a little below 1).

Like Wilson's, the interval always lies in [0, 1], contains the mean, and narrows as n grows.
`docs/intervals.md` has the simulated coverage next to the t interval and a percentile bootstrap,
and `sql/macro_bounded_mean_interval.sql` computes the same bounds in DuckDB (a test holds the two
equal). Pure: the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The normal quantile of a two-sided 95% interval, Phi^-1(0.975).
Z_95 = 1.959963984540054
# Means this far outside [0, 1] are floating-point noise of a sum of values in [0, 1].
_SLACK = 1e-9


@dataclass(frozen=True)
class Interval:
    """A two-sided interval of a mean: `low <= mean <= high`, all three in [0, 1]."""

    low: float
    high: float


def wilson_interval(successes: float, n: float, z: float = Z_95) -> Interval:
    """Wilson's score interval of a proportion: `successes` of `n` (n > 0; a fractional n is an
    effective sample size), at the two-sided level of the normal quantile `z`.

    centre = (p + z^2 / 2n) / (1 + z^2 / n); half = z / (1 + z^2 / n) * sqrt(p (1 - p) / n +
    z^2 / 4n^2), with p = successes / n."""
    if not n > 0:
        raise ValueError(f"a Wilson interval needs n > 0, got {n!r}")
    if not -_SLACK <= successes <= n * (1 + _SLACK):
        raise ValueError(f"successes must be in [0, n], got {successes!r} of {n!r}")
    n = float(n)
    p = min(1.0, max(0.0, float(successes) / n))
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # The exact bounds at p = 0 or 1 are 0 and 1; rounding must not move them past the mean.
    return Interval(max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def dispersion(n: int, mean: float, sd: float | None) -> float:
    """phi in (0, 1]: the values' variance as a share of the largest one a [0, 1] variable with
    this mean can have, shrunk towards 1 by one trace's weight; 1 (Wilson's own) when n = 1, the
    standard deviation is unknown, or the mean sits at 0 or 1."""
    bernoulli = mean * (1 - mean)
    if n < 2 or sd is None or not math.isfinite(sd) or bernoulli <= 0:
        return 1.0
    observed = sd * sd / bernoulli
    return min(1.0, (n * observed + 1) / (n + 1))


def bounded_mean_interval(
    n: int, mean: float | None, sd: float | None, z: float = Z_95
) -> Interval | None:
    """The 95% interval (for the default `z`) of a mean of `n` values in [0, 1], from their
    mean and sample standard deviation (ddof = 1; None when n = 1): Wilson's interval on the
    effective sample size n / `dispersion`. None when there is no value (n = 0 or no mean).
    ValueError when the mean is not in [0, 1] (the values were not)."""
    if n <= 0 or mean is None:
        return None
    if not math.isfinite(mean) or not -_SLACK <= mean <= 1 + _SLACK:
        raise ValueError(f"a mean of values in [0, 1] must be in [0, 1], got {mean!r}")
    mean = min(1.0, max(0.0, mean))
    effective = n / dispersion(n, mean, sd)
    return wilson_interval(mean * effective, effective, z)
