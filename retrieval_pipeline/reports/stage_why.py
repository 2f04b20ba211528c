"""Why a reranker stage finding moved: first-stage retrieval against reranking, per query.

A finding is a reranker output mean below its `[stages] thresholds` floor (segment, variant,
metric), a reranker gain below `[stages] min_gain` (segment, metric, every variant), or a
significant drop of the output against the baseline that passes its floor (`stage_drops`). Its Why
splits the change of the reranker output's mean from the baseline window to the day, exactly,
into **first stage** (the reranker's input moved), **reranking** (what the reranker made of its
input moved), traffic mix, new queries and the remainder (rounding), from the rows of
sql/attr_stage_changes.sql; and names the queries where the reranker **demoted** relevant
documents on the day: its output scored below its input against the same labels (docs/why.md,
"The reranker's stages").

Pure: those rows in (read by `warehouse.stage_why`), `StageWhy`s out, with their Markdown and
JSON forms and the lines in words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from retrieval_pipeline.intervals import bounded_mean_interval
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import escape_markdown, finite, markdown_table, number

SHOWN = 10  # queries shown per finding, each list
EVERY_VARIANT = "__every_variant__"  # a gain finding's variant: the gain pools every variant
ROUNDING = 1e-12
STAGE_CAUSES: dict[str, str] = {
    "first stage": "first-stage retrieval (the reranker's input moved)",
    "reranking": "reranking (what the reranker made of its input moved)",
    "traffic mix": "traffic mix (more or less of hard queries, queries gone)",
    "new queries": "new queries (not in the baseline)",
    "remainder": "remainder (rounding)",
}
StageFinding = tuple[str, str, str, str]  # segment, variant (or EVERY_VARIANT), metric, kind


@dataclass(frozen=True)
class StageQuery:
    """One query's reranker spans: its input and output means on the day (and in the baseline
    where it was there), its share of the day's spans, and its parts of the output's change."""

    query_id: str
    day_spans: int
    base_spans: int
    day_input: float | None
    day_output: float | None
    base_input: float | None
    base_output: float | None
    day_share: float
    first_stage: float
    reranking: float
    mix: float
    new_part: float

    @property
    def contribution(self) -> float:
        return self.first_stage + self.reranking + self.mix + self.new_part

    @property
    def day_gain(self) -> float | None:
        if self.day_output is None or self.day_input is None:
            return None
        return self.day_output - self.day_input

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "day_spans": self.day_spans,
            "baseline_spans": self.base_spans,
            "day_input": self.day_input,
            "day_output": self.day_output,
            "baseline_input": self.base_input,
            "baseline_output": self.base_output,
            "day_share": self.day_share,
            "first_stage": self.first_stage,
            "reranking": self.reranking,
            "mix": self.mix,
            "new": self.new_part,
            "contribution": self.contribution,
            "day_gain": self.day_gain,
        }


@dataclass(frozen=True)
class StageWhy:
    """Why one reranker finding moved: the output's change split into causes (None without a
    baseline), the queries that moved it most, and the queries where the reranker demoted."""

    segment: str
    variant: str
    metric: str
    kind: str  # "floor" (the output mean), "gain" or "drop" (against the baseline)
    day_output: float
    day_input: float
    base_output: float | None
    causes: tuple[tuple[str, float], ...]  # STAGE_CAUSES order; () without a baseline
    contributors: tuple[StageQuery, ...]
    demoted: tuple[StageQuery, ...]  # the day's gain < 0, most of the day's gain lost first
    demoted_queries: int = 0  # every query whose gain on the day is below 0 (SHOWN listed)

    @property
    def change(self) -> float | None:
        return None if self.base_output is None else self.day_output - self.base_output

    def share(self, value: float) -> float | None:
        return value / self.change if self.change else None

    def title(self, escape: Any = str) -> str:
        who = "every variant" if self.variant == EVERY_VARIANT else escape(self.variant)
        what = {"gain": "reranker gain", "drop": "reranker output dropped"}.get(
            self.kind, "reranker output"
        )
        return f"{what} {escape(segment_label(self.segment))} / {who}: {escape(self.metric)}"

    def largest_cause(self) -> tuple[str, float] | None:
        named = [(n, v) for n, v in self.causes if n not in ("new queries", "remainder")]
        if not named or self.change is None:
            return None
        sign = 1.0 if self.change >= 0 else -1.0
        return max(named, key=lambda item: sign * item[1])

    def lines(self, escape: Any = str) -> list[str]:
        """The output's change and its largest cause; the queries the reranker demoted."""
        gain = self.day_output - self.day_input
        head = (
            f"{self.title(escape)}: the reranker's input {number(self.day_input)} -> output "
            f"{number(self.day_output)} (gain {number(gain, signed=True)}) on the day"
        )
        largest = self.largest_cause()
        if self.change is None or largest is None:
            first = head + "; no baseline spans to split the output's change."
        else:
            assert self.base_output is not None
            causes = ", ".join(
                f"{n} {number(v, signed=True)} ({number(self.share(v), percent=True)})"
                for n, v in sorted(self.causes, key=lambda item: -abs(item[1]))
                if abs(self.share(v) or 0.0) >= 0.01
            )
            first = (
                f"{head}; output {number(self.base_output)} -> {number(self.day_output)} "
                f"({number(self.change, signed=True)}) against the baseline: largest cause "
                f"{STAGE_CAUSES[largest[0]]}, {number(largest[1], signed=True)} "
                f"({number(self.share(largest[1]), percent=True)}); causes: {causes}."
            )
        if not self.demoted:
            return [first, "The reranker demoted no query's relevant documents on the day."]
        named = ", ".join(
            f"{escape(q.query_id)} (input {number(q.day_input)} -> output {number(q.day_output)})"
            for q in self.demoted[:3]
        )
        count = self.demoted_queries
        second = (
            f"The reranker demoted relevant documents in {count} "
            f"{'query' if count == 1 else 'queries'} (its output below its input), most in: "
            f"{named}."
        )
        return [first, second]

    def markdown(self) -> str:
        header = ["query", "spans day / baseline", "input -> output (day)", "output baseline"]
        header += ["first stage", "reranking", "mix", "contribution"]
        rows = [
            [
                q.query_id,
                f"{q.day_spans} / {q.base_spans}",
                f"{number(q.day_input)} -> {number(q.day_output)}",
                number(q.base_output),
                number(q.first_stage, signed=True),
                number(q.reranking, signed=True),
                number(q.mix, signed=True),
                number(q.contribution, signed=True),
            ]
            for q in (self.contributors or self.demoted)
        ]
        lines = "\n".join(f"- {line}" for line in self.lines(escape_markdown))
        heading = f"### Why: {self.title(escape_markdown)}"
        parts = [heading, lines, markdown_table(header, rows)] if rows else [heading, lines]
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "variant": None if self.variant == EVERY_VARIANT else self.variant,
            "metric": self.metric,
            "kind": self.kind,
            "day_input": self.day_input,
            "day_output": self.day_output,
            "baseline_output": self.base_output,
            "change": self.change,
            "causes": [
                {"cause": n, "value": v, "share": self.share(v), "words": STAGE_CAUSES[n]}
                for n, v in self.causes
            ],
            "contributors": [q.to_dict() for q in self.contributors],
            "demoted": [q.to_dict() for q in self.demoted],
            "demoted_queries": self.demoted_queries,
            "lines": self.lines(),
        }


