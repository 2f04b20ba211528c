"""The A/B comparison: pairing and counts, statistics against independent computations, the flag."""

from __future__ import annotations

import itertools
import math
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from retrieval_pipeline.ab.compare import ComparisonSettings
from retrieval_pipeline.ab.pairing import compare_variants
from retrieval_pipeline.ab.stats import (
    ArmSummary,
    holm_adjust,
    paired_statistics,
    t_interval,
    t_test_p,
)
from retrieval_pipeline.metrics import MetricConfigError, parse_metrics
from retrieval_pipeline.segments import OVERALL_SEGMENT
from tests.oracles import compare_query_metrics

pytestmark = pytest.mark.filterwarnings("error")  # degenerate cells must not warn

NAN = float("nan")


def trace(query: str, variant: str, segment: str, ndcg: float, mrr: float | None = None) -> dict:
    return {
        "query_id": query,
        "segment": segment,
        "variant": variant,
        "ndcg@10": ndcg,
        "mrr": ndcg if mrr is None else mrr,
    }


# Segment s1: q1 served twice by control (0.2, 0.4: mean 0.3) and once by candidate (0.6);
# q2 by both (0.5 each; candidate's second trace unannotated, so its mean stays 0.5);
# q3 by both but unannotated for control; q4 control only; q5 candidate only.
# Segment s2: q7 by both (0.4 vs 0.8). A third variant is ignored.
CRAFTED = pd.DataFrame(
    [
        trace("q1", "A", "s1", 0.2),
        trace("q1", "A", "s1", 0.4),
        trace("q1", "B", "s1", 0.6),
        trace("q2", "A", "s1", 0.5),
        trace("q2", "B", "s1", 0.5),
        trace("q2", "B", "s1", NAN),
        trace("q3", "A", "s1", NAN),
        trace("q3", "B", "s1", 0.7),
        trace("q4", "A", "s1", 0.9),
        trace("q5", "B", "s1", 0.1),
        trace("q7", "A", "s2", 0.4),
        trace("q7", "B", "s2", 0.8),
        trace("q1", "C", "s1", 1.0),
    ]
)
FAST = ComparisonSettings(n_resamples=999)


def test_pairing_and_counts_on_a_crafted_set() -> None:
    result = compare_variants(CRAFTED, "A", "B", FAST)
    assert result.segments == ("s1", "s2", OVERALL_SEGMENT)
    s1, s2, overall = result.coverage
    assert (s1.control_traces, s1.candidate_traces) == (5, 5)
    assert (s1.control_annotated_traces, s1.candidate_annotated_traces) == (4, 4)
    assert (s1.control_queries, s1.candidate_queries) == (4, 4)
    assert (s1.paired, s1.shared_unpaired, s1.control_only, s1.candidate_only) == (2, 1, 1, 1)
    assert (s2.paired, s2.shared_unpaired, s2.control_only, s2.candidate_only) == (1, 0, 0, 0)
    assert (overall.paired, overall.control_only, overall.candidate_only) == (3, 1, 1)

    cell = result.cell("s1", "ndcg@10")
    assert cell.n == 2
    assert cell.control_mean == pytest.approx((0.3 + 0.5) / 2)
    assert cell.candidate_mean == pytest.approx((0.6 + 0.5) / 2)
    assert cell.delta == pytest.approx(((0.6 - 0.3) + (0.5 - 0.5)) / 2)
    assert cell.relative_delta == pytest.approx(0.15 / 0.4)
    whole = result.cell(OVERALL_SEGMENT, "mrr")
    assert whole.n == 3
    assert whole.delta == pytest.approx((0.3 + 0.0 + 0.4) / 3)


