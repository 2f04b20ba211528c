"""The asset checks' verdicts and the deploy gate's decision, from tables, in words.

Pure: DataFrames and plain values in, words and plain values out; no DuckDB, no Dagster. Every
threshold miss is named the same way everywhere (report, check description, gate refusal):
`multi_hop / candidate: ndcg@10 = 0.642, 0.058 below the threshold 0.700`: the gap to the
threshold said in words, never a bare signed number a reader could take for the change from the
baseline (which the regression table calls `change from baseline`). Strings that come from traces
(segment, variant) are escaped before they enter Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import pandas as pd

from retrieval_pipeline.config import StagesConfig
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import escape_markdown, finite


def _plain(text: object) -> str:
    return str(text)


def _day(value: object) -> date:
    if isinstance(value, pd.Timestamp):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def days_between(start: date, end: date) -> list[date]:
    """Every day from start to end, both included."""
    return [start + timedelta(days=offset) for offset in range((end - start).days + 1)]


def window_text(start: date, end: date) -> str:
    return start.isoformat() if start == end else f"{start.isoformat()}..{end.isoformat()}"


@dataclass(frozen=True)
class Miss:
    """One metric of one segment and variant below its threshold, or without a number to hold
    against it: `value` NaN (a score that could not be computed) or None (no annotated trace
    where a verdict was due). Neither ever passes."""

    segment: str
    variant: str
    metric: str
    value: float | None
    threshold: float
    partition: date | None = None

    @property
    def margin(self) -> float | None:
        """value - threshold; None when the value is not a number."""
        if self.value is None or not math.isfinite(self.value):
            return None
        return self.value - self.threshold

    @property
    def shown_value(self) -> float | None:
        """The value for JSON, which has no NaN: None when it is not a finite number."""
        return self.value if finite(self.value, numbers_only=True) is not None else None

    def words(self, escape: Callable[[object], str] = _plain, with_day: bool = False) -> str:
        """`multi_hop / candidate: ndcg@10 = 0.642, 0.058 below the threshold 0.700`; without a
        number, `... ndcg@10 is not a number (NaN), threshold 0.700` or `... has no mean, ...`."""
        prefix = f"{self.partition.isoformat()} " if with_day and self.partition else ""
        where = f"{prefix}{escape(segment_label(self.segment))} / {escape(self.variant)}: "
        metric = escape(self.metric)
        if self.value is None:
            return f"{where}{metric} has no mean, threshold {self.threshold:.3f}"
        if not math.isfinite(self.value):
            return f"{where}{metric} is not a number (NaN), threshold {self.threshold:.3f}"
        gap = self.threshold - self.value
        return (
            f"{where}{metric} = {self.value:.3f}, {gap:.3f} below the threshold "
            f"{self.threshold:.3f}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The miss as JSON holds it (the regression report's `misses`, the comparison's
        `regression_misses`): `value` null when not a number, `margin` = value - threshold."""
        return {
            "segment": self.segment,
            "variant": self.variant,
            "metric": self.metric,
            "value": self.shown_value,  # null when not a number: `words` says which
            "threshold": self.threshold,
            "margin": self.margin,
            "words": self.words(),
        }