def stage_findings(
    means: pd.DataFrame,
    gains: pd.DataFrame,
    floors: Mapping[str, Mapping[str, float]],
    min_gain: Mapping[str, float],
) -> list[StageFinding]:
    """The reranker findings of a day's stage rows, as `gate.stage_verdict` judges them: each
    output mean (stage `reranker`) below its floor, each gain below its `min_gain`; a missing
    value has nothing to explain."""
    found: list[StageFinding] = []
    for row in means.to_dict(orient="records") if len(means) else []:
        floor = floors.get("reranker", {}).get(str(row["metric"]))
        value = finite(row["mean"])
        if row["stage"] == "reranker" and floor is not None and value is not None and value < floor:
            found.append((str(row["segment"]), str(row["variant"]), str(row["metric"]), "floor"))
    for row in gains.to_dict(orient="records") if len(gains) else []:
        least = min_gain.get(str(row["metric"]))
        value = finite(row["gain"])
        if least is not None and value is not None and value < least:
            found.append((str(row["segment"]), EVERY_VARIANT, str(row["metric"]), "gain"))
    return found


def stage_drops(levels: pd.DataFrame, findings: Sequence[StageFinding]) -> list[StageFinding]:
    """The significant drops of the reranker's output (rows of sql/attr_stage_drops.sql): the
    day's whole 95% interval (`intervals.bounded_mean_interval`) below the baseline's mean, as
    the regression report's watch list judges the first stage; those already a floor finding
    left out."""
    known = {f[:3] for f in findings}
    found: list[StageFinding] = []
    for row in levels.to_dict(orient="records") if len(levels) else []:
        key = (str(row["segment"]), str(row["variant"]), str(row["metric"]))
        base, mean = finite(row["base_mean"]), finite(row["day_mean"])
        if key in known or base is None or mean is None:
            continue
        try:
            interval = bounded_mean_interval(int(row["day_n"]), mean, finite(row["day_sd"]))
        except ValueError:  # a metric whose values are not in [0, 1] has no such interval
            continue
        if interval is not None and interval.high < base:
            found.append((*key, "drop"))
    return found


