"""Sampling and configuration of the live monitor (`retrieval_pipeline.live.rules`): the keyed
hash sample, rules from `[SEGMENT:]METRIC=VALUE` and what a configuration refuses."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval_pipeline.live.rules import (
    COVERAGE,
    MonitorConfig,
    MonitorConfigError,
    parse_assignment,
    rules_from_assignments,
    sampled,
)
from retrieval_pipeline.segments import ALL_SEGMENTS
from tests.live.traces import config, independent_point
from tests.processes import default_signals

# The checkout this test file belongs to: the subprocesses below import it, not an installed copy.
ROOT = Path(__file__).resolve().parents[2]

# --- sampling ---------------------------------------------------------------------------------


IDS = [f"trace-{i:05d}" for i in range(20_000)]


def test_sampling_is_the_keyed_blake2b_point_against_the_rate() -> None:
    chosen = {t for t in IDS if sampled(t, 0.1)}
    assert chosen == {t for t in IDS if independent_point(t) < 0.1}
    assert chosen == {t for t in IDS if sampled(t, 0.1)}  # same set on a rerun


def test_sampling_rate_within_binomial_tolerance_and_nested() -> None:
    n, rate = len(IDS), 0.1
    at_10 = {t for t in IDS if sampled(t, rate)}
    sd = math.sqrt(n * rate * (1 - rate))  # 42.4 for 20 000 ids at 10 %
    assert abs(len(at_10) - n * rate) < 4 * sd
    at_30 = {t for t in IDS if sampled(t, 0.3)}
    assert at_10 <= at_30  # raising the rate keeps every trace already sampled
    assert abs(len(at_30) - n * 0.3) < 4 * math.sqrt(n * 0.3 * 0.7)
    assert not any(sampled(t, 0.0) for t in IDS[:500])
    assert all(sampled(t, 1.0) for t in IDS[:500])


def test_sampling_does_not_depend_on_pythons_hash_seed() -> None:
    code = (
        "from retrieval_pipeline.live.rules import sampled\n"
        "print(''.join('1' if sampled(f'trace-{i:05d}', 0.5) else '0' for i in range(300)))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": "", "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=default_signals,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    expected = "".join("1" if independent_point(t) < 0.5 else "0" for t in IDS[:300])
    assert outputs == {expected}


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), True])
def test_sampling_refuses_rates_outside_the_unit_interval(rate: float) -> None:
    with pytest.raises(MonitorConfigError, match="sample rate"):
        sampled("t", rate)


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mrr=0.5", (ALL_SEGMENTS, "mrr", 0.5)),
        ("P@5=0.2", (ALL_SEGMENTS, "precision@5", 0.2)),
        ("multi_hop:RR=0.4", ("multi_hop", "mrr", 0.4)),
        ("a:b:coverage=0.3", ("a:b", COVERAGE, 0.3)),
    ],
)
def test_parse_assignment(text: str, expected: tuple[str, str, float]) -> None:
    assert parse_assignment(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("mrr", "expected"),
        ("mrr=high", r"with VALUE in \[0, 1\], .*got 'mrr=high'"),
        ("mrr=1.5", r"\[0, 1\]"),
        ("bleu=0.5", "unknown metric"),
        (":mrr=0.5", "empty segment"),
    ],
)
def test_parse_assignment_refuses(text: str, words: str) -> None:
    with pytest.raises(MonitorConfigError, match=words):
        parse_assignment(text)


def test_config_refuses_rules_on_metrics_not_monitored_and_two_window_kinds() -> None:
    with pytest.raises(MonitorConfigError, match="not among the monitored metrics"):
        config(rules=rules_from_assignments(["ndcg@10=0.5"]))
    with pytest.raises(MonitorConfigError, match="not both"):
        MonitorConfig(window_seconds=60, window_records=10)
    with pytest.raises(MonitorConfigError, match="more than once"):
        rules_from_assignments(["mrr=0.5", "mrr=0.6"])
    assert MonitorConfig().window_records == 100
