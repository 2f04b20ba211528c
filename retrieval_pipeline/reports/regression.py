"""The regression report of one partition against its baseline: Markdown and JSON, from the
day's `regression_report` rows.

Pure: DataFrames and plain values in, Markdown and JSON out; no DuckDB, no Dagster. Misses are
named as `gate.Miss` words them; strings that come from traces (segment, variant) are escaped
before they enter Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.gate import Miss, misses_of, report_order, window_text
from retrieval_pipeline.reports import judged
from retrieval_pipeline.reports.stage_why import StageWhy, stage_why_markdown
from retrieval_pipeline.reports.stages import StageRows, stages_dict, stages_markdown
from retrieval_pipeline.reports.why import Explanation, why_lead, why_markdown
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import (
    MISSING,
    escape_markdown,
    finite,
    json_text,
    markdown_table,
    number,
)


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


def _insufficient(rows: pd.DataFrame) -> list[tuple[str, str, int, int]]:
    if rows.empty:
        return []
    short = rows[rows["status"] == "insufficient"]
    groups = short.drop_duplicates(["segment", "variant"])
    return [
        (str(r["segment"]), str(r["variant"]), int(r["annotated_traces"]), int(r["min_annotated"]))
        for r in report_order(groups).to_dict(orient="records")
    ]


@dataclass(frozen=True)
class Watch:
    """A significant drop against the baseline that still passes: the day's whole 95% interval
    lies below the baseline, yet the mean is not below its threshold (or there is none)."""

    segment: str
    variant: str
    metric: str
    value: float
    baseline: float
    ci_low: float
    ci_high: float
    threshold: float | None

    @property
    def delta(self) -> float:
        return self.value - self.baseline

    def words(self, escape: Callable[[str], str] = str) -> str:
        still = (
            f"still passes its threshold {number(self.threshold)}"
            if self.threshold is not None
            else "has no threshold"
        )
        return (
            f"{escape(segment_label(self.segment))} / {escape(self.variant)}: "
            f"{escape(self.metric)} = {number(self.value)}, {number(self.delta, signed=True)} "
            f"against its baseline {number(self.baseline)} (95% CI {number(self.ci_low)}.."
            f"{number(self.ci_high)}, all below it); {still}"
        )


def watch_of(rows: pd.DataFrame) -> list[Watch]:
    """The rows whose day is significantly below its baseline but that pass (or have no
    threshold): what a reader should watch before it becomes a miss. Report order."""
    found: list[Watch] = []
    if rows.empty:
        return found
    for row in report_order(rows).to_dict(orient="records"):
        numbers = [row.get(k) for k in ("mean", "baseline", "ci_low", "ci_high")]
        if row["status"] not in ("pass", "no_threshold") or not all(
            finite(v, numbers_only=True) is not None for v in numbers
        ):
            continue
        value, baseline, low, high = (float(v) for v in numbers)
        if high < baseline:
            threshold = finite(row.get("threshold"), numbers_only=True)
            found.append(
                Watch(
                    str(row["segment"]),
                    str(row["variant"]),
                    str(row["metric"]),
                    value,
                    baseline,
                    low,
                    high,
                    threshold,
                )
            )
    return found


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
    coverage_metric: str | None = None  # the judged@K shown beside the annotation coverage
    # (variant, label source, annotated traces): where the day's labels came from
    label_sources: tuple[tuple[str, str, int], ...] = ()
    # (segment, agreement in words): LLM against HUMAN labels of the same documents (a Phoenix
    # store's, docs/phoenix.md); empty: no document graded by both
    agreement: tuple[tuple[str, str], ...] = ()
    # the day's reranker stage means and gains (`warehouse.stages`); None: not read
    stages: StageRows | None = None
    # why each miss and significant drop moved (`warehouse.attribution`, docs/why.md)
    why: tuple[Explanation, ...] = ()
    # why each reranker finding moved: first stage against reranking (`warehouse.stage_why`)
    stage_why: tuple[StageWhy, ...] = ()

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

    def window_and_test(self) -> str:
        """The report's headline: what it compares (the day alone, beside its baseline window)
        and how it decides (each mean against its threshold), in two sentences. The variant
        comparison of the same day pools a window of days; this says which numbers are whose."""
        window = (
            f"Window: the day {self.partition.isoformat()} alone, beside its baseline, "
            f"{self.baseline_text}, {self.baseline_days_with_data()} day(s) with data."
        )
        return (
            f"{window} Test: each segment's mean over the day's annotated traces against its "
            f"threshold, a miss when below it{self._minimum_words()}; change from baseline = the "
            "day's mean - the baseline's, not a test (a mean whose 95% interval lies wholly "
            "below its baseline is listed under Watch)."
        )

    def _minimum_words(self) -> str:
        if self.rows.empty or "min_annotated" not in self.rows.columns:
            return ""
        minimums = sorted({int(k) for k in pd.to_numeric(self.rows["min_annotated"]).dropna()})
        if not minimums or minimums == [0]:
            return ""
        if len(minimums) == 1:
            return f" (no verdict with fewer than {minimums[0]} annotated traces)"
        return " (no verdict below a segment's minimum of annotated traces, min_annotated)"

    def watch(self) -> list[Watch]:
        """Significant drops against the baseline that still pass (`watch_of`)."""
        return watch_of(self.rows)

    def baseline_days_with_data(self) -> int:
        if self.rows.empty:
            return 0
        return int(pd.to_numeric(self.rows["baseline_days"]).max())

    def judged_overall(self) -> dict[str, float]:
        """Each variant's judged share of its top K over every segment (the coverage metric's
        mean), where the day has one."""
        if self.coverage_metric is None:
            return {}
        shares = judged.judged_shares(self.rows, self.coverage_metric)
        return {v: share for (s, v), share in sorted(shares.items()) if s == OVERALL_SEGMENT}

    def judged_warnings(self, escape: Callable[[str], str] = str) -> list[str]:
        """A sentence per segment and variant whose judged share trails another variant's."""
        if self.coverage_metric is None:
            return []
        return judged.segment_gap_warnings(self.rows, self.coverage_metric, escape)

    def headline_values(self) -> dict[str, float]:
        """Each headline metric of each variant's overall row: numbers the UI can plot."""
        out: dict[str, float] = {}
        if self.rows.empty:
            return out
        overall = self.rows[self.rows["segment"] == OVERALL_SEGMENT]
        for row in overall.to_dict(orient="records"):
            if (
                row["metric"] in self.headline_metrics
                and finite(row["mean"], numbers_only=True) is not None
            ):
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
            "window_and_test": self.window_and_test() if self.has_data else None,
            "passed": self.has_data and not self.misses,
            "baseline": {
                "policy": self.baseline_policy,
                "start": self.baseline_start.isoformat(),
                "end": self.baseline_end.isoformat(),
                "days_with_data": self.baseline_days_with_data(),
            },
            "misses": [m.to_dict() for m in self.misses],
            "watch": [
                {
                    "segment": w.segment,
                    "variant": w.variant,
                    "metric": w.metric,
                    "value": w.value,
                    "baseline": w.baseline,
                    "delta": w.delta,
                    "ci_low": w.ci_low,
                    "ci_high": w.ci_high,
                    "threshold": w.threshold,
                    "words": w.words(),
                }
                for w in self.watch()
            ],
            "insufficient": [
                {"segment": s, "variant": v, "annotated_traces": n, "min_annotated": k}
                for s, v, n, k in _insufficient(self.rows)
            ],
            "headline": self.headline_values(),
            "label_sources": [
                {"variant": v, "label_source": s, "annotated_traces": n, "share": share}
                for v, s, n, share in self._source_shares()
            ],
            "label_agreement": [{"segment": s, "words": w} for s, w in self.agreement],
            "judged": {
                "metric": self.coverage_metric,
                "overall": self.judged_overall(),
                "warnings": self.judged_warnings(),
            },
            "stages": None if self.stages is None else stages_dict(*self.stages),
            "why": [e.to_dict() for e in self.why],
            "stage_why": [w.to_dict() for w in self.stage_why],
            "rows": _records(self.rows),
        }

    def to_json(self) -> str:
        return json_text(self.to_dict(), indent=2, ensure_ascii=True) + "\n"

    def labelled_by_judgments(self) -> str | None:
        """How the day's annotated traces were labelled, in words (over every variant), when
        the judgments labelled any: by labels of their own, or by the judgments."""
        if "judged_traces" not in self.rows.columns:
            return None
        overall = self.rows[self.rows["segment"] == OVERALL_SEGMENT]
        per_variant = overall.drop_duplicates(["variant"])
        judged = int(per_variant["judged_traces"].fillna(0).sum())
        if not judged:
            return None
        annotated = int(per_variant["annotated_traces"].sum())
        return (
            f"Annotated traces: {annotated}, of which {annotated - judged} by labels of their own "
            f"and {judged} by the judgments."
        )

    def markdown_table(self) -> str:
        header = ["segment", "variant", "metric", "value", "95% CI", "baseline"]
        header += ["change from baseline", "threshold", "status", "value - threshold"]
        header += ["annotated / traces"]
        rows = []
        for row in self.rows.to_dict(orient="records"):
            ci = (
                f"{number(row['ci_low'])}..{number(row['ci_high'])}"
                if finite(row["ci_low"], numbers_only=True) is not None
                else MISSING
            )
            rows.append(
                [
                    segment_label(str(row["segment"])),
                    row["variant"],
                    row["metric"],
                    number(row["mean"]),
                    ci,
                    number(row["baseline"]),
                    number(row["delta"], signed=True),
                    number(row["threshold"]),
                    "**fail**" if row["status"] == "fail" else row["status"],
                    number(row["margin"], signed=True),
                    f"{int(row['annotated_traces'])} / {int(row['traces'])}",
                ]
            )
        return markdown_table(header, rows)

    def to_markdown(self) -> str:
        title = f"# Retrieval regression report: {self.partition.isoformat()}"
        if not self.has_data:
            return f"{title}\n\nNo data: no traces in this partition.\n"
        parts = [title, self.window_and_test()]
        if self.misses:
            count = len(self.misses)
            parts.append(f"**{count} threshold {'miss' if count == 1 else 'misses'}:**")
            parts.append("\n".join(f"- {m.words(escape_markdown)}" for m in self.misses))
            parts += why_lead(self.why)
        else:
            parts.append("**No threshold misses.**")
        labelled = self.labelled_by_judgments()
        if labelled is not None:
            parts.append(labelled)
        watch = self.watch()
        if watch:
            parts.append(f"**Watch: {watch_heading(len(watch))}:**")
            parts.append("\n".join(f"- {w.words(escape_markdown)}" for w in watch))
        short = _insufficient(self.rows)
        if short:
            names = ", ".join(
                f"{escape_markdown(segment_label(s))} / {escape_markdown(v)} ({n} < {k})"
                for s, v, n, k in short
            )
            parts.append(f"Not enough annotated traces for a verdict: {names}.")
        parts += self._judged_markdown()
        parts.append(self.markdown_table())
        if self.stages is not None:
            parts += stages_markdown(*self.stages)
            parts += stage_why_markdown(self.stage_why)
        parts += why_markdown(self.why)
        return "\n\n".join(parts) + "\n"

    def _source_shares(self) -> list[tuple[str, str, int, float]]:
        totals: dict[str, int] = {}
        for variant, _, n in self.label_sources:
            totals[variant] = totals.get(variant, 0) + n
        return [(v, s, n, n / totals[v]) for v, s, n in self.label_sources if totals[v]]

    def label_sources_text(self, escape: Callable[[str], str] = str) -> str | None:
        """Each label source's share of the annotated traces, per variant, in words."""
        shares = self._source_shares()
        if not shares:
            return None
        per_variant: dict[str, list[str]] = {}
        for variant, source, n, share in shares:
            per_variant.setdefault(variant, []).append(f"{escape(source)} {share:.0%} ({n})")
        return (
            "Label sources of the annotated traces: "
            + "; ".join(
                f"{escape(variant)}: {', '.join(parts)}" for variant, parts in per_variant.items()
            )
            + "."
        )

    def agreement_text(self, escape: Callable[[str], str] = str) -> str | None:
        """The LLM's agreement with people on the documents both graded, per segment."""
        if not self.agreement:
            return None
        return "Agreement of LLM with HUMAN labels of the same documents: " + "; ".join(
            f"{escape(segment_label(s))}: {escape(words)}" for s, words in self.agreement
        )

    def _judged_markdown(self) -> list[str]:
        agreement = self.agreement_text(escape_markdown)
        return self._judged_parts() + ([agreement] if agreement else [])

    def _judged_parts(self) -> list[str]:
        sources = self.label_sources_text(escape_markdown)
        overall = self.judged_overall()
        if not overall or self.coverage_metric is None:
            return [sources] if sources else []
        shares = ", ".join(f"{escape_markdown(v)} {share:.0%}" for v, share in overall.items())
        k = self.coverage_metric.partition("@")[2]
        parts = [
            f"Judged share of the top {k} ({self.coverage_metric}, mean over annotated traces), "
            f"every segment: {shares}."
        ]
        if sources:
            parts.append(sources)
        warnings = self.judged_warnings(escape_markdown)
        if warnings:
            parts.append("\n".join(f"- **Warning:** {w}." for w in warnings))
        return parts


def watch_heading(count: int) -> str:
    drops = "drop" if count == 1 else "drops"
    return f"{count} significant {drops} against the baseline that still pass"


def build_report(
    rows: pd.DataFrame,
    config: PipelineConfig,
    day: date,
    label_sources: tuple[tuple[str, str, int], ...] = (),
    stages: StageRows | None = None,
    agreement: tuple[tuple[str, str], ...] = (),
) -> RegressionReport:
    """The report for `day` from its `regression_report` rows (`sql/rpt_regression.sql`) and,
    where given, its label sources (`warehouse.nightly.label_sources`)."""
    ordered = report_order(rows)
    start, end = config.baseline.window(day)
    return RegressionReport(
        partition=day,
        baseline_policy=config.baseline.policy,
        baseline_start=start,
        baseline_end=end,
        rows=ordered,
        headline_metrics=config.headline_metrics,
        misses=misses_of(ordered),
        coverage_metric=config.coverage_metric(),
        label_sources=label_sources,
        stages=stages,
        agreement=agreement,
    )
