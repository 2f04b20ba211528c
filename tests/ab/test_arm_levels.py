"""An arm's level on the comparison page: its mean with an interval that stays in [0, 1] for
metric values (Wilson's on an effective sample size), and the t interval for other values."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from retrieval_pipeline.ab.stats import ArmSummary, level_of, t_interval

Z = 1.959963984540054


def test_all_hits_reach_below_one_instead_of_a_point() -> None:
    level = level_of(ArmSummary.of([1.0] * 45))
    assert (level.traces, level.mean, level.ci_high) == (45, 1.0, 1.0)
    assert level.ci_low == pytest.approx(45 / (45 + Z**2))  # Wilson's lower bound at x = n


def test_zero_one_values_get_wilson() -> None:
    level = level_of(ArmSummary.of([1.0] * 44 + [0.0]))
    oracle = stats.binomtest(44, 45).proportion_ci(confidence_level=0.95, method="wilson")
    assert (level.ci_low, level.ci_high) == pytest.approx((oracle.low, oracle.high))
    assert level.ci_high is not None and level.ci_high < 1  # the t interval reached 1.021


def test_one_trace_has_an_interval() -> None:
    level = level_of(ArmSummary.of([0.0]))
    assert (level.ci_low, level.ci_high) == pytest.approx((0.0, Z**2 / (1 + Z**2)))


def test_values_outside_the_unit_scale_keep_the_t_interval() -> None:
    values = [0.5, 1.5, 2.5]
    level = level_of(ArmSummary.of(values))
    assert (level.ci_low, level.ci_high) == pytest.approx(t_interval(3, 1.5, 1.0))
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert level.ci_low == pytest.approx(1.5 - half)


def test_no_trace_no_level() -> None:
    level = level_of(ArmSummary.of([]))
    assert (level.traces, level.mean, level.ci_low, level.ci_high) == (0, None, None, None)
