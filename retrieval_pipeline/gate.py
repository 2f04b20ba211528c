"""The asset checks' verdicts and the deploy gate's decision, from tables, in words.

Pure: DataFrames and plain values in, words and plain values out; no DuckDB, no Dagster. Every
threshold miss is named the same way everywhere (report, check description, gate refusal):
`multi_hop / candidate: ndcg@10 = 0.642 < 0.700 (-0.058)`, the number in brackets being the
margin (value - threshold). Strings that come from traces (segment, variant) are escaped before
they enter Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import pandas as pd

from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import escape_markdown


def _plain(text: object) -> str:
    return str(text)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
    """One metric of one segment and variant below its threshold."""

    segment: str
    variant: str
    metric: str
    value: float
    threshold: float
    partition: date | None = None

    @property
    def margin(self) -> float:
        return self.value - self.threshold

    def words(self, escape: Callable[[object], str] = _plain, with_day: bool = False) -> str:
        """`multi_hop / candidate: ndcg@10 = 0.642 < 0.700 (-0.058)`."""
        prefix = f"{self.partition.isoformat()} " if with_day and self.partition else ""
        return (
            f"{prefix}{escape(segment_label(self.segment))} / {escape(self.variant)}: "
            f"{escape(self.metric)} = {self.value:.3f} < {self.threshold:.3f} "
            f"({self.margin:+.3f})"
        )


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


def misses_of(rows: pd.DataFrame) -> list[Miss]:
    """The failing rows of a segment-metrics (or regression) table, in report order."""
    if rows.empty:
        return []
    failing = report_order(rows[rows["status"] == "fail"])
    return [
        Miss(
            segment=str(row["segment"]),
            variant=str(row["variant"]),
            metric=str(row["metric"]),
            value=float(row["mean"]),
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
        "passing": int(statuses.get("pass", 0)),
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
            coverage = float(row["coverage"]) if _is_number(row["coverage"]) else 0.0
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