def report_order(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (partition_date, segment, variant, metric) in report order: by day, the overall
    row after the segments, then segment, variant and metric."""
    if rows.empty:
        return rows
    keys = pd.DataFrame(
        {
            "partition_date": rows["partition_date"],
            "overall": rows["segment"] == OVERALL_SEGMENT,
            "segment": rows["segment"],
            "variant": rows["variant"],
            "metric": rows["metric"],
        }
    )
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return rows.loc[order].reset_index(drop=True)


def _value(row: Mapping[str, Any]) -> float | None:
    """A row's mean: None when no value was counted (n = 0: DuckDB's null reads as NaN in
    pandas), else the mean as a float, NaN included."""
    if not row.get("n"):
        return None
    mean = row["mean"]
    return float(mean) if mean is not None else math.nan


def _is_miss(row: Mapping[str, Any]) -> bool:
    """A failing row, or one with a threshold whose mean is not a number and which still says
    `pass` (a warehouse written before NaN failed in SQL, where NaN compared as passing)."""
    if row["status"] == "fail":
        return True
    return (
        row["status"] == "pass"
        and finite(row["threshold"], numbers_only=True) is not None
        and finite(row["mean"], numbers_only=True) is None
    )


def misses_of(rows: pd.DataFrame) -> list[Miss]:
    """The failing rows of a segment-metrics (or regression) table, in report order. A row whose
    mean is missing or not a number never passes: it is a miss too."""
    if rows.empty:
        return []
    records = rows.to_dict(orient="records")
    failing = report_order(rows[[_is_miss(row) for row in records]])
    return [
        Miss(
            segment=str(row["segment"]),
            variant=str(row["variant"]),
            metric=str(row["metric"]),
            value=_value(row),
            threshold=float(row["threshold"]),
            partition=_day(row["partition_date"]),
        )
        for row in failing.to_dict(orient="records")
    ]


# --- asset-check verdicts --------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A check's outcome: passed or not, a description in words and plain metadata values."""

    passed: bool
    description: str
    metadata: dict[str, str | int | float]


def _window_metadata(start: date, end: date) -> dict[str, str | int | float]:
    return {"partition_start": start.isoformat(), "partition_end": end.isoformat()}


def _days_without_rows(rows: pd.DataFrame, start: date, end: date) -> list[date]:
    present = {_day(v) for v in rows["partition_date"]} if not rows.empty else set()
    return [day for day in days_between(start, end) if day not in present]


def _no_data(missing: Sequence[date], what: str) -> str:
    return "no data for " + ", ".join(d.isoformat() for d in missing) + f" ({what})"


def threshold_verdict(rows: pd.DataFrame, start: date, end: date) -> Verdict:
    """Fails when any segment (or overall) row misses its threshold, or a day has no data."""
    metadata = _window_metadata(start, end)
    missing = _days_without_rows(rows, start, end)
    misses = misses_of(rows)
    statuses = rows["status"].value_counts().to_dict() if not rows.empty else {}
    metadata |= {
        "misses": len(misses),
        "passing": sum(
            row["status"] == "pass" and not _is_miss(row) for row in rows.to_dict(orient="records")
        ),
        "insufficient": int(statuses.get("insufficient", 0)),
        "days_without_data": len(missing),
    }
    problems = [m.words(with_day=start != end) for m in misses]
    if missing:
        problems.insert(0, _no_data(missing, "no segment metrics: the partition holds no traces"))
    if problems:
        metadata["breakdown"] = "\n".join(f"- {escape_markdown(p)}" for p in problems)
        return Verdict(False, "\n".join(problems), metadata)
    text = (
        f"every segment and variant meets its thresholds for {window_text(start, end)} "
        f"({metadata['passing']} metric rows pass, {metadata['insufficient']} lack annotated "
        "traces for a verdict)"
    )
    return Verdict(True, text, metadata)


