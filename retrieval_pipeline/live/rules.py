"""Sampling and configuration of the live monitor: which traces are scored, how windows close and
what counts as a sustained drop.

Pure and standard-library only. A trace is sampled by a keyed hash of its id, so a rerun samples
the same traces. A rule names a metric (or `coverage`, the share of sampled traces with labels)
on one segment, or on every segment and the overall row (`segments.ALL_SEGMENTS`), with a
threshold, a margin below the trailing baseline, or both; fields a segment's rule leaves unset
fall back to the rule for every segment, then to the monitor's defaults.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from retrieval_pipeline.metrics import Gain, MetricConfigError, parse_metric, parse_metrics
from retrieval_pipeline.segments import ALL_SEGMENTS, parse_threshold

COVERAGE = "coverage"

# Personalises the sampling hash so the sample is independent of any other hash-based split of
# trace ids (an A/B assignment hashing the same ids with plain blake2b would otherwise line up).
SAMPLE_KEY = b"rp-live-sample"


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
    """The canonical name of a monitored metric, or `coverage`."""
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
    segment (`*`), and `__all__` names the overall row. The syntax is `segments.parse_threshold`'s;
    the metric may also be `coverage`."""
    try:
        segment, metric_text, value = parse_threshold(text)
    except ValueError as exc:
        raise MonitorConfigError(str(exc)) from None
    try:
        metric = _metric_name(metric_text)
    except MetricConfigError as exc:
        raise MonitorConfigError(f"{text!r}: {exc}") from None
    return segment or ALL_SEGMENTS, metric, value


@dataclass(frozen=True)
class Rule:
    """What counts as a drop for one metric on one segment (`*`: every segment and overall).

    Unset fields fall back to the rule for every segment, then to the monitor's defaults."""

    metric: str
    segment: str = ALL_SEGMENTS
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
            if rule.metric == metric and rule.segment == ALL_SEGMENTS:
                chosen.update({k: v for k, v in asdict(rule).items() if v is not None})
        for rule in self.rules:
            if rule.metric == metric and rule.segment == segment != ALL_SEGMENTS:
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
