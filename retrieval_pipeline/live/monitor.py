"""The live monitor's state machine: traces in, closed windows, alerts and recoveries out.

Pure and standard-library only. Traces are scored one at a time by
`reference.RetrievalMetricsEvaluator` (the per-example path; no corpus, so no stale-label
filtering), grouped into windows, and each closed window is judged per metric and segment:

- A window is *evidence* for a rule when it holds at least `min_labels` labelled sampled traces
  (for `coverage`, at least `min_labels` sampled traces). A window without enough evidence
  changes nothing: it neither extends a run of bad windows nor ends one, nor closes an alert.
- An evidence window *breaches* when its mean is below the rule's threshold, or below the
  trailing baseline by more than the rule's margin. The baseline is the mean of the window
  means of the previous `baseline_windows` evidence windows that did not breach; breaching
  windows are kept out of it so a sustained drop does not become its own baseline, and until
  that many windows have been seen there is no baseline (only the threshold applies).
- `consecutive` breaching evidence windows in a row open an alert; the next evidence window
  that does not breach closes it (a recovery). An open alert is not raised again.

Coverage (labelled / sampled) is judged by the same rules under the metric name `coverage`.
Everything that must survive a restart (open windows, runs of bad windows, baselines, open
alerts) is plain JSON, so a sensor cursor or a state file can carry it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from retrieval_pipeline.live.events import (
    Alert,
    Event,
    Recovery,
    SegmentStats,
    WindowSummary,
    criteria_words,
    evidence_words,
    from_iso,
    iso,
)
from retrieval_pipeline.live.rules import (
    COVERAGE,
    MonitorConfig,
    MonitorConfigError,
    ResolvedRule,
    sampled,
)
from retrieval_pipeline.records import TraceRecord
from retrieval_pipeline.reference import RetrievalMetricsEvaluator
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label

STATE_VERSION = 1
# Told of each trace: the record, whether it is in the sample, its scores (None: not scored).
TraceListener = Callable[[TraceRecord, bool, dict[str, float] | None], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class _Segment:
    records: int = 0
    sampled: int = 0
    labelled: int = 0
    sums: dict[str, list[float]] = field(default_factory=dict)  # metric -> [sum, count]

    def stats(self, metrics: Sequence[str]) -> SegmentStats:
        means: dict[str, float | None] = {}
        for metric in metrics:
            total, count = self.sums.get(metric, [0.0, 0])
            means[metric] = total / count if count else None
        return SegmentStats(self.records, self.sampled, self.labelled, means)


@dataclass
class _Window:
    bucket: int | None  # seconds since the epoch of a time window's start; None by count
    first: datetime | None = None
    last: datetime | None = None
    records: int = 0
    late: int = 0
    segments: dict[str, _Segment] = field(default_factory=dict)

    def add(self, record: TraceRecord, is_sampled: bool, scores: dict[str, float] | None) -> None:
        self.records += 1
        self.first = record.served_at if self.first is None else min(self.first, record.served_at)
        self.last = record.served_at if self.last is None else max(self.last, record.served_at)
        for name in (OVERALL_SEGMENT, record.segment):
            segment = self.segments.setdefault(name, _Segment())
            segment.records += 1
            if not is_sampled:
                continue
            segment.sampled += 1
            if scores is None:
                continue
            segment.labelled += 1
            for metric, value in scores.items():
                slot = segment.sums.setdefault(metric, [0.0, 0])
                slot[0] += value
                slot[1] += 1

    @property
    def sampled(self) -> int:
        overall = self.segments.get(OVERALL_SEGMENT)
        return overall.sampled if overall else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "first": iso(self.first) if self.first else None,
            "last": iso(self.last) if self.last else None,
            "records": self.records,
            "late": self.late,
            "segments": {name: asdict(segment) for name, segment in self.segments.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Window:
        return cls(
            bucket=data["bucket"],
            first=from_iso(data["first"]) if data["first"] else None,
            last=from_iso(data["last"]) if data["last"] else None,
            records=data["records"],
            late=data["late"],
            segments={
                name: _Segment(s["records"], s["sampled"], s["labelled"], dict(s["sums"]))
                for name, s in data["segments"].items()
            },
        )


@dataclass
class _RuleState:
    streak: int = 0
    streak_start: str | None = None  # ISO start of the run's first window
    history: list[float] = field(default_factory=list)  # means of recent non-breaching windows
    open_alert: dict[str, Any] | None = None


class LiveMonitor:
    """Feed validated traces in arrival order; get closed windows, alerts and recoveries back.

    `state()` is JSON-ready and `LiveMonitor(config, state)` resumes from it exactly, so a
    restart between any two traces gives the same events as one uninterrupted pass."""

    def __init__(
        self,
        config: MonitorConfig,
        state: Mapping[str, Any] | None = None,
        on_trace: TraceListener | None = None,
    ) -> None:
        self.config = config
        # told of every trace observed (is it sampled, its scores if labelled): the live
        # Prometheus counters (`live.prometheus`), which keep no state across restarts
        self.on_trace = on_trace
        # Scores come from the per-example evaluator (a trace judged with nothing relevant is
        # annotated with zeros there); its thresholds are unused, so 0 passes everything.
        self._evaluator = RetrievalMetricsEvaluator(
            dict.fromkeys(config.metrics, 0.0), config.gain, config.relevance_level
        )
        self._open: dict[int | None, _Window] = {}
        self._watermark: datetime | None = None
        self._next_index = 1
        self._rules: dict[tuple[str, str], _RuleState] = {}
        self.totals: dict[str, int] = dict.fromkeys(
            ("records", "sampled", "labelled", "windows", "alerts", "recoveries"), 0
        )
        if state is not None:
            self._load(state)

    # state ----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything needed to resume, as plain JSON values."""
        return {
            "version": STATE_VERSION,
            "mode": self.config.mode,
            "window_size": self.config.window_size,
            "next_index": self._next_index,
            "watermark": iso(self._watermark) if self._watermark else None,
            "open_windows": [w.to_json() for _, w in sorted(self._open.items(), key=_bucket)],
            "rules": [
                {"segment": segment, "metric": metric, **asdict(rule)}
                for (segment, metric), rule in sorted(self._rules.items())
            ],
            "totals": dict(self.totals),
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise MonitorConfigError(
                f"saved monitor state has version {state.get('version')!r}; this version reads "
                f"{STATE_VERSION} (start afresh: reset the sensor cursor or delete the state file)"
            )
        windows = [_Window.from_json(w) for w in state["open_windows"]]
        saved = (state["mode"], state["window_size"])
        if windows and saved != (self.config.mode, self.config.window_size):
            raise MonitorConfigError(
                f"saved state has open windows of {saved[1]} {saved[0]}, but the monitor now "
                f"uses windows of {self.config.window_size} {self.config.mode}"
            )
        self._open = {w.bucket: w for w in windows}
        self._watermark = from_iso(state["watermark"]) if state["watermark"] else None
        self._next_index = state["next_index"]
        for item in state["rules"]:
            values = dict(item)
            key = (values.pop("segment"), values.pop("metric"))
            self._rules[key] = _RuleState(**values)
        self.totals.update(state["totals"])

    def open_alerts(self) -> list[Alert]:
        """Alerts not yet closed by a recovery, by segment and metric."""
        return [
            Alert.from_dict(rule.open_alert)
            for _, rule in sorted(self._rules.items())
            if rule.open_alert is not None
        ]

    # feeding ---------------------------------------------------------------------------------

    def observe(self, record: TraceRecord) -> list[Event]:
        """Count one trace (sampled and scored if it falls in the sample); return what closed."""
        is_sampled = sampled(record.trace_id, self.config.sample_rate)
        scores: dict[str, float] | None = None
        if is_sampled:
            result = self._evaluator.evaluate(record)
            scores = result.scores if result.annotated else None
        self.totals["records"] += 1
        self.totals["sampled"] += int(is_sampled)
        self.totals["labelled"] += int(scores is not None)
        if self.on_trace is not None:
            self.on_trace(record, is_sampled, scores)
        if self.config.mode == "records":
            window = self._open.setdefault(None, _Window(bucket=None))
            window.add(record, is_sampled, scores)
            if window.sampled >= self.config.window_size:
                return self._close([self._open.pop(None)], partial=False)
            return []
        return self._observe_timed(record, is_sampled, scores)

    def _observe_timed(
        self, record: TraceRecord, is_sampled: bool, scores: dict[str, float] | None
    ) -> list[Event]:
        size, lateness = self.config.window_size, self.config.lateness_seconds
        bucket = _bucket_of(record.served_at, size)
        late = self._watermark is not None and _closes(bucket, size, lateness, self._watermark)
        if late:
            assert self._watermark is not None
            # Its own window is closed: count it in the window still open at the watermark.
            bucket = _bucket_of(self._watermark, size)
        window = self._open.setdefault(bucket, _Window(bucket=bucket))
        window.add(record, is_sampled, scores)
        window.late += int(late)
        if self._watermark is None or record.served_at > self._watermark:
            self._watermark = record.served_at
        closing = [
            window
            for key, window in sorted(self._open.items(), key=_bucket)
            if key is not None and _closes(key, size, lateness, self._watermark)
        ]
        for window in closing:
            del self._open[window.bucket]
        return self._close(closing, partial=False)

    def flush(self) -> list[Event]:
        """Close every open window now (the input ended); they are marked partial."""
        windows = [window for _, window in sorted(self._open.items(), key=_bucket)]
        self._open.clear()
        return self._close(windows, partial=True)

    # judging ---------------------------------------------------------------------------------

    def _close(self, windows: Iterable[_Window], partial: bool) -> list[Event]:
        events: list[Event] = []
        for window in windows:
            summary = self._summary(window, partial)
            self._next_index += 1
            self.totals["windows"] += 1
            events.append(summary)
            events.extend(self._judge(summary))
        return events

    def _summary(self, window: _Window, partial: bool) -> WindowSummary:
        assert window.first is not None and window.last is not None  # never empty
        if window.bucket is not None:
            start = _EPOCH + timedelta(seconds=window.bucket)
            end = start + timedelta(seconds=self.config.window_size)
        else:
            start, end = window.first, window.last
        names = [
            OVERALL_SEGMENT,
            *sorted(name for name in window.segments if name != OVERALL_SEGMENT),
        ]
        segments = {name: window.segments[name].stats(self.config.metrics) for name in names}
        overall = segments[OVERALL_SEGMENT]
        return WindowSummary(
            index=self._next_index,
            start=start,
            end=end,
            records=window.records,
            sampled=overall.sampled,
            labelled=overall.labelled,
            late=window.late,
            partial=partial,
            segments=segments,
        )

    def _judge(self, window: WindowSummary) -> list[Event]:
        events: list[Event] = []
        for segment, stats in window.segments.items():
            for metric in (*self.config.metrics, COVERAGE):
                rule = self.config.rule_for(metric, segment)
                if rule is None:
                    continue
                value = stats.coverage if metric == COVERAGE else stats.means.get(metric)
                evidence = stats.sampled if metric == COVERAGE else stats.labelled
                if value is None or evidence < rule.min_labels:
                    continue  # no evidence: the run, the baseline and any alert stay as they are
                event = self._step(rule, window, value, evidence)
                if event is not None:
                    events.append(event)
        return events

    def _step(
        self, rule: ResolvedRule, window: WindowSummary, value: float, evidence: int
    ) -> Event | None:
        state = self._rules.setdefault((rule.segment, rule.metric), _RuleState())
        recent = state.history[-rule.baseline_windows :]
        baseline = math.fsum(recent) / len(recent) if len(recent) == rule.baseline_windows else None
        # `not value >= limit`: a NaN mean (a score that could not be computed) never passes,
        # and never enters the baseline
        below_threshold = rule.threshold is not None and not value >= rule.threshold
        below_baseline = (
            rule.margin is not None and baseline is not None and not value >= baseline - rule.margin
        )
        if below_threshold or below_baseline or math.isnan(value):
            state.streak += 1
            if state.streak == 1:
                state.streak_start = iso(window.start)
            if state.open_alert is not None or state.streak < rule.consecutive:
                return None
            assert state.streak_start is not None
            what = criteria_words(rule.metric, value, rule.threshold, baseline, rule.margin, True)
            alert = Alert(
                segment=rule.segment,
                metric=rule.metric,
                window_index=window.index,
                window_start=window.start,
                window_end=window.end,
                first_window_start=from_iso(state.streak_start),
                value=value,
                threshold=rule.threshold,
                baseline=baseline,
                margin=rule.margin,
                consecutive=rule.consecutive,
                min_labels=rule.min_labels,
                evidence=evidence,
                reason=(
                    f"{segment_label(rule.segment)}: {what} for {rule.consecutive} consecutive "
                    f"windows ({evidence_words(rule.metric, rule.min_labels)})"
                ),
            )
            state.open_alert = alert.to_dict()
            self.totals["alerts"] += 1
            return alert
        state.streak, state.streak_start = 0, None
        state.history = [*state.history, value][-rule.baseline_windows :]
        if state.open_alert is None:
            return None
        opened = Alert.from_dict(state.open_alert)
        state.open_alert = None
        self.totals["recoveries"] += 1
        what = criteria_words(rule.metric, value, rule.threshold, baseline, rule.margin, False)
        return Recovery(
            segment=rule.segment,
            metric=rule.metric,
            window_index=window.index,
            window_start=window.start,
            window_end=window.end,
            value=value,
            threshold=rule.threshold,
            baseline=baseline,
            margin=rule.margin,
            alert=opened,
            reason=(
                f"{segment_label(rule.segment)}: {what}; recovered (alert opened at window "
                f"{opened.window_index}, {iso(opened.window_start)})"
            ),
        )


def _bucket(item: tuple[int | None, _Window]) -> int:
    return -1 if item[0] is None else item[0]


def _bucket_of(moment: datetime, size: int) -> int:
    """Start (seconds since the epoch) of the time window of `moment`; exact, not float."""
    return (moment - _EPOCH) // timedelta(seconds=size) * size


def _closes(bucket: int, size: int, lateness: int, watermark: datetime) -> bool:
    """A time window closes once a trace at or past its end plus the allowed lateness arrived."""
    return _EPOCH + timedelta(seconds=bucket + size + lateness) <= watermark
