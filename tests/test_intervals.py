"""The bounded interval of a mean of [0, 1] values: Wilson's bounds by hand and by scipy, the
effective sample size for values between 0 and 1, its properties, and the SQL macros equal to it."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from retrieval_pipeline.intervals import (
    Z_95,
    Interval,
    bounded_mean_interval,
    dispersion,
    wilson_interval,
)
from retrieval_pipeline.warehouse.sql import sql_dir

Z2 = Z_95 * Z_95


def summary(values: list[float]) -> tuple[int, float, float | None]:
    x = np.asarray(values, dtype=float)
    return len(x), float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else None


def ends(interval: Interval) -> tuple[float, float]:
    return interval.low, interval.high


def interval_of(values: list[float]) -> Interval:
    result = bounded_mean_interval(*summary(values))
    assert result is not None
    return result


def test_wilson_at_the_bounds_by_hand() -> None:
    # x = 0: [0, z^2 / (n + z^2)]; x = n: [n / (n + z^2), 1].
    assert ends(wilson_interval(0, 10)) == pytest.approx((0.0, Z2 / (10 + Z2)))
    assert ends(wilson_interval(45, 45)) == pytest.approx((45 / (45 + Z2), 1.0))
    assert round(45 / (45 + Z2), 5) == 0.92135


def test_wilson_by_hand_for_one_miss_in_45() -> None:
    p, n = 44 / 45, 45
    centre = (p + Z2 / (2 * n)) / (1 + Z2 / n)
    half = Z_95 / (1 + Z2 / n) * math.sqrt(p * (1 - p) / n + Z2 / (4 * n * n))
    assert ends(wilson_interval(44, 45)) == pytest.approx((centre - half, centre + half))
    # Newcombe (1998), Table I, the score method: 81/263 -> 0.2553 .. 0.3662.
    low, high = wilson_interval(81, 263).low, wilson_interval(81, 263).high
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)


@pytest.mark.parametrize("n", [1, 2, 5, 45, 300])
def test_zero_one_values_give_wilson_exactly(n: int) -> None:
    """Hit rate and P@1 are 0 or 1 per trace: the interval is scipy's Wilson interval."""
    for k in range(n + 1):
        values = [1.0] * k + [0.0] * (n - k)
        oracle = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        got = interval_of(values)
        assert got.low == pytest.approx(oracle.low, abs=1e-9), (k, n)
        assert got.high == pytest.approx(oracle.high, abs=1e-9), (k, n)


def test_values_between_zero_and_one_use_an_effective_sample_size() -> None:
    values = [0.2, 0.5, 0.9]
    mean = (0.2 + 0.5 + 0.9) / 3
    variance = ((0.2 - mean) ** 2 + (0.5 - mean) ** 2 + (0.9 - mean) ** 2) / 2
    phi = (3 * variance / (mean * (1 - mean)) + 1) / (3 + 1)
    assert dispersion(3, mean, math.sqrt(variance)) == pytest.approx(phi)
    expected = wilson_interval(mean * 3 / phi, 3 / phi)
    assert ends(interval_of(values)) == pytest.approx(ends(expected))
    # Narrower than Wilson on n = 3 (the values vary less than 0/1 values would) ...
    assert interval_of(values).high - interval_of(values).low < (
        wilson_interval(mean * 3, 3).high - wilson_interval(mean * 3, 3).low
    )


def test_all_equal_values() -> None:
    # 45 traces all at 1: not `1.000 .. 1.000` but Wilson's 45 / (45 + z^2) .. 1.
    assert ends(interval_of([1.0] * 45)) == pytest.approx((45 / (45 + Z2), 1.0))
    assert ends(interval_of([0.0] * 45)) == pytest.approx((0.0, Z2 / (45 + Z2)))
    # 45 traces all at 0.7: phi = (45 * 0 + 1) / 46, so Wilson on 45 * 46 = 2070 traces.
    expected = wilson_interval(0.7 * 2070, 2070)
    got = interval_of([0.7] * 45)
    assert ends(got) == pytest.approx(ends(expected))
    assert got.low < 0.7 < got.high


def test_one_value_and_none() -> None:
    assert bounded_mean_interval(0, None, None) is None
    one = bounded_mean_interval(1, 1.0, None)
    assert one is not None and ends(one) == pytest.approx((1 / (1 + Z2), 1.0))
    with pytest.raises(ValueError, match=r"must be in \[0, 1\], got 1.2"):
        bounded_mean_interval(3, 1.2, 0.1)
    with pytest.raises(ValueError, match="n > 0"):
        wilson_interval(0, 0)


def test_the_student_t_interval_leaves_the_scale_where_this_one_does_not() -> None:
    n, mean, sd = summary([1.0] * 44 + [0.0])
    assert sd is not None
    t_high = mean + 1.96 * sd / math.sqrt(n)  # what sql/agg_segment_metrics.sql computed
    assert t_high > 1
    assert interval_of([1.0] * 44 + [0.0]).high < 1


unit_values = st.lists(
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=60
)


@settings(max_examples=300, deadline=None)
@given(unit_values)
def test_within_the_scale_and_holds_the_mean(values: list[float]) -> None:
    mean = summary(values)[1]
    got = interval_of(values)
    assert 0.0 <= got.low <= min(1.0, mean + 1e-12)
    assert max(0.0, mean - 1e-12) <= got.high <= 1.0


@settings(max_examples=100, deadline=None)
@given(unit_values.filter(lambda v: len(set(v)) > 1))
def test_narrows_as_the_sample_repeats(values: list[float]) -> None:
    widths = [
        interval_of(values * copies).high - interval_of(values * copies).low
        for copies in (1, 2, 4, 8)
    ]
    assert widths == sorted(widths, reverse=True)
    assert widths[-1] < widths[0]


@pytest.fixture(scope="module")
def conn() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute((sql_dir() / "macros_intervals.sql").read_text(encoding="utf-8"))
    return connection


def sql_interval(
    conn: duckdb.DuckDBPyConnection, values: list[float]
) -> tuple[float | None, float | None]:
    conn.execute("create or replace temp table v (value double)")
    if values:
        conn.executemany("insert into v values (?)", [(value,) for value in values])
    row = conn.execute(
        """
        with
        s as (
            select count(value) as n, clamp_unit(avg(value)) as p, stddev_samp(value) as sd
            from v
        ),
        e as (select p, interval_effective_traces(n, p, sd) as m from s)
        select wilson_low(p, m, $z), wilson_high(p, m, $z) from e
        """,
        {"z": Z_95},
    ).fetchone()
    assert row is not None
    return row[0], row[1]


@settings(max_examples=150, deadline=None)
@given(unit_values)
def test_sql_macros_equal_the_python(conn: duckdb.DuckDBPyConnection, values: list[float]) -> None:
    low, high = sql_interval(conn, values)
    expected = interval_of(values)
    assert low == pytest.approx(expected.low, abs=1e-9)
    assert high == pytest.approx(expected.high, abs=1e-9)


def test_sql_macros_with_no_value(conn: duckdb.DuckDBPyConnection) -> None:
    assert sql_interval(conn, []) == (None, None)