def explain_stages(findings: Sequence[StageFinding], rows: pd.DataFrame) -> tuple[StageWhy, ...]:
    """A `StageWhy` per finding that has spans on the day, from sql/attr_stage_changes.sql."""
    out = []
    for segment, variant, metric, kind in findings:
        mine = rows[
            (rows["segment"] == segment) & (rows["variant"] == variant) & (rows["metric"] == metric)
        ]
        day = mine[mine["day_spans"] > 0]
        if day.empty:
            continue
        out.append(_why((segment, variant, metric, kind), mine, day))
    return tuple(out)


def _why(finding: StageFinding, mine: pd.DataFrame, day: pd.DataFrame) -> StageWhy:
    weights = day["day_spans"] / day["day_spans"].sum()
    day_output = math.fsum(weights * day["day_output"])
    day_input = math.fsum(weights * day["day_input"])
    base_value = finite(mine["base_value"].iloc[0])
    queries = [_query(r) for r in mine.to_dict(orient="records")]
    causes: tuple[tuple[str, float], ...] = ()
    contributors: tuple[StageQuery, ...] = ()
    if base_value is not None:
        sums = {
            "first stage": math.fsum(q.first_stage for q in queries),
            "reranking": math.fsum(q.reranking for q in queries),
            "traffic mix": math.fsum(q.mix for q in queries),
            "new queries": math.fsum(q.new_part for q in queries),
        }
        remainder = (day_output - base_value) - math.fsum(sums.values())
        sums["remainder"] = 0.0 if abs(remainder) <= ROUNDING else remainder
        causes = tuple(sums.items())
        sign = 1.0 if day_output >= base_value else -1.0
        recurring = [q for q in queries if q.day_spans and q.base_spans]
        recurring.sort(key=lambda q: (-sign * (q.contribution), q.query_id))
        contributors = tuple(recurring[:SHOWN])
    lost = [q for q in queries if q.day_spans and (q.day_gain or 0.0) < 0]
    lost.sort(key=lambda q: (q.day_share * (q.day_gain or 0.0), q.query_id))
    return StageWhy(
        *finding,
        day_output=day_output,
        day_input=day_input,
        base_output=base_value,
        causes=causes,
        contributors=contributors,
        demoted=tuple(lost[:SHOWN]),
        demoted_queries=len(lost),
    )


def _query(row: Mapping[str, Any]) -> StageQuery:
    def part(name: str) -> float:
        return finite(row[name]) or 0.0

    return StageQuery(
        query_id=str(row["query_id"]),
        day_spans=int(row["day_spans"]),
        base_spans=int(row["base_spans"]),
        day_input=finite(row["day_input"]),
        day_output=finite(row["day_output"]),
        base_input=finite(row["base_input"]),
        base_output=finite(row["base_output"]),
        day_share=part("day_share"),
        first_stage=part("first_stage"),
        reranking=part("reranking"),
        mix=part("mix"),
        new_part=part("new_part"),
    )


def stage_why_markdown(found: Sequence[StageWhy]) -> list[str]:
    """The Reranker stage section's Why parts (none without a finding)."""
    return [w.markdown() for w in found]


def stage_why_lines(found: Sequence[StageWhy]) -> str:
    """Every finding's lines, for a check's or an asset's metadata."""
    return "\n".join(line for w in found for line in w.lines())
