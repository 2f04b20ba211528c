"""What the live monitor reports: closed windows, alerts and recoveries, and their wording.

Pure and standard-library only. Every event is JSON-ready (`to_dict`), so the command prints it
and the sensor carries it in its cursor; the words (a window on one line, an alert's reason, the
check's verdict) are the same wherever they are shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from retrieval_pipeline.live.rules import COVERAGE
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import number


def iso(moment: datetime) -> str:
    """`moment` in UTC as ISO 8601 with a `Z`."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def from_iso(text: str) -> datetime:
    """The UTC moment of an `iso` text."""
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
    segments: dict[str, SegmentStats]  # includes OVERALL_SEGMENT

    @property
    def coverage(self) -> float | None:
        return self.segments[OVERALL_SEGMENT].coverage

    @property
    def means(self) -> dict[str, float | None]:
        return self.segments[OVERALL_SEGMENT].means

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": iso(self.start),
            "end": iso(self.end),
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
            data[key] = iso(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Alert:
        values = dict(data)
        for key in ("window_start", "window_end", "first_window_start"):
            values[key] = from_iso(values[key])
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
            "window_start": iso(self.window_start),
            "window_end": iso(self.window_end),
            "value": self.value,
            "threshold": self.threshold,
            "baseline": self.baseline,
            "margin": self.margin,
            "alert_window_index": self.alert.window_index,
            "alert_window_start": iso(self.alert.window_start),
            "reason": self.reason,
        }


Event = WindowSummary | Alert | Recovery


def iter_events(events: Iterable[Event]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each event as `(kind, JSON-ready dict)`: kind is window, alert or recovery."""
    for event in events:
        if isinstance(event, WindowSummary):
            yield "window", event.to_dict()
        elif isinstance(event, Alert):
            yield "alert", event.to_dict()
        else:
            yield "recovery", event.to_dict()


# --- wording ----------------------------------------------------------------------------------


def means_words(means: Mapping[str, float | None]) -> str:
    """`mrr 0.612, precision@5 0.240`; a mean without labels reads `-`."""
    return ", ".join(f"{m} {number(v)}" for m, v in means.items())


def window_line(window: WindowSummary) -> str:
    """One closed window in words, on one line."""
    line = (
        f"window {window.index} {iso(window.start)} .. {iso(window.end)}: "
        f"{window.records} records, {window.sampled} sampled, {window.labelled} labelled "
        f"(coverage {number(window.coverage, 2)}); {means_words(window.means)}"
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
        shown = number(value, digits), number(limit, digits)
        if shown[0] != shown[1]:
            return shown
    return f"{value!r}", f"{limit!r}"


def criteria_words(
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
        parts.append(
            f"{sign} {limit} (baseline {number(baseline, 2)} - margin {number(margin, 2)})"
        )
    joiner = " and " if below else ", "
    return f"{metric} {shown_value} {joiner.join(parts)}"


def evidence_words(metric: str, count: int) -> str:
    """How much evidence each window of an alert's run held."""
    return f">= {count} sampled each" if metric == COVERAGE else f">= {count} labels each"