def coverage_verdict(rows: pd.DataFrame, min_coverage: float, start: date, end: date) -> Verdict:
    """Fails when a segment and variant has annotation coverage below the minimum, or a day has
    no data. The overall rows are not judged (they would hide a weak segment's share)."""
    metadata = _window_metadata(start, end) | {"min_coverage": min_coverage}
    missing = _days_without_rows(rows, start, end)
    problems: list[str] = []
    if missing:
        problems.append(_no_data(missing, "no traces"))
    lowest: float | None = None
    if not rows.empty:
        groups = rows[rows["segment"] != OVERALL_SEGMENT].drop_duplicates(
            ["partition_date", "segment", "variant"]
        )
        for row in report_order(groups).to_dict(orient="records"):
            coverage = finite(row["coverage"], numbers_only=True) or 0.0
            lowest = coverage if lowest is None else min(lowest, coverage)
            if coverage < min_coverage:
                day = f"{_day(row['partition_date']).isoformat()} " if start != end else ""
                problems.append(
                    f"{day}{row['segment']} / {row['variant']}: coverage {coverage:.3f} < "
                    f"{min_coverage:.3f} ({int(row['annotated_traces'])} of {int(row['traces'])} "
                    "traces annotated)"
                )
    if lowest is not None:
        metadata["lowest_coverage"] = lowest
    metadata["below_minimum"] = len(problems) - (1 if missing else 0)
    if problems:
        metadata["breakdown"] = "\n".join(f"- {escape_markdown(p)}" for p in problems)
        return Verdict(False, "\n".join(problems), metadata)
    return Verdict(
        True,
        f"every segment and variant has annotation coverage >= {min_coverage:.3f} "
        f"(lowest {lowest:.3f}) for {window_text(start, end)}",
        metadata,
    )


def rate_verdict(
    name: str,
    per_day: Mapping[date, tuple[int, int]],
    limit: float,
    counted: str,
    start: date,
    end: date,
) -> Verdict:
    """Fails when a day's share `numerator / denominator` exceeds `limit` or the day has no
    data (denominator 0). `counted` names the denominator, e.g. `records read`."""
    metadata = _window_metadata(start, end) | {"limit": limit}
    problems: list[str] = []
    numerator = sum(n for n, _ in per_day.values())
    denominator = sum(d for _, d in per_day.values())
    for day in days_between(start, end):
        part, whole = per_day.get(day, (0, 0))
        if whole == 0:
            problems.append(f"no data for {day.isoformat()}: 0 {counted}")
        elif part / whole > limit:
            problems.append(
                f"{day.isoformat()}: {name} {part / whole:.2%} ({part} of {whole} {counted}) "
                f"> limit {limit:.2%}"
            )
    metadata |= {"numerator": numerator, "denominator": denominator}
    if denominator:
        metadata["rate"] = numerator / denominator
    if problems:
        return Verdict(False, "\n".join(problems), metadata)
    return Verdict(
        True,
        f"{name} {numerator / denominator:.2%} ({numerator} of {denominator} {counted}) "
        f"<= limit {limit:.2%} for {window_text(start, end)}",
        metadata,
    )


# --- deploy gate -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOutcome:
    """The latest recorded evaluation of one blocking check."""

    name: str
    passed: bool | None  # None: planned or started but never evaluated
    partition_start: str | None
    partition_end: str | None
    run_id: str | None = None
    description: str | None = None
    evaluated_at: float | None = None

    def covers(self, start: date, end: date) -> bool:
        if self.partition_start is None or self.partition_end is None:
            return False
        return self.partition_start <= start.isoformat() and end.isoformat() <= self.partition_end


def gate_refusals(
    required: Iterable[str], outcomes: Mapping[str, CheckOutcome | None], start: date, end: date
) -> list[str]:
    """Why the gate must refuse `start..end`: one sentence per blocking check that is missing,
    never evaluated, evaluated for other partitions, or failed. Empty: approve."""
    reasons: list[str] = []
    window = window_text(start, end)
    for name in required:
        outcome = outcomes.get(name)
        if outcome is None:
            reasons.append(f"{name}: no evaluation recorded; run the checks for {window} first")
        elif outcome.passed is None:
            reasons.append(f"{name}: planned in run {outcome.run_id} but never evaluated")
        elif not outcome.covers(start, end):
            covered = f"{outcome.partition_start}..{outcome.partition_end}"
            reasons.append(
                f"{name}: the latest evaluation (run {outcome.run_id}) covers {covered}, not "
                f"{window}; run the checks for {window} first"
            )
        elif not outcome.passed:
            detail = f": {outcome.description}" if outcome.description else ""
            reasons.append(f"{name} failed in run {outcome.run_id}{detail}")
    return reasons


