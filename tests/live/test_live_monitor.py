"""The live monitor's state machine (`retrieval_pipeline.live.monitor`): the sustained-drop rule,
time windows, and state across restarts.

Window means are built from reciprocal ranks chosen by hand (a relevant document at rank r scores
1/r), so each expected mean is visible arithmetic.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from retrieval_pipeline.live.events import Event, WindowSummary
from retrieval_pipeline.live.monitor import LiveMonitor
from retrieval_pipeline.live.rules import (
    COVERAGE,
    MonitorConfig,
    MonitorConfigError,
    Rule,
    rules_from_assignments,
)
from retrieval_pipeline.records import TraceRecord, parse_record
from retrieval_pipeline.segments import ALL_SEGMENTS, OVERALL_SEGMENT
from tests.live.traces import (
    DOCS,
    T0,
    alerts,
    config,
    feed,
    independent_point,
    recoveries,
    trace,
    uniform,
    unlabelled,
    window_of,
    windows,
)

# --- the sustained-drop rule ------------------------------------------------------------------


def test_step_drop_alerts_after_exactly_m_windows_with_the_reason_in_words() -> None:
    monitor = LiveMonitor(config())
    before = [alerts(feed(monitor, uniform(1))) for _ in range(5)]  # windows 1-5: mean 1
    # From window 6 on: 6 at rank 1, 4 at rank 2, 1 at rank 5, 9 not retrieved
    drop = [1] * 6 + [2] * 4 + [5] + [None] * 9
    after = [feed(monitor, window_of(drop)) for _ in range(4)]  # windows 6-9
    mean = (6 * 1 + 4 * (1 / 2) + 1 * (1 / 5) + 9 * 0) / 20  # 0.41
    assert windows(after[0])[0].means["mrr"] == pytest.approx(mean)
    assert before == [[]] * 5
    assert [len(alerts(e)) for e in after] == [0, 0, 1, 0]  # fires at window 8, once
    (alert,) = alerts(after[2])
    assert alert.reason == (
        "multi_hop: mrr 0.41 < 0.50 for 3 consecutive windows (>= 20 labels each)"
    )
    assert (alert.window_index, alert.segment, alert.metric) == (8, "multi_hop", "mrr")
    assert alert.first_window_start == windows(after[0])[0].start
    assert alert.value == pytest.approx(mean)
    assert [a.reason for a in monitor.open_alerts()] == [alert.reason]


def test_a_single_bad_window_does_not_alert() -> None:
    monitor = LiveMonitor(config())
    events: list[Event] = []
    for rank in [1, 1, 1, 4, 1, 1, 4, 1, 4, 4, 1]:  # never three bad in a row
        events += feed(monitor, uniform(rank))
    assert len(windows(events)) == 11
    assert alerts(events) == []


def test_a_window_with_too_few_labels_neither_alerts_nor_resets() -> None:
    monitor = LiveMonitor(config())
    bad = uniform(4)  # mean 1/4 < 0.5 with 20 labels: evidence of a drop
    thin_good = uniform(1, n=10) + unlabelled(10)  # 20 sampled, 10 labelled < 20: no evidence
    assert alerts(feed(monitor, bad)) == []
    assert alerts(feed(monitor, uniform(4))) == []
    thin = feed(monitor, thin_good)
    assert windows(thin)[0].labelled == 10 and alerts(thin) == []  # neither alerts ...
    (alert,) = alerts(feed(monitor, uniform(4)))  # ... nor resets: third bad evidence window
    assert alert.window_index == 4
    # A thin window does not close an open alert either; an evidence window above does.
    assert recoveries(feed(monitor, thin_good)) == []
    assert len(monitor.open_alerts()) == 1
    (recovery,) = recoveries(feed(monitor, uniform(1)))
    assert recovery.alert.window_index == 4
    assert recovery.reason.startswith("multi_hop: mrr 1.00 >= 0.50; recovered")
    assert monitor.open_alerts() == []


def test_thin_bad_windows_are_not_evidence_either() -> None:
    monitor = LiveMonitor(config())
    thin_bad = uniform(4, n=19) + unlabelled(1)
    events = feed(monitor, uniform(4) + thin_bad + uniform(4) + thin_bad)
    assert alerts(events) == []  # only two evidence windows so far
    assert len(alerts(feed(monitor, uniform(4)))) == 1


def test_an_alert_opens_again_only_after_recovery_and_m_new_windows() -> None:
    monitor = LiveMonitor(config(consecutive=2))
    ranks = [4, 4, 4, 4, 1, 4, 4]  # alert at 2, recovery at 5, new alert at 7
    per_window = [feed(monitor, uniform(rank)) for rank in ranks]
    assert [len(alerts(e)) for e in per_window] == [0, 1, 0, 0, 0, 0, 1]
    assert [len(recoveries(e)) for e in per_window] == [0, 0, 0, 0, 1, 0, 0]


def test_drop_below_the_trailing_baseline_by_more_than_the_margin() -> None:
    rule = Rule("mrr", "multi_hop", margin=0.2)
    monitor = LiveMonitor(config(rules=(rule,), consecutive=2, baseline_windows=3))
    # means 1.0, 0.9 (16 at rank 1, 4 at rank 2), 0.8 (12 and 8): baseline (1 + .9 + .8) / 3
    for ranks in ([1] * 20, [1] * 16 + [2] * 4, [1] * 12 + [2] * 8):
        assert alerts(feed(monitor, window_of(ranks))) == []
    low = [1] * 6 + [2] * 14  # (6 + 14 / 2) / 20 = 0.65 < 0.9 - 0.2
    assert alerts(feed(monitor, window_of(low))) == []
    # The breaching window stays out of the baseline, which is still 0.9 at the next window.
    (alert,) = alerts(feed(monitor, window_of(low)))
    assert alert.baseline == pytest.approx((1.0 + 0.9 + 0.8) / 3)
    assert alert.value == pytest.approx((6 + 14 / 2) / 20)
    assert alert.reason == (
        "multi_hop: mrr 0.65 < 0.70 (baseline 0.90 - margin 0.20) for 2 consecutive windows "
        "(>= 20 labels each)"
    )
    (recovery,) = recoveries(feed(monitor, window_of([1] * 14 + [2] * 6)))  # 0.85
    assert recovery.baseline == pytest.approx((1.0 + 0.9 + 0.8) / 3)


def test_no_baseline_before_b_windows_with_enough_labels() -> None:
    rule = Rule("mrr", "multi_hop", margin=0.1)
    monitor = LiveMonitor(config(rules=(rule,), consecutive=1, baseline_windows=3))
    events = feed(monitor, uniform(1) + uniform(4) + uniform(None))  # means 1, 0.25, 0
    assert alerts(events) == []  # nothing to compare with yet
    (alert,) = alerts(feed(monitor, uniform(4)))  # baseline (1 + 0.25 + 0) / 3
    assert alert.baseline == pytest.approx((1 + 0.25 + 0) / 3)


def test_coverage_is_judged_by_the_same_rule_on_sampled_counts() -> None:
    rule = Rule(COVERAGE, ALL_SEGMENTS, threshold=0.5)
    monitor = LiveMonitor(config(rules=(rule,), min_labels=10))
    assert alerts(feed(monitor, uniform(1))) == []
    per_window = [feed(monitor, uniform(1, n=5) + unlabelled(15)) for _ in range(3)]
    assert windows(per_window[0])[0].coverage == pytest.approx(5 / 20)
    fired = alerts(per_window[2])
    assert [a.segment for a in fired] == [OVERALL_SEGMENT, "multi_hop"]
    assert fired[0].reason == (
        "all segments: coverage 0.25 < 0.50 for 3 consecutive windows (>= 10 sampled each)"
    )


def test_judged_without_relevant_documents_scores_zero_and_unjudged_is_not_labelled() -> None:
    monitor = LiveMonitor(config(window_records=3, rules=()))
    empty_judgement = parse_record(
        {"trace_id": "e", "query_id": "q", "timestamp": T0.isoformat(), "retrieved_ids": DOCS}
        | {"relevant_ids": [], "segment": "multi_hop"}
    )
    (window,) = windows(feed(monitor, [trace(1), empty_judgement, trace(2, judged=False)]))
    assert (window.sampled, window.labelled) == (3, 2)
    assert window.means["mrr"] == pytest.approx((1 + 0) / 2)
    assert window.coverage == pytest.approx(2 / 3)


def test_segments_are_judged_apart_and_the_overall_row_pools_them() -> None:
    rules = rules_from_assignments(["mrr=0.5"])
    monitor = LiveMonitor(config(rules=rules, consecutive=1, min_labels=10))
    records = uniform(4, n=10, segment="multi_hop") + uniform(1, n=10, segment="single_hop")
    events = feed(monitor, records)
    (window,) = windows(events)
    assert window.segments["multi_hop"].means["mrr"] == pytest.approx(1 / 4)
    assert window.segments["single_hop"].means["mrr"] == pytest.approx(1.0)
    assert window.means["mrr"] == pytest.approx((10 * 1 / 4 + 10 * 1) / 20)
    assert [a.segment for a in alerts(events)] == ["multi_hop"]  # overall 0.625 is above


def test_a_segment_rule_overrides_the_every_segment_rule_field_by_field() -> None:
    rules = rules_from_assignments(
        ["mrr=0.5", "multi_hop:mrr=0.3"], {"mrr": 0.1, "__all__:mrr": 0.2}
    )
    cfg = config(rules=rules)
    multi = cfg.rule_for("mrr", "multi_hop")
    overall = cfg.rule_for("mrr", OVERALL_SEGMENT)
    other = cfg.rule_for("mrr", "single_hop")
    assert multi is not None and overall is not None and other is not None
    assert (multi.threshold, multi.margin) == (0.3, 0.1)
    assert (overall.threshold, overall.margin) == (0.5, 0.2)
    assert (other.threshold, other.margin) == (0.5, 0.1)
    assert cfg.rule_for(COVERAGE, "multi_hop") is None


# --- time windows -----------------------------------------------------------------------------


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_time_windows_close_past_end_plus_lateness_and_count_late_traces() -> None:
    monitor = LiveMonitor(config(window_records=None, window_seconds=60, lateness_seconds=10))
    assert feed(monitor, [trace(1, at=at(s)) for s in (0, 30, 65, 50)]) == []  # 0..60 open
    (first,) = feed(monitor, [trace(1, at=at(71))])  # 71 >= 60 + 10 closes it
    assert isinstance(first, WindowSummary)
    assert (first.start, first.end, first.records, first.late) == (at(0), at(60), 3, 0)
    assert feed(monitor, [trace(1, at=at(20))]) == []  # its window closed: counted in 60..120
    (second,) = monitor.flush()
    assert isinstance(second, WindowSummary)
    assert (second.start, second.end, second.records, second.late) == (at(60), at(120), 3, 1)
    assert second.partial and not first.partial


def test_time_windows_skip_empty_spans_and_align_to_the_epoch() -> None:
    monitor = LiveMonitor(config(window_records=None, window_seconds=300))
    start = datetime(2026, 3, 2, 10, 7, 12, tzinfo=UTC)
    events = feed(monitor, [trace(1, at=start), trace(1, at=start + timedelta(hours=2))])
    (window,) = windows(events)
    assert window.start == datetime(2026, 3, 2, 10, 5, tzinfo=UTC)
    assert window.end == datetime(2026, 3, 2, 10, 10, tzinfo=UTC)


# --- state across restarts --------------------------------------------------------------------


def random_stream(seed: int, n: int = 400) -> list[TraceRecord]:
    rng = random.Random(seed)
    records = []
    clock = 0.0
    for i in range(n):
        clock += rng.uniform(0, 4)
        jitter = rng.uniform(-15, 0) if rng.random() < 0.1 else 0.0  # some arrive late
        records.append(
            trace(
                rng.choice([1, 2, 3, None]) if i < n / 2 else rng.choice([3, 4, None]),
                rng.choice(["multi_hop", "single_hop"]),
                at=at(clock + jitter),
                judged=rng.random() < 0.8,
            )
        )
    return records


@pytest.mark.parametrize("seed", [1, 2])
def test_resuming_from_json_state_after_every_trace_equals_one_pass(seed: int) -> None:
    cfg = MonitorConfig(
        metrics=("mrr", "precision@5"),
        sample_rate=0.7,
        window_seconds=60,
        lateness_seconds=10,
        rules=rules_from_assignments(["mrr=0.45", "coverage=0.7"], ["precision@5=0.05"]),
        consecutive=2,
        min_labels=5,
        baseline_windows=2,
    )
    records = random_stream(seed)
    one = LiveMonitor(cfg)
    expected = [*feed(one, records), *one.flush()]
    resumed: list[Event] = []
    state: dict[str, Any] | None = None
    for record in records:
        monitor = LiveMonitor(cfg, state)
        resumed += monitor.observe(record)
        state = json.loads(json.dumps(monitor.state(), allow_nan=False))
    resumed += LiveMonitor(cfg, state).flush()
    assert [e.to_dict() for e in resumed] == [e.to_dict() for e in expected]
    assert alerts(expected), "the stream is meant to raise at least one alert"
    sampled_ids = {r.trace_id for r in records if independent_point(r.trace_id) < 0.7}
    assert one.totals["sampled"] == len(sampled_ids)
    assert one.totals["records"] == len(records)


def test_state_of_another_version_or_window_kind_is_refused() -> None:
    monitor = LiveMonitor(config())
    feed(monitor, uniform(1, n=3))
    state = monitor.state()
    with pytest.raises(MonitorConfigError, match="version"):
        LiveMonitor(config(), state | {"version": 99})
    with pytest.raises(MonitorConfigError, match="open windows"):
        LiveMonitor(config(window_records=None, window_seconds=60), state)


def test_the_overall_row_is_the_shared_overall_segment() -> None:
    # The live tables' overall row is the nightly's: both are keyed by segments.OVERALL_SEGMENT.
    (window,) = windows(feed(LiveMonitor(config()), uniform(1)))
    assert list(window.segments) == [OVERALL_SEGMENT, "multi_hop"]
