"""The regression report, the asset checks' verdicts and the deploy gate's decision, from tables.

Pure: DataFrames and plain values in, words, Markdown and JSON out; no DuckDB, no Dagster. Every
threshold miss is named the same way everywhere (report, check description, gate refusal):
`multi_hop / candidate: ndcg@10 = 0.642 < 0.700 (-0.058)`, the number in brackets being the
margin (value - threshold). Strings that come from traces (segment, variant) are escaped before
they enter Markdown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.segments import OVERALL_SEGMENT

STATUS_ORDER = {"fail": 0, "insufficient": 1, "pass": 2, "no_threshold": 3}
MISSING = "-"


def escape_markdown(text: object) -> str:
    """`text` safe inside Markdown (also a table cell): no HTML, no code spans, no cell breaks,
    one line."""
    value = str(text)
    for raw, safe in (
        ("\\", "\\\\"),
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("|", "\\|"),
        ("`", "\\`"),
        ("\r\n", " "),
        ("\n", " "),
        ("\r", " "),
    ):
        value = value.replace(raw, safe)
    return value


def _plain(text: object) -> str:
    return str(text)


def segment_label(segment: str) -> str:
    """How a segment is named in words; the overall row reads `all segments`."""
    return "all segments" if segment == OVERALL_SEGMENT else segment


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _num(value: object, digits: int = 3, signed: bool = False) -> str:
    if not _is_number(value):
        return MISSING
    return f"{float(value):+.{digits}f}" if signed else f"{float(value):.{digits}f}"  # type: ignore[arg-type]


def _clean(value: object) -> object:
    """A JSON-ready scalar: NaN and NaT become null, dates ISO strings, numpy scalars Python."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, object]]:
    return [
        {str(key): _clean(value) for key, value in row.items()}
        for row in frame.to_dict(orient="records")
    ]


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


def _sorted(rows: pd.DataFrame) -> pd.DataFrame:
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
    failing = _sorted(rows[rows["status"] == "fail"])
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


def _insufficient(rows: pd.DataFrame) -> list[tuple[str, str, int, int]]:
    if rows.empty:
        return []
    short = rows[rows["status"] == "insufficient"]
    groups = short.drop_duplicates(["segment", "variant"])
    return [
        (str(r["segment"]), str(r["variant"]), int(r["annotated_traces"]), int(r["min_annotated"]))
        for r in _sorted(groups).to_dict(orient="records")
    ]


@dataclass(frozen=True)
class RegressionReport:
    """One partition against its baseline, per segment, variant and metric."""

    partition: date
    baseline_policy: str
    baseline_start: date
    baseline_end: date
    rows: pd.DataFrame
    headline_metrics: tuple[str, ...] = ()
    misses: list[Miss] = field(default_factory=list)

    @property
    def has_data(self) -> bool:
        return not self.rows.empty

    @property
    def baseline_text(self) -> str:
        window = window_text(self.baseline_start, self.baseline_end)
        if self.baseline_policy == "trailing_days":
            n = (self.baseline_end - self.baseline_start).days + 1
            return f"the trailing {n} days ({window})"
        if self.baseline_policy == "previous_day":
            return f"the previous day ({window})"
        return f"the pinned day {window}"

    def baseline_days_with_data(self) -> int:
        if self.rows.empty:
            return 0
        return int(pd.to_numeric(self.rows["baseline_days"]).max())

    def headline_values(self) -> dict[str, float]:
        """Each headline metric of each variant's overall row: numbers the UI can plot."""
        out: dict[str, float] = {}
        if self.rows.empty:
            return out
        overall = self.rows[self.rows["segment"] == OVERALL_SEGMENT]
        for row in overall.to_dict(orient="records"):
            if row["metric"] in self.headline_metrics and _is_number(row["mean"]):
                out[f"{row['metric']} ({row['variant']})"] = float(row["mean"])
        return dict(sorted(out.items()))

    def summary(self) -> str:
        """One line: how many misses, or that there is no data."""
        if not self.has_data:
            return f"no data for {self.partition.isoformat()}: no traces in this partition"
        if not self.misses:
            return f"{self.partition.isoformat()}: no threshold misses"
        count = len(self.misses)
        noun = "miss" if count == 1 else "misses"
        return f"{self.partition.isoformat()}: {count} threshold {noun}: " + "; ".join(
            m.words() for m in self.misses
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition.isoformat(),
            "has_data": self.has_data,
            "passed": self.has_data and not self.misses,
            "baseline": {
                "policy": self.baseline_policy,
                "start": self.baseline_start.isoformat(),
                "end": self.baseline_end.isoformat(),
                "days_with_data": self.baseline_days_with_data(),
            },
            "misses": [
                {
                    "segment": m.segment,
                    "variant": m.variant,
                    "metric": m.metric,
                    "value": m.value,
                    "threshold": m.threshold,
                    "margin": m.margin,
                    "words": m.words(),
                }
                for m in self.misses
            ],
            "insufficient": [
                {"segment": s, "variant": v, "annotated_traces": n, "min_annotated": k}
                for s, v, n, k in _insufficient(self.rows)
            ],
            "headline": self.headline_values(),
            "rows": _records(self.rows),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    def markdown_table(self) -> str:
        header = (
            "| segment | variant | metric | value | 95% CI | baseline | delta | threshold "
            "| status | margin | annotated / traces |"
        )
        lines = [header, "|" + "---|" * 11]
        for row in self.rows.to_dict(orient="records"):
            ci = (
                f"{_num(row['ci_low'])}..{_num(row['ci_high'])}"
                if _is_number(row["ci_low"])
                else MISSING
            )
            cells = [
                escape_markdown(segment_label(str(row["segment"]))),
                escape_markdown(row["variant"]),
                escape_markdown(row["metric"]),
                _num(row["mean"]),
                ci,
                _num(row["baseline"]),
                _num(row["delta"], signed=True),
                _num(row["threshold"]),
                "**fail**" if row["status"] == "fail" else escape_markdown(row["status"]),
                _num(row["margin"], signed=True),
                f"{int(row['annotated_traces'])} / {int(row['traces'])}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        title = f"# Retrieval regression report: {self.partition.isoformat()}"
        if not self.has_data:
            return f"{title}\n\nNo data: no traces in this partition.\n"
        parts = [
            title,
            f"Baseline: {self.baseline_text}, {self.baseline_days_with_data()} day(s) with data.",
        ]
        if self.misses:
            count = len(self.misses)
            parts.append(f"**{count} threshold {'miss' if count == 1 else 'misses'}:**")
            parts.append("\n".join(f"- {m.words(escape_markdown)}" for m in self.misses))
        else:
            parts.append("**No threshold misses.**")
        short = _insufficient(self.rows)
        if short:
            names = ", ".join(
                f"{escape_markdown(segment_label(s))} / {escape_markdown(v)} ({n} < {k})"
                for s, v, n, k in short
            )
            parts.append(f"Not enough annotated traces for a verdict: {names}.")
        parts.append(self.markdown_table())
        return "\n\n".join(parts) + "\n"


def build_report(rows: pd.DataFrame, config: PipelineConfig, day: date) -> RegressionReport:
    """The report for `day` from its `regression_report` rows (`sql/rpt_regression.sql`)."""
    ordered = _sorted(rows)
    start, end = config.baseline.window(day)
    return RegressionReport(
        partition=day,
        baseline_policy=config.baseline.policy,
        baseline_start=start,
        baseline_end=end,
        rows=ordered,
        headline_metrics=config.headline_metrics,
        misses=misses_of(ordered),
    )


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
        for row in _sorted(groups).to_dict(orient="records"):
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