def approval_record(
    day: date, outcomes: Sequence[CheckOutcome], run_id: str, approved_at: str
) -> dict[str, Any]:
    """What a deploy system reads: the partition, each blocking check and its result."""
    return {
        "approved": True,
        "partition": day.isoformat(),
        "approved_at": approved_at,
        "run_id": run_id,
        "checks": [
            {
                "name": o.name,
                "passed": o.passed,
                "partition_start": o.partition_start,
                "partition_end": o.partition_end,
                "run_id": o.run_id,
                "evaluated_at": o.evaluated_at,
                "description": o.description,
            }
            for o in outcomes
        ],
    }


def stage_verdict(
    means: pd.DataFrame,
    gains: pd.DataFrame,
    stages: StagesConfig,
    start: date,
    end: date,
    no_data: Sequence[date] = (),
) -> Verdict:
    """The `reranker_stage` check: fails where a reranker stage's mean (per segment and
    variant, overall too) is below its `[stages] thresholds` floor, or the reranker's gain over
    its input (per segment and overall) is below `[stages] min_gain`, judged on the gain's mean.
    A missing or NaN value never passes, and a day without traces (`no_data`) fails as it fails
    every check. A day with traces but no reranker spans has no rows and passes saying so,
    unless `require_reranker` is set."""
    metadata = _window_metadata(start, end)
    problems: list[str] = [_no_data(no_data, "no traces")] if no_data else []
    with_day = start != end
    without = [day for day in _days_without_rows(means, start, end) if day not in no_data]
    if stages.require_reranker and without:
        problems.append(_no_data(without, "no reranker stage, and [stages] requires one"))
    judged = 0
    for row in means.to_dict(orient="records") if not means.empty else []:
        floor = stages.thresholds.get(row["stage"], {}).get(row["metric"])
        if floor is None:
            continue
        judged += 1
        value = row["mean"]
        mean = finite(value, numbers_only=True)
        if mean is None or mean < floor:
            problems.append(
                f"{_day_prefix(row, with_day)}{row['stage']} {segment_label(row['segment'])} / "
                f"{row['variant']}: {row['metric']} {_shown(value)} < {floor:.4f}"
            )
    for row in gains.to_dict(orient="records") if not gains.empty else []:
        least = stages.min_gain.get(row["metric"])
        if least is None:
            continue
        judged += 1
        value = row["gain"]
        gain = finite(value, numbers_only=True)
        if gain is None or gain < least:
            problems.append(
                f"{_day_prefix(row, with_day)}reranker gain {segment_label(row['segment'])}: "
                f"{row['metric']} {_shown(value, signed=True)} < {least:+.4f} "
                f"({int(row['pairs'])} paired spans)"
            )
    metadata |= {"judged": judged, "failing": len(problems), "days_without_reranker": len(without)}
    none_text = (
        "; no reranker stage on " + ", ".join(d.isoformat() for d in without) if without else ""
    )
    if problems:
        metadata["breakdown"] = "\n".join(f"- {escape_markdown(p)}" for p in problems)
        return Verdict(False, "\n".join(problems), metadata)
    if len(without) == len(days_between(start, end)):
        text = f"no reranker stage for {window_text(start, end)}: nothing to judge"
    else:
        text = (
            f"every reranker stage and gain meets [stages] for {window_text(start, end)} "
            f"({judged} values judged{none_text})"
        )
    return Verdict(True, text, metadata)


def _day_prefix(row: Mapping[str, Any], with_day: bool) -> str:
    return f"{_day(row['partition_date']).isoformat()} " if with_day else ""


def _shown(value: object, signed: bool = False) -> str:
    figure = finite(value, numbers_only=True)
    if figure is None:
        return "missing"
    return f"{figure:+.4f}" if signed else f"{figure:.4f}"
