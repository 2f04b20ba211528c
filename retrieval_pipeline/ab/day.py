"""A partition day's comparison: the configured candidate against control over the look-back
window ending at the day, or why none was possible, in words.

Pure: the window arrives aggregated (`WindowData`, read by `warehouse.ab_window.read_window`),
the statistics come from `compare.compare_data`. Beside the window come the partition day's own
threshold misses, as the regression report names them (`gate.misses_of` on the day's
`segment_metrics`): the comparison pools a window of days, so a day that misses a threshold can
sit beside a comparison that is not flagged, and the report says so where it says "not flagged".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from retrieval_pipeline.ab.compare import (
    Comparison,
    ComparisonData,
    ComparisonSettings,
    compare_data,
    config_thresholds,
)
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.gate import Miss, window_text

NO_COMPARISON = "no comparison possible"


def comparison_settings(config: PipelineConfig) -> ComparisonSettings:
    """The comparison's decision rules from the pipeline's configuration (thresholds and the
    minimum of annotated traces are the nightly checks' own)."""
    section = config.comparison
    return ComparisonSettings(
        alpha=section.alpha,
        guarded_metrics=section.guarded_metrics,
        thresholds=config_thresholds(config),
        n_resamples=section.n_resamples,
        seed=section.seed,
        min_annotated_traces=max(1, config.checks.min_annotated_traces),
        normal_approximation_min_pairs=section.normal_approximation_min_pairs,
    )


@dataclass(frozen=True)
class DayComparison:
    """One partition day's comparison over its window, or why there is none (`problem`).

    A comparison that ran but paired no query keeps both: its coverage explains the problem,
    and a threshold can still flag it."""

    day: date
    window_start: date
    window_end: date
    lookback_days: int
    days_with_data: int
    variants: tuple[str, ...]
    control: str
    candidate: str
    comparison: Comparison | None
    problem: str | None = None
    # the day's own threshold misses (the regression report's), every variant; () when none
    day_misses: tuple[Miss, ...] = ()

    @property
    def possible(self) -> bool:
        return self.problem is None

    @property
    def flagged(self) -> bool:
        return self.comparison is not None and self.comparison.flagged

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.comparison.reasons if self.comparison is not None else ()

    def window_words(self) -> str:
        return (
            f"window {window_text(self.window_start, self.window_end)}, "
            f"{self.days_with_data} of {self.lookback_days} day(s) with data"
        )

    def note(self) -> str:
        """What was compared, in words (the reports' headline, beside `test_words`)."""
        return (
            f"Window: partition {self.day.isoformat()} compares the traces of the "
            f"{self.window_words()}, pooled; a query's traces are averaged per arm over the "
            "whole window (the regression report judges the day alone)."
        )

    def day_misses_words(self) -> str | None:
        """The heading of the day's own threshold misses (None: there are none), saying whose
        they are and why the comparison may not flag them."""
        if not self.day_misses:
            return None
        count = len(self.day_misses)
        return (
            f"The regression report of {self.day.isoformat()} (the day alone against its "
            f"thresholds) has {count} threshold {'miss' if count == 1 else 'misses'}; this "
            f"comparison pools the {self.window_words()}, so its means can pass where the "
            "day's do not"
        )

    def words(self) -> str:
        """One line: flagged or not, or why no comparison was possible; then the day's own
        threshold misses, when it has any."""
        return self._outcome_words() + (
            f"; the day alone: {len(self.day_misses)} threshold "
            f"{'miss' if len(self.day_misses) == 1 else 'misses'} in the regression report "
            f"({'; '.join(m.words() for m in self.day_misses)})"
            if self.day_misses
            else ""
        )

    def _outcome_words(self) -> str:
        head = f"{self.day.isoformat()} ({self.window_words()}): {self.candidate} vs {self.control}"
        if self.problem is not None:
            text = f"{head}: {NO_COMPARISON}: {self.problem}"
            return text + (f"; flagged: {'; '.join(self.reasons)}" if self.flagged else "")
        assert self.comparison is not None
        if self.flagged:
            return f"{head}: flagged for review: " + "; ".join(self.reasons)
        return f"{head}: not flagged ({self.comparison.coverage[-1].paired} paired queries)"

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: the outcome first, the whole comparison under `comparison`."""
        return {
            "partition": self.day.isoformat(),
            "window": {
                "start": self.window_start.isoformat(),
                "end": self.window_end.isoformat(),
                "lookback_days": self.lookback_days,
                "days_with_data": self.days_with_data,
            },
            "control": self.control,
            "candidate": self.candidate,
            "variants_in_window": list(self.variants),
            "comparison_possible": self.possible,
            "problem": self.problem,
            "flagged": self.flagged,
            "reasons": list(self.reasons),
            "words": self.words(),
            # the regression report's misses of the day alone (gate.Miss.to_dict)
            "regression_misses": [m.to_dict() for m in self.day_misses],
            "comparison": self.comparison.to_dict() if self.comparison is not None else None,
        }


@dataclass(frozen=True)
class WindowData:
    """A window's traces as the comparison needs them: the days holding data, every variant
    served, and the comparison's aggregated input when both configured arms are there."""

    days_with_data: int
    variants: tuple[str, ...]
    data: ComparisonData | None
    # the partition day's own threshold misses (`DayComparison.day_misses`)
    day_misses: tuple[Miss, ...] = ()


def arms_present(variants: tuple[str, ...], config: PipelineConfig) -> bool:
    """Whether both configured arms served traces in the window."""
    section = config.comparison
    return section.control in variants and section.candidate in variants


def compare_window(window: WindowData, day: date, config: PipelineConfig) -> DayComparison:
    """Compare the configured candidate with control over partition `day`'s window, given as
    `WindowData` (`warehouse.ab_window.read_window`; `tests/oracles.py` builds it in pandas)."""
    section = config.comparison
    start, end = section.window(day)
    variants = window.variants

    def outcome(comparison: Comparison | None, problem: str | None) -> DayComparison:
        return DayComparison(
            day=day,
            window_start=start,
            window_end=end,
            lookback_days=section.lookback_days,
            days_with_data=window.days_with_data,
            variants=variants,
            control=section.control,
            candidate=section.candidate,
            comparison=comparison,
            problem=problem,
            day_misses=window.day_misses,
        )

    if not variants:
        return outcome(None, "the window holds no traces")
    absent = [
        f"{role} variant {name!r} has no traces in the window"
        for role, name in (("control", section.control), ("candidate", section.candidate))
        if name not in variants
    ]
    if absent or window.data is None:
        lead = ["the window holds one variant only"] if len(variants) < 2 else []
        problem = "; ".join([*lead, *absent]) + f"; variants present: {', '.join(variants)}"
        return outcome(None, problem)
    comparison = compare_data(window.data, comparison_settings(config))
    if comparison.coverage[-1].paired == 0:
        return outcome(
            comparison,
            f"no query was served and annotated by both {section.control} and "
            f"{section.candidate} in the window",
        )
    return outcome(comparison, None)
