"""Simulated coverage of three 95% intervals for a mean of per-trace values in [0, 1].

    python bench/interval_coverage.py [--reps 2000] [--seed 1]

For metric-shaped distributions (0/1 hit rate, MRR's 1/r, a continuous nDCG-like score, a score
that is exactly 1 on most traces) and small to moderate n, draws `reps` samples and reports, per
interval: coverage (share of intervals holding the true mean), mean width, and the share that
leaves [0, 1]. The intervals: the normal interval `sql/agg_segment_metrics.sql` computed (mean +-
1.96 sd / sqrt(n)), a seeded percentile bootstrap (1,000 resamples, on the first 500 samples),
and `retrieval_pipeline.intervals.bounded_mean_interval`. docs/intervals.md quotes the table.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval_pipeline.intervals import bounded_mean_interval

SIZES = (2, 5, 10, 20, 45, 200)
BOOTSTRAP_SAMPLES = 500
RESAMPLES = 1000
Draw = Callable[[np.random.Generator, int], np.ndarray]


def hit_rate(p: float) -> Draw:
    return lambda rng, size: (rng.random(size) < p).astype(float)


def reciprocal_rank(rng: np.random.Generator, size: int) -> np.ndarray:
    """1/r with r geometric (p = 0.5), and 0 (nothing relevant retrieved) for 20% of traces."""
    values = 1.0 / rng.geometric(0.5, size)
    values[rng.random(size) < 0.2] = 0.0
    return values


def ndcg_like(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.beta(4, 2, size)


def mostly_perfect(rng: np.random.Generator, size: int) -> np.ndarray:
    """Exactly 1 on 70% of traces, uniform on the rest."""
    values = rng.random(size)
    values[rng.random(size) < 0.7] = 1.0
    return values


DISTRIBUTIONS: dict[str, Draw] = {
    "0/1, p = 0.95": hit_rate(0.95),
    "0/1, p = 0.5": hit_rate(0.5),
    "MRR-like (1/r, 20% zero)": reciprocal_rank,
    "nDCG-like (Beta(4, 2))": ndcg_like,
    "70% exactly 1": mostly_perfect,
}


def normal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    mean, half = x.mean(axis=1), 1.96 * x.std(axis=1, ddof=1) / math.sqrt(n)
    return mean - half, mean + half


def bootstrap(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    picks = rng.integers(0, n, size=(RESAMPLES, n))
    means = x[:, picks].mean(axis=2)  # samples x resamples
    return np.quantile(means, 0.025, axis=1), np.quantile(means, 0.975, axis=1)


def bounded(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lows, highs = [], []
    for sample in x:
        n = len(sample)
        sd = float(sample.std(ddof=1)) if n > 1 else None
        interval = bounded_mean_interval(n, float(sample.mean()), sd)
        assert interval is not None
        lows.append(interval.low)
        highs.append(interval.high)
    return np.asarray(lows), np.asarray(highs)


def cell(low: np.ndarray, high: np.ndarray, truth: float) -> str:
    coverage = float(np.mean((low <= truth) & (truth <= high)))
    width = float(np.mean(high - low))
    outside = float(np.mean((low < 0) | (high > 1)))
    return f"{coverage:.3f} / {width:.3f} / {outside:.0%}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("coverage / mean width / share outside [0, 1]; nominal coverage 0.95\n")
    print("| distribution | true mean | n | normal (today) | percentile bootstrap | bounded |")
    print("|---|---|---|---|---|---|")
    for name, draw in DISTRIBUTIONS.items():
        truth = float(draw(rng, 2_000_000).mean())
        for n in SIZES:
            x = draw(rng, args.reps * n).reshape(args.reps, n)
            cells = [
                cell(*normal(x), truth),
                cell(*bootstrap(x[:BOOTSTRAP_SAMPLES], rng), truth),
                cell(*bounded(x), truth),
            ]
            print(f"| {name} | {truth:.3f} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
