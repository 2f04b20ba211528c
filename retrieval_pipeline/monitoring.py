"""Live monitoring of sampled traces: deterministic sampling, windows and the sustained-drop rule.

Knows nothing of Dagster, and imports only the standard library at start-up, so that
`retrieval-pipeline monitor` starts fast; the sensor in `defs/monitoring.py` and the command share
everything here. Traces are scored one at a time by `reference.RetrievalMetricsEvaluator` (the
per-example path; no corpus, so no stale-label filtering), grouped into windows, and each closed
window is judged per metric and segment:

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
alerts, file offsets) is plain JSON, so a sensor cursor or a file can carry it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from retrieval_pipeline.metrics import Gain, MetricConfigError, parse_metric, parse_metrics
from retrieval_pipeline.records import RecordError, TraceRecord, parse_line
from retrieval_pipeline.reference import RetrievalMetricsEvaluator

if TYPE_CHECKING:
    import duckdb

    from retrieval_pipeline.store import TraceStore

# The segment of the rows that pool every segment: the same name as nightly.OVERALL_SEGMENT
# (not imported, as nightly pulls in pandas and DuckDB; a test holds the two equal).
OVERALL = "__all__"
ANY_SEGMENT = "*"  # a rule for every segment, and for the overall row
COVERAGE = "coverage"
STATE_VERSION = 1
CURSOR_VERSION = 1

# Personalises the sampling hash so the sample is independent of any other hash-based split of
# trace ids (an A/B assignment hashing the same ids with plain blake2b would otherwise line up).
SAMPLE_KEY = b"rp-live-sample"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class MonitorConfigError(ValueError):
    """A monitoring option, rule or saved state that cannot be used."""


# --- sampling ---------------------------------------------------------------------------------


def sample_point(trace_id: str) -> float:
    """Where `trace_id` falls in [0, 1): blake2b of its UTF-8 bytes, the same on every run."""
    digest = hashlib.blake2b(trace_id.encode("utf-8"), digest_size=8, key=SAMPLE_KEY).digest()
    return int.from_bytes(digest, "big") / 2**64


def check_rate(rate: float) -> float:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
        raise MonitorConfigError(f"sample rate must be a number in [0, 1], got {rate!r}")
    return float(rate)


def sampled(trace_id: str, rate: float) -> bool:
    """Whether the trace is in the sample: its hash point is below `rate`.

    Deterministic (a rerun samples the same traces, unlike Python's salted `hash()`), and
    nested: every trace sampled at one rate is also sampled at any higher rate.
    """
    return sample_point(trace_id) < check_rate(rate)


# --- configuration ------------------------------------------------------------------------------


def _metric_name(text: str) -> str:
    name = text.strip()
    if name.lower() == COVERAGE:
        return COVERAGE
    return parse_metric(name).name


def _unit(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise MonitorConfigError(f"{what} must be a number in [0, 1], got {value!r}")
    return float(value)


def parse_assignment(text: str) -> tuple[str, str, float]:
    """`[SEGMENT:]METRIC=VALUE` -> (segment, canonical metric, value); no segment means every
    segment (`*`), and `__all__` names the overall row."""
    target, sep, value_text = text.partition("=")
    if not sep or not target.strip() or not value_text.strip():
        raise MonitorConfigError(f"expected [SEGMENT:]METRIC=VALUE, got {text!r}")
    segment, colon, metric_text = target.rpartition(":")
    segment = segment.strip() if colon else ANY_SEGMENT
    if colon and not segment:
        raise MonitorConfigError(f"empty segment name in {text!r}")
    try:
        metric = _metric_name(metric_text)
        value = float(value_text)
    except MetricConfigError as exc:
        raise MonitorConfigError(f"{text!r}: {exc}") from None
    except ValueError:
        raise MonitorConfigError(f"{text!r}: {value_text.strip()!r} is not a number") from None
    return segment, metric, _unit(value, f"value in {text!r}")


@dataclass(frozen=True)
class Rule:
    """What counts as a drop for one metric on one segment (`*`: every segment and overall).

    Unset fields fall back to the rule for every segment, then to the monitor's defaults."""

    metric: str
    segment: str = ANY_SEGMENT
    threshold: float | None = None
    margin: float | None = None
    consecutive: int | None = None
    min_labels: int | None = None
    baseline_windows: int | None = None


@dataclass(frozen=True)
class ResolvedRule:
    """A rule with every field decided, for one metric on one segment."""

    metric: str
    segment: str
    threshold: float | None
    margin: float | None
    consecutive: int
    min_labels: int
    baseline_windows: int


def rules_from_assignments(
    thresholds: Iterable[str] | Mapping[str, float] = (),
    margins: Iterable[str] | Mapping[str, float] = (),
) -> tuple[Rule, ...]:
    """Rules from `[SEGMENT:]METRIC=VALUE` texts (or a mapping `[SEGMENT:]METRIC -> VALUE`)."""

    def triples(given: Iterable[str] | Mapping[str, float]) -> list[tuple[str, str, float]]:
        if isinstance(given, Mapping):
            return [parse_assignment(f"{key}={value}") for key, value in given.items()]
        return [parse_assignment(text) for text in given]

    fields: dict[tuple[str, str], dict[str, float]] = {}
    for kind, given in (("threshold", thresholds), ("margin", margins)):
        for segment, metric, value in triples(given):
            slot = fields.setdefault((segment, metric), {})
            if kind in slot:
                raise MonitorConfigError(f"{kind} for {segment}:{metric} given more than once")
            slot[kind] = value
    return tuple(
        Rule(metric, segment, values.get("threshold"), values.get("margin"))
        for (segment, metric), values in fields.items()
    )


WindowMode = Literal["records", "seconds"]


@dataclass(frozen=True)
class MonitorConfig:
    """Metrics, sampling, windows and rules. Exactly one of `window_seconds` (fixed windows on
    trace timestamps, aligned to the Unix epoch) and `window_records` (a window closes after that
    many sampled traces) is set; `window_records=100` when neither is given."""

    metrics: tuple[str, ...] = ("mrr", "precision@5")
    sample_rate: float = 1.0
    window_seconds: int | None = None
    window_records: int | None = None
    lateness_seconds: int = 0
    rules: tuple[Rule, ...] = ()
    consecutive: int = 3
    min_labels: int = 20
    baseline_windows: int = 6
    gain: Gain = "exponential"
    relevance_level: float = 1.0

    def __post_init__(self) -> None:
        try:
            names = tuple(metric.name for metric in parse_metrics(list(self.metrics)))
        except MetricConfigError as exc:
            raise MonitorConfigError(str(exc)) from None
        object.__setattr__(self, "metrics", names)
        check_rate(self.sample_rate)
        if self.window_seconds is not None and self.window_records is not None:
            raise MonitorConfigError("give window_seconds or window_records, not both")
        if self.window_seconds is None and self.window_records is None:
            object.__setattr__(self, "window_records", 100)
        for name in ("window_seconds", "window_records"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise MonitorConfigError(f"{name} must be a whole number >= 1, got {value!r}")
        for name, low in (
            ("lateness_seconds", 0),
            ("consecutive", 1),
            ("min_labels", 1),
            ("baseline_windows", 1),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise MonitorConfigError(f"{name} must be a whole number >= {low}, got {value!r}")
        seen: set[tuple[str, str]] = set()
        rules: list[Rule] = []
        for rule in self.rules:
            metric = _metric_name(rule.metric)
            if metric != COVERAGE and metric not in names:
                raise MonitorConfigError(
                    f"rule for {metric!r} on {rule.segment!r}: not among the monitored metrics "
                    f"({', '.join(names)}) or {COVERAGE}"
                )
            if (rule.segment, metric) in seen:
                raise MonitorConfigError(f"more than one rule for {metric!r} on {rule.segment!r}")
            seen.add((rule.segment, metric))
            for value, what in ((rule.threshold, "threshold"), (rule.margin, "margin")):
                if value is not None:
                    _unit(value, f"{what} for {rule.segment}:{metric}")
            for count, what in (
                (rule.consecutive, "consecutive"),
                (rule.min_labels, "min_labels"),
                (rule.baseline_windows, "baseline_windows"),
            ):
                if count is not None and (not isinstance(count, int) or count < 1):
                    raise MonitorConfigError(
                        f"{what} for {rule.segment}:{metric} must be a whole number >= 1, "
                        f"got {count!r}"
                    )
            rules.append(replace(rule, metric=metric))
        object.__setattr__(self, "rules", tuple(rules))

    @property
    def mode(self) -> WindowMode:
        return "seconds" if self.window_seconds is not None else "records"

    @property
    def window_size(self) -> int:
        size = self.window_seconds if self.window_seconds is not None else self.window_records
        assert size is not None  # __post_init__ sets one
        return size

    def rule_for(self, metric: str, segment: str) -> ResolvedRule | None:
        """The rule that applies to `metric` on `segment`, or None when nothing is checked."""
        chosen: dict[str, Any] = {}
        for rule in self.rules:
            if rule.metric == metric and rule.segment == ANY_SEGMENT:
                chosen.update({k: v for k, v in asdict(rule).items() if v is not None})
        for rule in self.rules:
            if rule.metric == metric and rule.segment == segment != ANY_SEGMENT:
                chosen.update({k: v for k, v in asdict(rule).items() if v is not None})
        if chosen.get("threshold") is None and chosen.get("margin") is None:
            return None
        return ResolvedRule(
            metric=metric,
            segment=segment,
            threshold=chosen.get("threshold"),
            margin=chosen.get("margin"),
            consecutive=chosen.get("consecutive", self.consecutive),
            min_labels=chosen.get("min_labels", self.min_labels),
            baseline_windows=chosen.get("baseline_windows", self.baseline_windows),
        )


# --- windows and events -----------------------------------------------------------------------


def segment_words(segment: str) -> str:
    """How a segment is named in a reason; the overall row reads `all segments`."""
    return "all segments" if segment == OVERALL else segment


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True)
class SegmentStats:
    """One segment of one window: traces seen and sampled, labelled ones, and mean per metric."""

    records: int
    sampled: int
    labelled: int
    means: dict[str, float | None]

    @property
    def coverage(self) -> float | None:
        """Share of sampled traces with labels; None when nothing was sampled."""
        return self.labelled / self.sampled if self.sampled else None


@dataclass(frozen=True)
class WindowSummary:
    """A closed window. `start` is inclusive and `end` exclusive for time windows; for windows
    by record count they are the first and last trace timestamps. `late` counts traces whose own
    time window had already closed when they arrived (they are counted here instead), and
    `partial` marks a window closed early because the input ended."""

    index: int
    start: datetime
    end: datetime
    records: int
    sampled: int
    labelled: int
    late: int
    partial: bool
    segments: dict[str, SegmentStats]  # includes OVERALL

    @property
    def coverage(self) -> float | None:
        return self.segments[OVERALL].coverage

    @property
    def means(self) -> dict[str, float | None]:
        return self.segments[OVERALL].means

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": _iso(self.start),
            "end": _iso(self.end),
            "records": self.records,
            "sampled": self.sampled,
            "labelled": self.labelled,
            "coverage": self.coverage,
            "late": self.late,
            "partial": self.partial,
            "means": self.means,
            "segments": {
                name: {
                    "records": stats.records,
                    "sampled": stats.sampled,
                    "labelled": stats.labelled,
                    "coverage": stats.coverage,
                    "means": stats.means,
                }
                for name, stats in self.segments.items()
            },
        }


@dataclass(frozen=True)
class Alert:
    """A sustained drop: `consecutive` evidence windows in a row breached the rule."""

    segment: str
    metric: str
    window_index: int  # the window that completed the run and opened the alert
    window_start: datetime
    window_end: datetime
    first_window_start: datetime  # start of the first window of the run
    value: float  # the opening window's mean
    threshold: float | None
    baseline: float | None
    margin: float | None
    consecutive: int
    min_labels: int
    evidence: int  # labelled traces (sampled, for coverage) in the opening window
    reason: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("window_start", "window_end", "first_window_start"):
            data[key] = _iso(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Alert:
        values = dict(data)
        for key in ("window_start", "window_end", "first_window_start"):
            values[key] = _from_iso(values[key])
        return cls(**values)


@dataclass(frozen=True)
class Recovery:
    """An open alert closed by an evidence window that does not breach its rule."""

    segment: str
    metric: str
    window_index: int
    window_start: datetime
    window_end: datetime
    value: float
    threshold: float | None
    baseline: float | None
    margin: float | None
    alert: Alert  # the alert it closes
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "metric": self.metric,
            "window_index": self.window_index,
            "window_start": _iso(self.window_start),
            "window_end": _iso(self.window_end),
            "value": self.value,
            "threshold": self.threshold,
            "baseline": self.baseline,
            "margin": self.margin,
            "alert_window_index": self.alert.window_index,
            "alert_window_start": _iso(self.alert.window_start),
            "reason": self.reason,
        }


Event = WindowSummary | Alert | Recovery


def means_words(means: Mapping[str, float | None]) -> str:
    """`mrr 0.612, precision@5 0.240`; a mean without labels reads `-`."""
    return ", ".join(f"{m} {'-' if v is None else f'{v:.3f}'}" for m, v in means.items())


def window_line(window: WindowSummary) -> str:
    """One closed window in words, on one line."""
    coverage = "-" if window.coverage is None else f"{window.coverage:.2f}"
    line = (
        f"window {window.index} {_iso(window.start)} .. {_iso(window.end)}: "
        f"{window.records} records, {window.sampled} sampled, {window.labelled} labelled "
        f"(coverage {coverage}); {means_words(window.means)}"
    )
    if window.late:
        line += f"; {window.late} late"
    return line + (" (partial)" if window.partial else "")


def drop_verdict(reasons: Sequence[str]) -> tuple[bool, str]:
    """The `live_sustained_drop` check's verdict on the open alerts' reasons: (passed, words)."""
    if not reasons:
        return True, "no sustained drop: no live alert is open"
    return False, f"{len(reasons)} live alert(s) open: " + "; ".join(reasons)


def _pair(value: float, limit: float) -> tuple[str, str]:
    """Both numbers with two decimals, or more when two would print them equal."""
    for digits in (2, 3, 4, 6):
        shown = f"{value:.{digits}f}", f"{limit:.{digits}f}"
        if shown[0] != shown[1]:
            return shown
    return f"{value!r}", f"{limit!r}"


def _criteria(
    metric: str,
    value: float,
    threshold: float | None,
    baseline: float | None,
    margin: float | None,
    below: bool,
) -> str:
    """`mrr 0.41 < 0.50` / `mrr 0.41 < 0.52 (baseline 0.62 - margin 0.10)`, for the criteria
    that were crossed (`below`) or, for a recovery, met."""
    sign = "<" if below else ">="
    parts: list[str] = []
    shown_value = ""
    if threshold is not None and (value < threshold) == below:
        shown_value, limit = _pair(value, threshold)
        parts.append(f"{sign} {limit}")
    if baseline is not None and margin is not None and (value < baseline - margin) == below:
        shown, limit = _pair(value, baseline - margin)
        shown_value = shown_value or shown
        parts.append(f"{sign} {limit} (baseline {baseline:.2f} - margin {margin:.2f})")
    joiner = " and " if below else ", "
    return f"{metric} {shown_value} {joiner.join(parts)}"


def _evidence_words(metric: str, count: int) -> str:
    return f">= {count} sampled each" if metric == COVERAGE else f">= {count} labels each"


# --- the monitor ------------------------------------------------------------------------------


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
        for name in (OVERALL, record.segment):
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
        overall = self.segments.get(OVERALL)
        return overall.sampled if overall else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "first": _iso(self.first) if self.first else None,
            "last": _iso(self.last) if self.last else None,
            "records": self.records,
            "late": self.late,
            "segments": {name: asdict(segment) for name, segment in self.segments.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Window:
        return cls(
            bucket=data["bucket"],
            first=_from_iso(data["first"]) if data["first"] else None,
            last=_from_iso(data["last"]) if data["last"] else None,
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

    def __init__(self, config: MonitorConfig, state: Mapping[str, Any] | None = None) -> None:
        self.config = config
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
            "watermark": _iso(self._watermark) if self._watermark else None,
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
        self._watermark = _from_iso(state["watermark"]) if state["watermark"] else None
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
        names = [OVERALL, *sorted(name for name in window.segments if name != OVERALL)]
        segments = {name: window.segments[name].stats(self.config.metrics) for name in names}
        overall = segments[OVERALL]
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
        below_threshold = rule.threshold is not None and value < rule.threshold
        below_baseline = (
            rule.margin is not None and baseline is not None and value < baseline - rule.margin
        )
        if below_threshold or below_baseline:
            state.streak += 1
            if state.streak == 1:
                state.streak_start = _iso(window.start)
            if state.open_alert is not None or state.streak < rule.consecutive:
                return None
            assert state.streak_start is not None
            what = _criteria(rule.metric, value, rule.threshold, baseline, rule.margin, True)
            alert = Alert(
                segment=rule.segment,
                metric=rule.metric,
                window_index=window.index,
                window_start=window.start,
                window_end=window.end,
                first_window_start=_from_iso(state.streak_start),
                value=value,
                threshold=rule.threshold,
                baseline=baseline,
                margin=rule.margin,
                consecutive=rule.consecutive,
                min_labels=rule.min_labels,
                evidence=evidence,
                reason=(
                    f"{segment_words(rule.segment)}: {what} for {rule.consecutive} consecutive "
                    f"windows ({_evidence_words(rule.metric, rule.min_labels)})"
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
        what = _criteria(rule.metric, value, rule.threshold, baseline, rule.margin, False)
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
                f"{segment_words(rule.segment)}: {what}; recovered (alert opened at window "
                f"{opened.window_index}, {_iso(opened.window_start)})"
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


# --- reading what arrived ---------------------------------------------------------------------


@dataclass
class FileProgress:
    """How far a file has been consumed: bytes (decompressed for .gz) or Parquet rows, and the
    lines or rows read (for `file:line` in reports). `seen_size`/`seen_mtime_ns` describe the file
    when a read last reached its end, so an unchanged file is not read again."""

    offset: int = 0
    lines: int = 0
    seen_size: int = -1
    seen_mtime_ns: int = -1


@dataclass(frozen=True)
class Arrival:
    """One complete line (or Parquet row as JSON) not consumed before, and where it was."""

    source: str
    line: int
    text: bytes


_CHUNK = 8 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"


def _unchanged(stat: os.stat_result, progress: FileProgress) -> bool:
    return (stat.st_size, stat.st_mtime_ns) == (progress.seen_size, progress.seen_mtime_ns)


def _complete_lines(
    data: bytes, start_line: int, limit: int | None, final: bool
) -> tuple[list[tuple[int, bytes]], int, int]:
    """Lines of `data` that end in a newline (and an unterminated last one when `final`), up to
    `limit` non-blank lines: `[(line number, text)]`, bytes consumed, lines consumed (blank
    lines are consumed and numbered but are not records)."""
    out: list[tuple[int, bytes]] = []
    position, number = 0, start_line
    while limit is None or len(out) < limit:
        newline = data.find(b"\n", position)
        if newline >= 0:
            piece, position = data[position:newline], newline + 1
        elif final and position < len(data):
            piece, position = data[position:], len(data)
        else:
            break
        number += 1
        text = piece.removesuffix(b"\r")
        if text.strip():
            out.append((number, text))
    return out, position, number - start_line


def _gunzip_prefix(raw: bytes) -> tuple[bytes, bool, str | None]:
    """What a (possibly still growing) gzip file decompresses to so far, member by member:
    the bytes, whether the stream ended cleanly, and a problem if it is corrupt."""
    out = bytearray()
    rest = raw
    try:
        while rest:
            inflater = zlib.decompressobj(wbits=31)
            out += inflater.decompress(rest)
            if not inflater.eof:
                return bytes(out), False, None  # still being written: the tail waits
            rest = inflater.unused_data
    except zlib.error as exc:
        return bytes(out), False, f"gzip stream corrupt after {len(out)} bytes ({exc})"
    return bytes(out), True, None


def _read_from(path: Path, offset: int, limit: int | None) -> tuple[bytes, bool]:
    """Bytes from `offset`: to the end, or (with `limit`) enough chunks to hold `limit` lines.
    Also says whether the end of the file was reached."""
    parts: list[bytes] = []
    newlines = 0
    with path.open("rb") as handle:
        handle.seek(offset)
        while True:
            chunk = handle.read(_CHUNK)
            parts.append(chunk)
            newlines += chunk.count(b"\n")
            if len(chunk) < _CHUNK:
                return b"".join(parts), True
            if limit is not None and newlines >= limit:
                return b"".join(parts), False


def read_new_lines(
    path: Path,
    progress: FileProgress,
    source: str | None = None,
    limit: int | None = None,
    final: bool = False,
) -> tuple[list[Arrival], FileProgress, str | None]:
    """The complete JSON lines of `path` past `progress`, the new progress, and a problem.

    A last line without its newline is being written and is left for a later read, unless
    `final` says the file is complete (or a `.jsonl.gz` stream ended cleanly). A `.jsonl.gz`
    file is decompressed from its start (a gzip stream cannot be entered mid-way) and the
    `offset` bytes already read are skipped. A file that shrank is reported and not read again:
    the trace store is append-only, and reading it afresh could count records twice."""
    name = source or str(path)
    stat = path.stat()
    if _unchanged(stat, progress):
        return [], progress, None
    problem: str | None = None
    if path.name.lower().endswith(".gz"):
        data, ended, problem = _gunzip_prefix(path.read_bytes())
        if problem:
            problem = f"{name}: {problem}"
        if len(data) < progress.offset:
            return [], progress, f"{name}: decompresses to fewer bytes than already read"
        data, at_end, final = data[progress.offset :], True, final or ended
    else:
        if stat.st_size < progress.offset:
            shrank = f"{name}: shrank to {stat.st_size} bytes, below the {progress.offset} read"
            return [], progress, shrank + "; not read again"
        data, at_end = _read_from(path, progress.offset, limit)
    skip = len(_BOM) if progress.offset == 0 and data.startswith(_BOM) else 0
    lines, consumed, n_lines = _complete_lines(data[skip:], progress.lines, limit, final and at_end)
    rest = data[skip + consumed :]
    done = at_end and b"\n" not in rest and not (final and rest)
    new = FileProgress(
        offset=progress.offset + skip + consumed,
        lines=progress.lines + n_lines,
        seen_size=stat.st_size if done else -1,
        seen_mtime_ns=stat.st_mtime_ns if done else -1,
    )
    return [Arrival(name, number, text) for number, text in lines], new, problem


def read_new_parquet_rows(
    path: Path, progress: FileProgress, source: str | None = None, limit: int | None = None
) -> tuple[list[Arrival], FileProgress, str | None]:
    """Rows of a Parquet file past `progress.offset`, each as the JSON text batch ingestion makes
    of it (`sql/stg_rows_as_json.sql`), so one validator judges both. A file that cannot be read
    yet (still being written, or damaged) is reported and read again once it changes."""
    name = source or str(path)
    stat = path.stat()
    if _unchanged(stat, progress):
        return [], progress, None
    # Imported here: only Parquet needs them, and `monitor` must start without them.
    import duckdb

    from retrieval_pipeline.ingest.files import TraceFileError
    from retrieval_pipeline.ingest.parquet import parquet_table
    from retrieval_pipeline.ingest.pieces import numbered_rows
    from retrieval_pipeline.warehouse.sql import load_sql

    try:
        table = parquet_table(path)
        start = min(progress.offset, table.num_rows)
        stop = table.num_rows if limit is None else min(table.num_rows, start + limit)
        numbered = numbered_rows(table.slice(start, stop - start), name, 0, start + 1)
    except TraceFileError as exc:
        waiting = replace(progress, seen_size=stat.st_size, seen_mtime_ns=stat.st_mtime_ns)
        return [], waiting, f"{exc}; read again when the file changes"
    with duckdb.connect() as conn:
        conn.register("raw_rows", numbered)
        raw = conn.execute(load_sql("stg_rows_as_json")).fetchall()
    done = stop == table.num_rows
    new = FileProgress(
        offset=stop,
        lines=stop,
        seen_size=stat.st_size if done else -1,
        seen_mtime_ns=stat.st_mtime_ns if done else -1,
    )
    arrivals = [Arrival(name, int(row[2]), str(row[3]).encode("utf-8")) for row in raw]
    return arrivals, new, None


@dataclass
class StoreCursor:
    """What the live sensor carries between ticks: how far each trace file of the store was read,
    the first day it watches, totals, and the monitor's state."""

    start_day: date | None = None
    files: dict[str, FileProgress] = field(default_factory=dict)  # "YYYY-MM-DD/name" -> progress
    monitor: dict[str, Any] | None = None
    records_read: int = 0
    bad_records: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": CURSOR_VERSION,
                "start_day": self.start_day.isoformat() if self.start_day else None,
                "files": {key: asdict(progress) for key, progress in sorted(self.files.items())},
                "monitor": self.monitor,
                "records_read": self.records_read,
                "bad_records": self.bad_records,
            },
            separators=(",", ":"),
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str) -> StoreCursor:
        try:
            data = json.loads(text)
        except ValueError:
            raise MonitorConfigError("the live sensor cursor is not JSON; reset it") from None
        version = data.get("version") if isinstance(data, dict) else None
        if version != CURSOR_VERSION:
            raise MonitorConfigError(
                f"the live sensor cursor has version {version!r}, this version reads "
                f"{CURSOR_VERSION}; reset the cursor to start afresh"
            )
        return cls(
            start_day=date.fromisoformat(data["start_day"]) if data["start_day"] else None,
            files={key: FileProgress(**value) for key, value in data["files"].items()},
            monitor=data["monitor"],
            records_read=data["records_read"],
            bad_records=data["bad_records"],
        )


@dataclass(frozen=True)
class StoreBatch:
    """What one read of the store found: new lines in store order and the advanced progress."""

    arrivals: list[Arrival]
    files: dict[str, FileProgress]
    start_day: date | None
    problems: list[str]


def read_store_arrivals(
    store: TraceStore,
    cursor: StoreCursor,
    limit: int | None = None,
    backfill_days: int = 0,
) -> StoreBatch:
    """Lines (and Parquet rows) that arrived in the store since `cursor`, day by day and file by
    file in name order, at most `limit` of them. Nothing is consumed twice or skipped: progress
    is per file, and a line is consumed only once its newline is written.

    Without a start day (a first read), watching starts `backfill_days` before the store's
    latest day; days before the start day are never read."""
    days = store.days()
    start_day = cursor.start_day
    if start_day is None and days:
        start_day = days[-1] - timedelta(days=backfill_days)
    held = {day.isoformat() for day in days}
    # Progress of files whose day folder was removed (retention) is dropped; within a day that
    # still exists it is kept, so a file that reappears is not read twice.
    files = {key: p for key, p in cursor.files.items() if key.split("/", 1)[0] in held}
    arrivals: list[Arrival] = []
    problems: list[str] = []
    for day in days:
        if start_day is None or day < start_day:
            continue
        for path in store.trace_files(day):
            room = None if limit is None else limit - len(arrivals)
            if room is not None and room <= 0:
                return StoreBatch(arrivals, files, start_day, problems)
            key = f"{day.isoformat()}/{path.name}"
            progress = files.get(key, FileProgress())
            if path.name.lower().endswith(".parquet"):
                found, progress, problem = read_new_parquet_rows(path, progress, str(path), room)
            else:
                found, progress, problem = read_new_lines(path, progress, str(path), room)
            files[key] = progress
            arrivals.extend(found)
            if problem:
                problems.append(problem)
    return StoreBatch(arrivals, files, start_day, problems)


@dataclass(frozen=True)
class Advance:
    """One step of the live monitor over the store: what it read and found, and the cursor to
    carry forward once the events are recorded."""

    lines: int  # lines (and Parquet rows) consumed
    bad: list[str]  # `file:line: reason` of those that are not valid records
    events: list[Event]
    problems: list[str]  # files that could not be read (yet)
    open_before: list[Alert]
    open_after: list[Alert]
    cursor: StoreCursor


def advance(
    store: TraceStore,
    cursor: StoreCursor,
    config: MonitorConfig,
    limit: int | None = None,
    backfill_days: int = 0,
) -> Advance:
    """Read what arrived since `cursor`, validate it, and feed the valid records to the monitor
    resumed from the cursor's state, oldest trace first. Nothing is stored: the caller records
    the events, then keeps the returned cursor.

    Records are fed in timestamp order (ties in store order) because the store is read file by
    file: several writers' files growing side by side would otherwise have the first file's
    newest trace close windows the next file still has traces for."""
    batch = read_store_arrivals(store, cursor, limit, backfill_days)
    live = LiveMonitor(config, cursor.monitor)
    open_before = live.open_alerts()
    records: list[TraceRecord] = []
    bad: list[str] = []
    for arrival in batch.arrivals:
        try:
            records.append(parse_line(arrival.text))
        except RecordError as exc:
            bad.append(f"{arrival.source}:{arrival.line}: {exc.reason}")
    events: list[Event] = []
    for record in sorted(records, key=lambda r: r.served_at):
        events.extend(live.observe(record))
    return Advance(
        lines=len(batch.arrivals),
        bad=bad,
        events=events,
        problems=batch.problems,
        open_before=open_before,
        open_after=live.open_alerts(),
        cursor=StoreCursor(
            start_day=batch.start_day,
            files=batch.files,
            monitor=live.state(),
            records_read=cursor.records_read + len(batch.arrivals),
            bad_records=cursor.bad_records + len(bad),
        ),
    )


# --- the warehouse ----------------------------------------------------------------------------


def prepare_warehouse(conn: duckdb.DuckDBPyConnection) -> None:
    """UTC session and the live tables (`sql/live_windows_schema.sql`), created if missing."""
    from retrieval_pipeline.warehouse.sql import load_sql

    conn.execute("set TimeZone = 'UTC'")
    conn.execute(load_sql("live_windows_schema"))


def window_rows(window: WindowSummary, metrics: Sequence[str]) -> dict[str, Any]:
    """The bound parameters of `sql/stg_live_window_metrics.sql` for one window: one row per
    segment and metric (coverage included), as parallel lists."""
    rows: dict[str, list[Any]] = {
        key: [] for key in ("segment", "metric", "value", "records", "sampled", "labelled")
    }
    for segment, stats in window.segments.items():
        for metric in (*metrics, COVERAGE):
            value = stats.coverage if metric == COVERAGE else stats.means.get(metric)
            rows["segment"].append(segment)
            rows["metric"].append(metric)
            rows["value"].append(value)
            rows["records"].append(stats.records)
            rows["sampled"].append(stats.sampled)
            rows["labelled"].append(stats.labelled)
    return {
        "window_index": window.index,
        "window_start": window.start,
        "window_end": window.end,
        "late": window.late,
        "partial": window.partial,
        **{f"{key}_list": values for key, values in rows.items()},
    }


def alert_rows(events: Iterable[Alert | Recovery]) -> dict[str, list[Any]]:
    """The bound parameters of `sql/stg_live_alerts.sql`: one row per alert or recovery."""
    rows: dict[str, list[Any]] = {
        key: []
        for key in (
            "event",
            "segment",
            "metric",
            "window_index",
            "window_start",
            "window_end",
            "value",
            "threshold",
            "baseline",
            "margin",
            "alert_window_start",
            "reason",
        )
    }
    for event in events:
        alert = event if isinstance(event, Alert) else event.alert
        row = {
            "event": "alert" if isinstance(event, Alert) else "recovery",
            "segment": event.segment,
            "metric": event.metric,
            "window_index": event.window_index,
            "window_start": event.window_start,
            "window_end": event.window_end,
            "value": event.value,
            "threshold": event.threshold,
            "baseline": event.baseline,
            "margin": event.margin,
            "alert_window_start": alert.window_start,
            "reason": event.reason,
        }
        for key, value in row.items():
            rows[key].append(value)
    return {f"{key}_list": values for key, values in rows.items()}


def record_events(
    conn: duckdb.DuckDBPyConnection, events: Sequence[Event], metrics: Sequence[str]
) -> None:
    """Write closed windows and alert events to the warehouse in one transaction.

    Rows are keyed by window (and segment, metric, event) and replaced on conflict, so writing
    the same events again (a tick replayed after a crash) changes nothing."""
    from retrieval_pipeline.warehouse.sql import load_sql

    prepare_warehouse(conn)
    alerts = [e for e in events if isinstance(e, Alert | Recovery)]
    conn.execute("begin transaction")
    try:
        for event in events:
            if isinstance(event, WindowSummary):
                conn.execute(
                    "insert or replace into live_window_metrics by name "
                    + load_sql("stg_live_window_metrics"),
                    window_rows(event, metrics),
                )
        if alerts:
            conn.execute(
                "insert or replace into live_alerts by name " + load_sql("stg_live_alerts"),
                alert_rows(alerts),
            )
    except BaseException:
        conn.execute("rollback")
        raise
    conn.execute("commit")


def open_alert_reasons(conn: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """Alerts in the warehouse that no recovery closed: `(segment, metric, reason)`."""
    from retrieval_pipeline.warehouse.sql import load_sql

    prepare_warehouse(conn)
    rows = conn.execute(load_sql("rpt_live_open_alerts")).fetchall()
    return [(str(segment), str(metric), str(reason)) for segment, metric, reason, *_ in rows]


def iter_events(events: Iterable[Event]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each event as `(kind, JSON-ready dict)`: kind is window, alert or recovery."""
    for event in events:
        if isinstance(event, WindowSummary):
            yield "window", event.to_dict()
        elif isinstance(event, Alert):
            yield "alert", event.to_dict()
        else:
            yield "recovery", event.to_dict()