def test_long_query_metrics_give_the_same_comparison() -> None:
    wide = CRAFTED.assign(trace_id=[f"t{i}" for i in range(len(CRAFTED))])
    long = wide.melt(
        id_vars=["trace_id", "query_id", "segment", "variant"],
        value_vars=["ndcg@10", "mrr"],
        var_name="metric",
        value_name="value",
    ).assign(partition_date=date(2026, 1, 1))
    from_wide = compare_variants(CRAFTED, "A", "B", FAST)
    from_long = compare_query_metrics(long, "A", "B", FAST)
    assert from_long.coverage == from_wide.coverage
    assert from_long.cells_frame().equals(from_wide.cells_frame())


def test_the_warehouse_rows_and_the_engine_table_agree() -> None:
    """The asset's input (long `query_metrics` rows) and the CLI's (`per_query`) are one thing."""
    from retrieval_pipeline.warehouse import connection, ingestion, steps
    from retrieval_pipeline.warehouse import corpus as wcorpus
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    rng = np.random.default_rng(8)
    records = []
    for i in range(40):
        docs = [f"d{j}" for j in rng.permutation(6)]
        records.append(
            {
                "trace_id": f"t{i}",
                "query_id": f"q{i % 12}",
                "timestamp": f"2026-01-0{1 + i % 3}T10:00:00Z",
                "retrieved_ids": docs,
                "relevant_ids": ["d0", "d1"] if i % 5 else None,
                "segment": "s" if i % 2 else "t",
                "variant": "A" if (i // 12) % 2 else "B",  # each query served by both
            }
        )
    traces = pd.DataFrame(records)
    names = ["ndcg@10", "mrr"]
    per_query = run_evaluation(traces, names).per_query
    conn = connection.connect(":memory:")
    try:
        ingestion.ingest_traces(conn, traces)
        wcorpus.load_corpus(conn, None)
        start, end = date(2026, 1, 1), date(2026, 1, 3)
        steps.build_labels(conn, start, end, use_corpus=False)
        steps.compute_query_metrics(conn, parse_metrics(names), start, end)
        rows = conn.execute("select * from query_metrics").df()
    finally:
        conn.close()
    from_rows = compare_query_metrics(rows, "A", "B", FAST)
    from_table = compare_variants(per_query, "A", "B", FAST)
    assert from_rows.coverage == from_table.coverage
    pd.testing.assert_frame_equal(from_rows.cells_frame(), from_table.cells_frame())
    overall = from_rows.coverage[-1]
    assert (overall.paired, overall.shared_unpaired) == (11, 1)  # q8's one A trace: unlabelled


def test_ttest_p_is_scipys_on_the_same_vectors() -> None:
    rng = np.random.default_rng(11)
    control = rng.uniform(0.2, 0.9, 25)
    candidate = np.clip(control + rng.normal(0.03, 0.1, 25), 0, 1)
    result = paired_statistics(control, candidate, n_resamples=199)
    assert result.p_t == pytest.approx(stats.ttest_rel(candidate, control).pvalue, rel=1e-12)
    assert result.delta == pytest.approx(np.mean(candidate - control), rel=1e-12)


def _scipy_ttest_p(d: np.ndarray) -> float | None:
    """scipy's one-sample t-test p of mean(d) = 0, None where it warns or gives no number (what
    the comparison reported before computing it from `scipy.special`)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = float(stats.ttest_1samp(d, 0.0).pvalue)
    return p if not caught and math.isfinite(p) else None


@pytest.mark.parametrize(
    "d",
    [
        np.random.default_rng(3).normal(0.01, 0.2, 5000),  # a large cell: the nightly's
        np.random.default_rng(4).normal(-0.4, 0.05, 1000),
        np.random.default_rng(5).uniform(-1, 1, 2),
        np.array([0.1, -0.1]),  # mean 0: t = 0, p = 1
        np.array([0.25, 0.25, 0.25]),  # no spread: no test
        np.array([0.0, 0.0]),
        0.5 + np.array([0.0, 1e-17, 2e-17, 0.0]),  # equal once added to 0.5: no spread
        0.5 + np.array([0.0, 5e-16, -5e-16]),  # nearly identical: scipy's precision loss
        0.5 + np.array([0.0, 4e-15, -4e-15]),  # just past it
        np.array([0.3]),
    ],
)
def test_the_t_test_p_is_scipys_ttest_1samp(d: np.ndarray) -> None:
    """`t_test_p` (Student's t from scipy.special) equals scipy.stats.ttest_1samp's p, and is
    None exactly where scipy warns or gives nan."""
    expected = _scipy_ttest_p(d)
    got = t_test_p(d)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, rel=1e-14, abs=1e-300)


@pytest.mark.parametrize("n", [2, 3, 30, 999, 1000, 250_000])
def test_the_t_interval_is_scipys_t_quantile(n: int) -> None:
    low, high = t_interval(n, 0.125, 0.5)
    half = float(stats.t.ppf(0.975, n - 1)) * 0.5 / math.sqrt(n)
    assert (low, high) == pytest.approx((0.125 - half, 0.125 + half), rel=1e-15)


def exact_sign_flip_p(d: np.ndarray) -> float:
    """Two-sided p over all 2^n sign patterns: P(|mean(s * d)| >= |mean(d)|)."""
    observed = abs(d.mean())
    means = np.array(
        [abs(np.mean(np.array(s) * d)) for s in itertools.product((1, -1), repeat=len(d))]
    )
    return float(np.mean(means >= observed - 1e-12))


@pytest.mark.parametrize(
    "d",
    [
        [0.12, -0.03, 0.25, 0.08, -0.11, 0.19, 0.05],
        [0.1, 0.1, -0.2, 0.0, 0.3, 0.1],  # ties and a zero difference
        [0.5, 0.25, 0.125],
        [-0.4, -0.1, -0.3, -0.2, -0.05, -0.15, -0.25, -0.35, -0.45, -0.5],
    ],
)
def test_randomization_p_is_the_exact_enumeration_on_small_n(d: list[float]) -> None:
    diffs = np.array(d)
    control = np.full(len(d), 0.5)
    result = paired_statistics(control, control + diffs, n_resamples=9999)
    assert result.p_randomization == pytest.approx(exact_sign_flip_p(diffs), abs=1e-12)


def test_randomized_p_is_within_monte_carlo_error_of_the_exact_one() -> None:
    rng = np.random.default_rng(5)
    diffs = rng.normal(0.04, 0.1, 14)  # 2^14 patterns > 1999 resamples: Monte Carlo
    exact = exact_sign_flip_p(diffs)
    result = paired_statistics(np.zeros(14), diffs, n_resamples=1999, seed=3)
    assert result.p_randomization is not None
    # p_mc = (hits + 1) / (B + 1): binomial sd of the estimate, 4 of them, plus the +1
    sd = math.sqrt(exact * (1 - exact) / 1999)
    assert abs(result.p_randomization - exact) <= 4 * sd + 1 / 2000


def test_degenerate_cells_are_decisions_not_warnings() -> None:
    empty = paired_statistics([], [])
    assert empty.n == 0 and empty.p_randomization is None and empty.delta is None
    one = paired_statistics([0.2], [0.9])
    assert (one.n, one.p_t, one.ci_low, one.p_randomization) == (1, None, None, 1.0)
    constant = paired_statistics([0.2] * 5, [0.3] * 5)
    assert constant.ci_low == pytest.approx(0.1) and constant.ci_high == pytest.approx(0.1)
    assert constant.p_t is None
    assert constant.p_randomization == pytest.approx(2 / 2**5)  # all + or all -
    same = paired_statistics([0.4] * 6, [0.4] * 6)
    assert (same.delta, same.p_randomization, same.p_t) == (0.0, 1.0, None)

    cells = compare_variants(
        pd.DataFrame([trace("q1", "A", "s", 0.5), trace("q1", "B", "s", 0.5)]), "A", "B", FAST
    )
    assert {c.verdict for c in cells.cells} == {"no significant difference"}
    lonely = compare_variants(
        pd.DataFrame([trace("q1", "A", "s", 0.5), trace("q2", "B", "s", 0.1)]), "A", "B", FAST
    )
    assert {c.verdict for c in lonely.cells} == {"not tested"}
    assert all(c.p_randomization_holm is None for c in lonely.cells)


def test_holm_against_a_hand_example() -> None:
    # sorted: 0.005 * 4 = 0.02; 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04 -> max 0.06
    assert holm_adjust([0.01, 0.04, 0.03, 0.005, None]) == pytest.approx(
        [0.03, 0.06, 0.06, 0.02, None]
    )
    assert holm_adjust([0.5, 0.6]) == [1.0, 1.0]
    assert holm_adjust([None, 0.02]) == [None, 0.02]
    assert holm_adjust([]) == []


def test_same_seed_same_numbers_and_cells_independent_of_each_other() -> None:
    first = compare_variants(CRAFTED, "A", "B", ComparisonSettings(seed=4, n_resamples=999))
    again = compare_variants(CRAFTED, "A", "B", ComparisonSettings(seed=4, n_resamples=999))
    assert first.cells_frame().equals(again.cells_frame())
    alone = compare_variants(
        CRAFTED, "A", "B", ComparisonSettings(seed=4, n_resamples=999), metrics=["ndcg@10"]
    )
    a, b = first.cell("s1", "ndcg@10"), alone.cell("s1", "ndcg@10")
    assert (a.ci_low, a.ci_high, a.p_randomization) == (b.ci_low, b.ci_high, b.p_randomization)


def test_a_known_effect_is_found() -> None:
    rng = np.random.default_rng(2026)
    true_delta, sims, n = 0.08, 30, 40
    covered = found = 0
    for sim in range(sims):
        control = rng.uniform(0.3, 0.8, n)
        candidate = control + true_delta + rng.normal(0, 0.1, n)
        result = paired_statistics(control, candidate, n_resamples=499, seed=sim)
        assert result.ci_low is not None and result.ci_high is not None
        covered += result.ci_low <= true_delta <= result.ci_high
        found += result.p_randomization is not None and result.p_randomization <= 0.05
    # 95% coverage: the binomial sd over 30 sims is sqrt(30 * .05 * .95) = 1.2 intervals; allow 3
    assert covered >= sims * 0.95 - 3 * math.sqrt(sims * 0.05 * 0.95)
    # effect / sd = 0.8 at n = 40: the t statistic is about 5, power is essentially 1
    assert found >= sims - 1


def test_the_null_false_positive_rate_stays_near_alpha() -> None:
    rng = np.random.default_rng(99)
    sims, n, alpha = 200, 12, 0.05
    rejections = 0
    for sim in range(sims):
        control = rng.uniform(0.2, 0.9, n)
        candidate = control + rng.normal(0, 0.1, n)  # no true difference
        result = paired_statistics(control, candidate, n_resamples=199, seed=sim)
        rejections += result.p_randomization is not None and result.p_randomization <= alpha
    rate = rejections / sims
    sd = math.sqrt(alpha * (1 - alpha) / sims)  # 0.0154: binomial sd of the rate
    assert alpha - 3 * sd <= rate <= alpha + 3 * sd


def test_known_effect_end_to_end_better_and_no_difference() -> None:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(30):
        base = float(rng.uniform(0.3, 0.7))
        rows += [trace(f"a{i}", "A", "a", base), trace(f"a{i}", "B", "a", base + 0.2)]
        rows += [trace(f"b{i}", "A", "b", base), trace(f"b{i}", "B", "b", base)]
    result = compare_variants(pd.DataFrame(rows), "A", "B", FAST)
    assert result.cell("a", "ndcg@10").verdict == "better"
    assert result.cell("b", "ndcg@10").verdict == "no significant difference"
    assert not result.flagged


def regression(control: float, candidate: float, n: int = 3) -> pd.DataFrame:
    rows = []
    for i in range(n):
        rows += [
            trace(f"q{i}", "A", "multi_hop", control),
            trace(f"q{i}", "B", "multi_hop", candidate),
        ]
    return pd.DataFrame(rows)


def test_threshold_reason_in_words() -> None:
    settings = ComparisonSettings(
        thresholds={"multi_hop": {"nDCG@10": 0.7}}, n_resamples=999, min_annotated_traces=3
    )
    result = compare_variants(regression(0.714, 0.683), "A", "B", settings)
    assert result.flagged
    assert result.reasons == ("multi_hop: ndcg@10 0.683 < 0.700 (control 0.714)",)
    everywhere = ComparisonSettings(
        thresholds={"*": {"ndcg@10": 0.7}}, n_resamples=999, min_annotated_traces=3
    )
    both = compare_variants(regression(0.714, 0.683), "A", "B", everywhere)
    assert both.reasons[1] == "all segments: ndcg@10 0.683 < 0.700 (control 0.714)"
    # control below too: not the candidate's doing
    below = compare_variants(regression(0.69, 0.683), "A", "B", everywhere)
    assert not below.flagged
    assert below.cell("multi_hop", "ndcg@10").threshold_status == "both_below"
    # too few annotated traces to judge a level
    few = compare_variants(regression(0.714, 0.683, n=2), "A", "B", everywhere)
    assert not few.flagged
    assert few.cell("multi_hop", "ndcg@10").threshold_status == "insufficient"


def test_thresholds_judge_all_annotated_traces_not_only_the_paired_ones() -> None:
    # the candidate's paired query is poor, but its other annotated traces lift its level
    rows = [trace("q0", "A", "s", 0.8), trace("q0", "B", "s", 0.5)]
    rows += [trace(f"c{i}", "B", "s", 0.9) for i in range(4)]
    rows += [trace(f"k{i}", "A", "s", 0.8) for i in range(4)]
    settings = ComparisonSettings(
        thresholds={"s": {"ndcg@10": 0.7}}, n_resamples=999, min_annotated_traces=5
    )
    cell = compare_variants(pd.DataFrame(rows), "A", "B", settings).cell("s", "ndcg@10")
    assert (cell.control_mean, cell.candidate_mean) == (0.8, 0.5)
    assert cell.candidate_trace_mean == pytest.approx((0.5 + 4 * 0.9) / 5)
    assert (cell.control_traces, cell.candidate_traces) == (5, 5)
    assert cell.threshold_status == "pass"


def test_guarded_metric_significantly_worse_flags() -> None:
    rng = np.random.default_rng(3)
    control = rng.uniform(0.6, 0.9, 20)
    rows = []
    for i, value in enumerate(control):
        rows += [trace(f"q{i}", "A", "s", value, 0.9), trace(f"q{i}", "B", "s", value - 0.2, 0.9)]
    frame = pd.DataFrame(rows)
    unguarded = compare_variants(frame, "A", "B", FAST)
    assert unguarded.cell("s", "ndcg@10").verdict == "worse" and not unguarded.flagged
    guarded = compare_variants(frame, "A", "B", ComparisonSettings(guarded_metrics=("ndcg@10",)))
    assert len(guarded.reasons) == 2  # the segment and the overall row
    assert guarded.reasons[0].startswith("s: ndcg@10 significantly worse, ")
    assert "Holm-adjusted randomization p" in guarded.reasons[0]


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ComparisonSettings(alpha=1.5)
    with pytest.raises(MetricConfigError, match="unknown metric"):
        ComparisonSettings(guarded_metrics=("ndgc@10",))
    assert ComparisonSettings(guarded_metrics=("nDCG@10", "RR")).guarded_metrics == (
        "ndcg@10",
        "mrr",
    )
    with pytest.raises(ValueError, match="variants present: A, B, C"):
        compare_variants(CRAFTED, "A", "Z")
    with pytest.raises(ValueError, match="same variant"):
        compare_variants(CRAFTED, "A", "A")
    with pytest.raises(ValueError, match="guarded metric map is not compared"):
        compare_variants(CRAFTED, "A", "B", ComparisonSettings(guarded_metrics=("map",)))
    with pytest.raises(ValueError, match="reserved"):
        compare_variants(CRAFTED.assign(segment=OVERALL_SEGMENT), "A", "B", FAST)
    with pytest.raises(ValueError, match="lacks column"):
        compare_variants(CRAFTED.drop(columns=["query_id"]), "A", "B", FAST)


def test_sample_regression_is_flagged_and_clean_day_is_not(tmp_path: Path) -> None:
    from retrieval_pipeline.config import DEFAULT_THRESHOLDS, ChecksConfig
    from retrieval_pipeline.sample import REGRESSION_SEGMENT, write_sample_store
    from retrieval_pipeline.warehouse.evaluation import run_evaluation

    clean, bad = date(2026, 1, 9), date(2026, 1, 10)
    write_sample_store(tmp_path, days=2, seed=7, end_date=bad)
    headline = ["ndcg@10", "mrr"]  # 12 cells: Holm reaches below alpha with 999 resamples
    settings = ComparisonSettings(
        guarded_metrics=("ndcg@10",),
        thresholds={"*": {m: DEFAULT_THRESHOLDS[m] for m in headline}},
        n_resamples=999,
        min_annotated_traces=ChecksConfig().min_annotated_traces,
    )
    verdicts = {}
    for day in (clean, bad):
        run = run_evaluation(
            [tmp_path / "traces" / f"date={day.isoformat()}"],
            headline,
            corpus=tmp_path / "corpus" / "corpus.parquet",
        )
        verdicts[day] = compare_variants(run.per_query, "control", "candidate", settings)
    assert not verdicts[clean].flagged
    reasons = verdicts[bad].reasons
    # one day holds only a handful of paired multi_hop queries (too few for significance after
    # Holm: that is what the look-back window is for); the level check catches it alone
    assert len(reasons) == 1
    assert reasons[0].startswith(f"{REGRESSION_SEGMENT}: ndcg@10 ")
    assert reasons[0].endswith(")") and " < 0.650 (control " in reasons[0]


# --- resampling and the large-sample forms --------------------------------------------------


def tied_metric_pairs(seed: int, n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Paired values like real metric means: tied on a 0.1 grid, bounded, a quarter of the
    differences zero and a right-skewed rest (skewness about 0.7)."""
    rng = np.random.default_rng(seed)
    control = np.round(rng.beta(2, 3, n) * 10) / 10
    steps = rng.choice(
        [-0.4, -0.2, -0.1, 0.1, 0.2, 0.4, 0.8], n, p=[0.1, 0.2, 0.2, 0.2, 0.15, 0.1, 0.05]
    )
    moved = rng.random(n) < 0.75
    return control, np.clip(control + (steps + shift) * moved, 0, 1)


@pytest.mark.parametrize(("seed", "shift"), [(1, -0.027), (2, -0.012), (3, -0.025), (4, -0.035)])
def test_the_normal_approximation_agrees_with_scipys_permutation_and_bootstrap(
    seed: int, shift: float
) -> None:
    """Above the threshold (1500 pairs, about 1100 nonzero differences; p from 0.006 to 0.7),
    against the methods it replaces, run by scipy on the same differences.

    p: scipy's Monte Carlo two-sided p (2 * min of the one-sided ones, 9999 resamples) has sd
    sqrt(p (2 - p) / 9999) (0.009 at p = 0.5); allowed: 4 of them, its +1 terms and 0.005 for the
    approximation (its error shrinks like 1 / k for this symmetric null). Interval: each end
    within 10% of the half-width of scipy's BCa bootstrap (9999 resamples); they differ by the
    skewness of d over sqrt(n), a few percent here."""
    control, candidate = tied_metric_pairs(seed, 1500, shift)
    d = candidate - control
    result = paired_statistics(control, candidate, n_resamples=9999, seed=seed)
    assert result.p_randomization_method is not None and result.ci_method is not None
    assert result.p_randomization_method.startswith("normal approximation of the sign-flip test")
    assert result.ci_method == "Student t interval, n=1500"
    scipy_p = stats.permutation_test(
        (d,), np.mean, permutation_type="samples", vectorized=True, n_resamples=9999, rng=seed
    ).pvalue
    assert result.p_randomization is not None
    sd = math.sqrt(scipy_p * (2 - scipy_p) / 9999)
    assert abs(result.p_randomization - scipy_p) <= 4 * sd + 2 / 10000 + 0.005
    boot = stats.bootstrap((d,), np.mean, n_resamples=9999, rng=seed, method="BCa")
    assert result.ci_low is not None and result.ci_high is not None
    half = (result.ci_high - result.ci_low) / 2
    assert abs(result.ci_low - boot.confidence_interval.low) <= 0.1 * half
    assert abs(result.ci_high - boot.confidence_interval.high) <= 0.1 * half


def test_the_batched_sign_flip_agrees_with_scipys_permutation_test() -> None:
    """Below the threshold the randomization p is resampled, by a batched sign flip of its own:
    within Monte Carlo error of `scipy.stats.permutation_test` (the sd of both estimates, 4 of
    them, plus their +1 terms)."""
    control, candidate = tied_metric_pairs(8, 300, -0.04)
    d = candidate - control
    result = paired_statistics(control, candidate, n_resamples=9999, seed=2)
    assert result.p_randomization is not None
    assert result.p_randomization_method == (
        f"sign-flip permutation, 9999 resamples of the signs of {np.count_nonzero(d)} nonzero "
        "differences"
    )
    assert result.ci_method == "BCa bootstrap, 9999 resamples"
    scipy_p = stats.permutation_test(
        (d,), np.mean, permutation_type="samples", vectorized=True, n_resamples=9999, rng=2
    ).pvalue
    p = result.p_randomization
    assert 0.01 < p < 0.9  # a p worth comparing
    sd = math.sqrt((p * (1 - p) + scipy_p * (2 - scipy_p)) / 9999)
    assert abs(p - scipy_p) <= 4 * sd + 2 / 10000


def test_the_method_switches_exactly_at_the_threshold() -> None:
    rng = np.random.default_rng(12)
    control = rng.uniform(0.2, 0.8, 130)
    candidate = control + rng.normal(0.01, 0.1, 130)
    methods = {}
    for n in (99, 100):
        result = paired_statistics(
            control[:n], candidate[:n], n_resamples=999, normal_approximation_min_pairs=100
        )
        methods[n] = (result.ci_method, result.p_randomization_method)
    assert methods[99] == (
        "BCa bootstrap, 999 resamples",
        "sign-flip permutation, 999 resamples of the signs of 99 nonzero differences",
    )
    assert methods[100] == (
        "Student t interval, n=100",
        "normal approximation of the sign-flip test, n=100 (100 nonzero differences)",
    )
    # the p-value counts nonzero differences only: 120 pairs, 99 or 100 of them nonzero
    for nonzero in (99, 100):
        y = candidate[:120].copy()
        y[nonzero:] = control[nonzero:120]
        result = paired_statistics(
            control[:120], y, n_resamples=999, normal_approximation_min_pairs=100
        )
        assert result.ci_method == "Student t interval, n=120"
        words = result.p_randomization_method
        assert words is not None
        expected = "normal approximation" if nonzero == 100 else "sign-flip permutation, 999"
        assert words.startswith(expected), words
        assert f"{nonzero} nonzero differences" in words


def test_the_methods_are_in_every_cell_and_report() -> None:
    from retrieval_pipeline.reports.comparison import comparison_html, comparison_markdown

    result = compare_variants(CRAFTED, "A", "B", FAST)
    cell = result.cell("s1", "ndcg@10")
    assert cell.p_randomization_method == (
        "sign-flip permutation, exact: all 2^1 = 2 sign patterns of 1 nonzero difference"
    )
    assert cell.ci_method == "BCa bootstrap, 999 resamples"
    record = result.to_dict()
    assert record["settings"]["normal_approximation_min_pairs"] == 1000
    assert {"p_randomization_method", "ci_method"} <= set(record["cells"][0])
    markdown = comparison_markdown(result)
    assert "| interval method | randomization p method |" in markdown
    assert "sign-flip permutation, exact: all 2^1 = 2 sign patterns" in markdown
    page = comparison_html(result)
    assert "BCa bootstrap, 999 resamples" in page and "Student t from 1000 on" in page


def test_the_numbers_do_not_depend_on_the_order_of_the_queries() -> None:
    rng = np.random.default_rng(4)
    control = rng.uniform(0.2, 0.8, 60)
    candidate = control + rng.normal(0.02, 0.1, 60)
    order = rng.permutation(60)
    first = paired_statistics(control, candidate, n_resamples=999, seed=1)
    again = paired_statistics(control[order], candidate[order], n_resamples=999, seed=1)
    assert (first.ci_low, first.ci_high, first.p_randomization) == pytest.approx(
        (again.ci_low, again.ci_high, again.p_randomization), rel=1e-12
    )


def test_the_threshold_setting_is_validated() -> None:
    with pytest.raises(
        ValueError, match="normal_approximation_min_pairs must be an integer >= 100"
    ):
        ComparisonSettings(normal_approximation_min_pairs=99)
    with pytest.raises(ValueError, match="normal_approximation_min_pairs"):
        ComparisonSettings(normal_approximation_min_pairs=1000.0)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(0.0, 1.0, allow_nan=False), max_size=12),
        min_size=1,
        max_size=8,
    )
)
def test_pooled_summaries_equal_the_summary_of_all_values(parts: list[list[float]]) -> None:
    """`ArmSummary.pooled` of each day's summary (how the warehouse hands the comparison an
    arm's level) against `ArmSummary.of` on every value at once."""
    pooled = ArmSummary.pooled(ArmSummary.of(values) for values in parts)
    whole = ArmSummary.of([value for values in parts for value in values])
    assert pooled.n == whole.n
    for name in ("mean", "sd", "low", "high"):
        got, want = getattr(pooled, name), getattr(whole, name)
        assert (got is None) == (want is None), name
        if want is not None:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), name


def test_pooled_summary_by_hand() -> None:
    # {0.2, 0.4} and {0.9}: n 3, mean 1.5 / 3 = 0.5, squared deviations 0.09 + 0.01 + 0.16 = 0.26,
    # sd sqrt(0.26 / 2)
    pooled = ArmSummary.pooled([ArmSummary.of([0.2, 0.4]), ArmSummary.of([0.9]), ArmSummary(0)])
    assert (pooled.n, pooled.low, pooled.high) == (3, 0.2, 0.9)
    assert pooled.mean == pytest.approx(0.5)
    assert pooled.sd == pytest.approx(math.sqrt(0.13))
    assert ArmSummary.pooled([ArmSummary.of([0.7])]) == ArmSummary(1, 0.7, None, 0.7, 0.7)
    assert ArmSummary.pooled([]) == ArmSummary(0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.5", True, None])
def test_a_threshold_that_is_not_a_finite_number_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"threshold \*: MRR must be a number, got "):
        ComparisonSettings(thresholds={"*": {"MRR": value}})  # type: ignore[dict-item]
    kept = ComparisonSettings(thresholds={"*": {"MRR": 1}}).thresholds
    assert kept == {"*": {"mrr": 1.0}}
