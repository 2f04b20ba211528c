"""Tests for `retrieval_pipeline.monitoring`: sampling, windows, the sustained-drop rule, state
across restarts, incremental reading, and the live warehouse tables.

Window means are built from reciprocal ranks chosen by hand (a relevant document at rank r scores
1/r), so each expected mean is visible arithmetic.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import subprocess
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from retrieval_pipeline import monitoring
from retrieval_pipeline.monitoring import (
    ANY_SEGMENT,
    COVERAGE,
    OVERALL,
    Alert,
    FileProgress,
    LiveMonitor,
    MonitorConfig,
    MonitorConfigError,
    Recovery,
    Rule,
    WindowSummary,
    parse_assignment,
    read_new_lines,
    rules_from_assignments,
    sampled,
)
from retrieval_pipeline.records import TraceRecord, parse_record

T0 = datetime(2026, 3, 2, tzinfo=UTC)
DOCS = ["d1", "d2", "d3", "d4", "d5"]
_counter = iter(range(10**9))


def trace(
    rank: int | None,
    segment: str = "multi_hop",
    at: datetime | None = None,
    judged: bool = True,
    trace_id: str | None = None,
) -> TraceRecord:
    """A trace whose reciprocal rank is 1/rank (rank None: relevant document not retrieved, RR 0;
    judged False: no labels at all, so unannotated)."""
    n = next(_counter)
    fields: dict[str, Any] = {
        "trace_id": trace_id or f"t{n}",
        "query_id": f"q{n}",
        "timestamp": (at or T0 + timedelta(seconds=n)).isoformat(),
        "retrieved_ids": DOCS,
        "segment": segment,
    }
    if judged:
        fields["relevant_ids"] = [f"d{rank}" if rank is not None else "not-retrieved"]
    return parse_record(fields)


def window_of(ranks: Sequence[int | None], segment: str = "multi_hop") -> list[TraceRecord]:
    return [trace(rank, segment) for rank in ranks]


def uniform(rank: int | None, n: int = 20, segment: str = "multi_hop") -> list[TraceRecord]:
    return window_of([rank] * n, segment)


def unlabelled(n: int, segment: str = "multi_hop") -> list[TraceRecord]:
    return [trace(None, segment, judged=False) for _ in range(n)]


def feed(monitor: LiveMonitor, records: Iterable[TraceRecord]) -> list[monitoring.Event]:
    events: list[monitoring.Event] = []
    for record in records:
        events.extend(monitor.observe(record))
    return events


def alerts(events: Iterable[monitoring.Event]) -> list[Alert]:
    return [e for e in events if isinstance(e, Alert)]


def recoveries(events: Iterable[monitoring.Event]) -> list[Recovery]:
    return [e for e in events if isinstance(e, Recovery)]


def windows(events: Iterable[monitoring.Event]) -> list[WindowSummary]:
    return [e for e in events if isinstance(e, WindowSummary)]


def config(**overrides: Any) -> MonitorConfig:
    """20 sampled traces a window, mrr only, every trace sampled, M = 3, N = 20."""
    options: dict[str, Any] = {
        "metrics": ("mrr",),
        "window_records": 20,
        "rules": (Rule("mrr", "multi_hop", threshold=0.5),),
        "consecutive": 3,
        "min_labels": 20,
    }
    return MonitorConfig(**(options | overrides))


# --- sampling ---------------------------------------------------------------------------------


def independent_point(trace_id: str) -> float:
    """The sampling hash computed here from its definition, not by the module."""
    key = monitoring.SAMPLE_KEY
    digest = hashlib.blake2b(trace_id.encode(), digest_size=8, key=key).digest()
    return int.from_bytes(digest, "big") / 2**64


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
        "from retrieval_pipeline.monitoring import sampled\n"
        "print(''.join('1' if sampled(f'trace-{i:05d}', 0.5) else '0' for i in range(300)))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    expected = "".join("1" if independent_point(t) < 0.5 else "0" for t in IDS[:300])
    assert outputs == {expected}


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), True])
def test_sampling_refuses_rates_outside_the_unit_interval(rate: float) -> None:
    with pytest.raises(MonitorConfigError, match="sample rate"):
        sampled("t", rate)


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
    events: list[monitoring.Event] = []
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
    rule = Rule(COVERAGE, ANY_SEGMENT, threshold=0.5)
    monitor = LiveMonitor(config(rules=(rule,), min_labels=10))
    assert alerts(feed(monitor, uniform(1))) == []
    per_window = [feed(monitor, uniform(1, n=5) + unlabelled(15)) for _ in range(3)]
    assert windows(per_window[0])[0].coverage == pytest.approx(5 / 20)
    fired = alerts(per_window[2])
    assert [a.segment for a in fired] == [OVERALL, "multi_hop"]
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
    overall = cfg.rule_for("mrr", OVERALL)
    other = cfg.rule_for("mrr", "single_hop")
    assert multi is not None and overall is not None and other is not None
    assert (multi.threshold, multi.margin) == (0.3, 0.1)
    assert (overall.threshold, overall.margin) == (0.5, 0.2)
    assert (other.threshold, other.margin) == (0.5, 0.1)
    assert cfg.rule_for(COVERAGE, "multi_hop") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mrr=0.5", (ANY_SEGMENT, "mrr", 0.5)),
        ("P@5=0.2", (ANY_SEGMENT, "precision@5", 0.2)),
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
        ("mrr=high", "not a number"),
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
    resumed: list[monitoring.Event] = []
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


def test_overall_segment_is_the_nightlys() -> None:
    from retrieval_pipeline import segments

    assert OVERALL == segments.OVERALL_SEGMENT


# --- reading what arrived ---------------------------------------------------------------------


def test_a_partially_written_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')
    found, progress, problem = read_new_lines(path, FileProgress())
    assert [(a.line, a.text) for a in found] == [(1, b'{"a": 1}')] and problem is None
    assert progress.offset == len(b'{"a": 1}\n')
    assert read_new_lines(path, progress)[0] == []
    with path.open("ab") as handle:
        handle.write(b"2}\n\n")
    found, progress, _ = read_new_lines(path, progress)
    assert [(a.line, a.text) for a in found] == [(2, b'{"b": 2}')]
    assert progress.lines == 3  # the blank line is consumed and numbered, not a record
    assert read_new_lines(path, progress)[0] == []


def test_final_reads_the_unterminated_last_line_and_bom_crlf_are_handled(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree")
    found, progress, _ = read_new_lines(path, FileProgress(), final=True)
    assert [(a.line, a.text) for a in found] == [(1, b"one"), (2, b"two"), (3, b"three")]
    assert progress.offset == path.stat().st_size


def test_limit_reads_a_file_in_pieces_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(f"line{i}\n" for i in range(1, 6)))
    progress, seen = FileProgress(), []
    for _ in range(4):
        found, progress, _ = read_new_lines(path, progress, limit=2)
        seen.append([a.line for a in found])
    assert seen == [[1, 2], [3, 4], [5], []]


def test_a_growing_gzip_file_is_read_once_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    whole = gzip.compress(b"".join(f"line{i}\n".encode() for i in range(1, 201)))
    path.write_bytes(whole[: len(whole) // 2])  # still being written
    first, progress, problem = read_new_lines(path, FileProgress())
    assert problem is None and first
    path.write_bytes(whole)
    rest, progress, _ = read_new_lines(path, progress)
    assert [a.line for a in first + rest] == list(range(1, 201))
    assert [a.text for a in first + rest] == [f"line{i}".encode() for i in range(1, 201)]


def test_a_file_that_shrank_is_reported_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("a\nb\n")
    _, progress, _ = read_new_lines(path, FileProgress())
    path.write_text("c\n")
    found, after, problem = read_new_lines(path, progress)
    assert found == [] and after == progress
    assert problem is not None and "shrank" in problem


def test_store_arrivals_in_day_and_name_order_from_the_start_day(tmp_path: Path) -> None:
    from retrieval_pipeline.store import LocalTraceStore

    for day, name, lines in [
        ("2026-03-01", "a.jsonl", ["old"]),
        ("2026-03-02", "b.jsonl", ["b1", "b2"]),
        ("2026-03-02", "a.jsonl", ["a1"]),
        ("2026-03-03", "a.jsonl", ["c1"]),
    ]:
        folder = tmp_path / "traces" / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("".join(f"{line}\n" for line in lines))
    store = LocalTraceStore(tmp_path)
    batch = monitoring.read_store_arrivals(store, monitoring.StoreCursor(), backfill_days=1)
    assert batch.start_day == date(2026, 3, 2)
    assert [a.text for a in batch.arrivals] == [b"a1", b"b1", b"b2", b"c1"]
    cursor = monitoring.StoreCursor(start_day=batch.start_day, files=batch.files)
    again = monitoring.read_store_arrivals(
        store, monitoring.StoreCursor.from_json(cursor.to_json())
    )
    assert again.arrivals == []


def test_files_growing_side_by_side_are_merged_in_time_order(tmp_path: Path) -> None:
    from retrieval_pipeline.store import LocalTraceStore

    def line(n: int) -> str:
        at = (T0 + timedelta(seconds=10 * n)).isoformat()
        record = {"trace_id": f"t{n}", "query_id": "q", "timestamp": at}
        return json.dumps(record | {"retrieved_ids": DOCS, "relevant_ids": ["d1"]}) + "\n"

    folder = tmp_path / "traces" / "date=2026-03-02"
    folder.mkdir(parents=True)
    # two writers, alternate traces: read file by file, b's traces would all come in late
    (folder / "a.jsonl").write_text("".join(line(n) for n in range(0, 40, 2)))
    (folder / "b.jsonl").write_text("".join(line(n) for n in range(1, 40, 2)))
    cfg = config(window_records=None, window_seconds=60, rules=())
    step = monitoring.advance(LocalTraceStore(tmp_path), monitoring.StoreCursor(), cfg)
    closed = windows(step.events)
    assert [(w.records, w.late) for w in closed] == [(6, 0)] * 6  # 400 s: 6 full windows
    assert step.lines == 40 and step.bad == []
    assert step.cursor.monitor is not None and step.cursor.monitor["totals"]["records"] == 40


def test_parquet_rows_read_as_the_same_records_as_json_lines(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"trace_id": "p1", "query_id": "q", "timestamp": "2026-03-02T10:00:00Z"}
        | {"retrieved_ids": ["d1", "d2"], "relevant_ids": ["d2"], "segment": "multi_hop"},
        {"trace_id": "p2", "query_id": "q", "timestamp": "2026-03-02T10:00:01Z"}
        | {"retrieved_ids": ["d1"], "relevant_ids": None, "segment": "multi_hop"},
    ]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    found, progress, problem = monitoring.read_new_parquet_rows(path, FileProgress(), limit=1)
    more, progress, _ = monitoring.read_new_parquet_rows(path, progress)
    assert problem is None and [a.line for a in found + more] == [1, 2]
    from retrieval_pipeline.records import parse_line

    assert [parse_line(a.text) for a in found + more] == [parse_record(r) for r in rows]
    assert monitoring.read_new_parquet_rows(path, progress)[0] == []


def test_a_parquet_column_named_as_the_row_numbers_is_reported_and_read_again(
    tmp_path: Path,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"trace_id": "p1", "query_id": "q", "timestamp": "2026-03-02T10:00:00Z"}
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([row | {"retrieved_ids": ["d1"], "__file_order": 3}]), path)
    found, progress, problem = monitoring.read_new_parquet_rows(path, FileProgress())
    assert found == [] and progress.offset == 0
    assert (
        problem == f"{path}: column name __file_order is reserved; read again when the file changes"
    )
    # unchanged, it is not read again; rewritten without the column, it is
    assert monitoring.read_new_parquet_rows(path, progress) == ([], progress, None)
    pq.write_table(pa.Table.from_pylist([row | {"retrieved_ids": ["d1"]}]), path)
    found, _, problem = monitoring.read_new_parquet_rows(path, progress)
    assert problem is None and [a.line for a in found] == [1]


# --- the warehouse ----------------------------------------------------------------------------


def test_recorded_windows_and_alerts_are_idempotent_and_open_alerts_close() -> None:
    monitor = LiveMonitor(config(consecutive=1))
    opened = feed(monitor, uniform(1) + uniform(4))
    closed = feed(monitor, uniform(1))
    conn = duckdb.connect()
    monitoring.record_events(conn, opened, ("mrr",))
    monitoring.record_events(conn, opened, ("mrr",))  # a replayed tick adds nothing
    rows = conn.execute(
        "select window_index, segment, metric, value, sampled, labelled from live_window_metrics"
        " order by all"
    ).fetchall()
    assert rows == [
        (1, "__all__", "coverage", 1.0, 20, 20),
        (1, "__all__", "mrr", 1.0, 20, 20),
        (1, "multi_hop", "coverage", 1.0, 20, 20),
        (1, "multi_hop", "mrr", 1.0, 20, 20),
        (2, "__all__", "coverage", 1.0, 20, 20),
        (2, "__all__", "mrr", 0.25, 20, 20),
        (2, "multi_hop", "coverage", 1.0, 20, 20),
        (2, "multi_hop", "mrr", 0.25, 20, 20),
    ]
    (alert,) = alerts(opened)
    assert monitoring.open_alert_reasons(conn) == [("multi_hop", "mrr", alert.reason)]
    monitoring.record_events(conn, closed, ("mrr",))
    assert monitoring.open_alert_reasons(conn) == []
    events = conn.execute("select event from live_alerts order by window_index").fetchall()
    assert events == [("alert",), ("recovery",)]
