"""The A/B comparison: pairing and counts, statistics against independent computations, the flag."""

from __future__ import annotations

import itertools
import math
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from retrieval_pipeline.comparison import (
    ComparisonSettings,
    compare_query_metrics,
    compare_variants,
    holm_adjust,
    paired_statistics,
)
from retrieval_pipeline.metrics import MetricConfigError, parse_metrics
from retrieval_pipeline.nightly import OVERALL_SEGMENT

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
    from retrieval_pipeline import engine
    from retrieval_pipeline.evaluation import run_evaluation

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
    conn = engine.connect(":memory:")
    try:
        engine.ingest_traces(conn, traces)
        engine.load_corpus(conn, None)
        start, end = date(2026, 1, 1), date(2026, 1, 3)
        engine.build_labels(conn, start, end, use_corpus=False)
        engine.compute_query_metrics(conn, parse_metrics(names), start, end)
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
    from retrieval_pipeline.evaluation import run_evaluation
    from retrieval_pipeline.sample import REGRESSION_SEGMENT, write_sample_store

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
