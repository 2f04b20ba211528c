"""The regression report of one partition against its baseline: Markdown and JSON, from the
day's `regression_report` rows.

Pure: DataFrames and plain values in, Markdown and JSON out; no DuckDB, no Dagster. Misses are
named as `gate.Miss` words them; strings that come from traces (segment, variant) are escaped
before they enter Markdown.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import pandas as pd

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.gate import Miss, misses_of, report_order, window_text
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import MISSING, escape_markdown, markdown_table, number


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
        header = ["segment", "variant", "metric", "value", "95% CI", "baseline", "delta"]
        header += ["threshold", "status", "margin", "annotated / traces"]
        rows = []
        for row in self.rows.to_dict(orient="records"):
            ci = (
                f"{number(row['ci_low'])}..{number(row['ci_high'])}"
                if _is_number(row["ci_low"])
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
    )
