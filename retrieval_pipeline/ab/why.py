"""Why the candidate is worse than control on the same queries: the paired queries that make the
difference (docs/why.md, "compare").

Pure: the per-trace table `compare` scores (query_id, segment, variant, a column per metric) and
the comparison's cells in, `PairedWhy`s out. A cell's paired difference is the mean over its
paired queries of (candidate's mean - control's mean), so each paired query contributes its
difference / the number of pairs, and the contributions add up to the cell's delta exactly.

The nightly's `variant_comparison` has the warehouse too: there a `PairedWhy` also carries the
delta split into causes (`PAIRED_CAUSES`, the control arm as the baseline) and, per query shown,
its part of each and the relevant documents that left the top k (`warehouse.ab_why`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import escape_markdown, markdown_table, number

SHOWN = 10  # paired queries shown per cell
# the causes of a nightly cell's delta, in order (docs/why.md, "The nightly's variant_comparison"):
# a paired delta weighs each paired query alike and holds no unpaired query, so it has no traffic
# mix and no new queries
PAIRED_CAUSES: dict[str, str] = {
    "rankings": "rankings (same labels, another order)",
    "labels": "labels (the arms' traces labelled differently: new, changed or stale)",
    "coverage": "coverage (unjudged documents above judged ones)",
    "remainder": "remainder (paired queries not split, sampling, rounding)",
}


@dataclass(frozen=True)
class PairedContributor:
    """One paired query: each arm's mean over its annotated traces, and its share of the delta."""

    query_id: str
    control_mean: float
    candidate_mean: float
    contribution: float  # (candidate_mean - control_mean) / pairs
    # where split (the nightly): its contribution's rankings, labels and coverage parts, which
    # add up to it up to its traces' sampling; the documents that moved, in words and as data
    causes: Mapping[str, float] | None = None
    changed: str | None = None
    fell: tuple[Mapping[str, object], ...] = ()
    entered: tuple[Mapping[str, object], ...] = ()  # unjudged, now in the candidate's top k

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "query_id": self.query_id,
            "control_mean": self.control_mean,
            "candidate_mean": self.candidate_mean,
            "difference": self.candidate_mean - self.control_mean,
            "contribution": self.contribution,
        }
        if self.causes is not None or self.changed is not None:
            found |= {
                "causes": None if self.causes is None else dict(self.causes),
                "what_changed": self.changed,
                "fell": [dict(m) for m in self.fell],
                "entered": [dict(m) for m in self.entered],
            }
        return found


@dataclass(frozen=True)
class PairedWhy:
    """The paired queries that moved one cell (segment, metric) most, in the delta's direction."""

    segment: str
    metric: str
    pairs: int
    delta: float
    contributors: tuple[PairedContributor, ...]
    # the delta split into `PAIRED_CAUSES` (they add up to it), where the warehouse was read
    causes: tuple[tuple[str, float], ...] = ()
    split_queries: int = 0

    def share(self, value: float) -> float | None:
        return value / self.delta if self.delta else None

    def largest_cause(self) -> tuple[str, float] | None:
        """The cause that moved the delta furthest in its direction (the remainder is not one
        to lead with); None where the delta was not split."""
        named = [(n, v) for n, v in self.causes if n != "remainder"]
        if not named:
            return None
        sign = 1.0 if self.delta >= 0 else -1.0
        return max(named, key=lambda item: sign * item[1])

    def causes_words(self) -> str:
        """The causes, largest first, with their shares of the delta."""
        ordered = sorted(self.causes, key=lambda item: -abs(item[1]))
        return ", ".join(
            f"{name} {number(value, signed=True)} ({number(self.share(value), percent=True)})"
            for name, value in ordered
        )

    @property
    def top_share(self) -> float | None:
        """The share of the delta the queries shown explain (None: no delta)."""
        if not self.delta:
            return None
        return math.fsum(c.contribution for c in self.contributors) / self.delta

    def line(self, escape: Callable[[str], str] = str) -> str:
        top = ", ".join(
            f"{escape(c.query_id)} ({number(c.control_mean)} -> {number(c.candidate_mean)})"
            for c in self.contributors[:3]
        )
        largest = self.largest_cause()
        cause = (
            ""
            if largest is None
            else f"; largest cause {PAIRED_CAUSES[largest[0]]}, "
            f"{number(largest[1], signed=True)} ({number(self.share(largest[1]), percent=True)})"
        )
        first = next((c for c in self.contributors if c.changed), None)
        changed = "" if first is None else f"; in {escape(first.query_id)}: {first.changed}"
        return (
            f"{escape(segment_label(self.segment))} / {escape(self.metric)}: candidate - control = "
            f"{number(self.delta, signed=True)} over {self.pairs} paired queries{cause}; most of "
            f"it from {top}; the top {len(self.contributors)} explain "
            f"{number(self.top_share, percent=True)}{changed}"
        )

    def markdown(self) -> str:
        rows = [
            [
                c.query_id,
                number(c.control_mean),
                number(c.candidate_mean),
                number(c.candidate_mean - c.control_mean, signed=True),
                number(c.contribution, signed=True),
            ]
            for c in self.contributors
        ]
        header = ["query", "control", "candidate", "difference", "contribution"]
        if self.causes:
            names = ("rankings", "labels", "coverage")
            header += [*names, "what changed"]
            for row, c in zip(rows, self.contributors, strict=True):
                parts = c.causes or {}
                row += [*(number(parts.get(n), signed=True) for n in names), c.changed or ""]
            causes = f"- Causes: {escape_markdown(self.causes_words())}.\n"
        else:
            causes = ""
        return f"- {self.line(escape_markdown)}.\n{causes}\n" + markdown_table(header, rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "metric": self.metric,
            "pairs": self.pairs,
            "delta": self.delta,
            "top_share": self.top_share,
            "contributors": [c.to_dict() for c in self.contributors],
            "words": self.line(),
            "causes": [
                {"cause": n, "value": v, "share": self.share(v), "words": PAIRED_CAUSES[n]}
                for n, v in self.causes
            ],
            "split_queries": self.split_queries,
        }


def paired_why(
    per_query: pd.DataFrame, control: str, candidate: str, cells: Iterable[tuple[str, str]]
) -> tuple[PairedWhy, ...]:
    """A `PairedWhy` for each (segment, metric) of `cells` that has paired queries: each query's
    traces averaged per arm, as the comparison pairs them (`ab.pairing.data_from_long`)."""
    out = []
    for segment, metric in cells:
        rows = (
            per_query if segment == OVERALL_SEGMENT else per_query[per_query["segment"] == segment]
        )
        values = rows[["query_id", "variant", metric]].astype({"query_id": str, "variant": str})
        values = values[values["variant"].isin([control, candidate])]
        means = values.groupby(["query_id", "variant"])[metric].mean().unstack("variant")
        means = means.reindex(columns=[control, candidate]).dropna()
        if means.empty:
            continue
        difference = means[candidate] - means[control]
        delta = float(difference.mean())
        direction = -1.0 if delta < 0 else 1.0
        order = sorted(difference.index, key=lambda q: (-direction * difference[q], q))
        contributors = tuple(
            PairedContributor(
                str(q),
                float(means.loc[q, control]),
                float(means.loc[q, candidate]),
                float(difference[q]) / len(means),
            )
            for q in order[:SHOWN]
        )
        out.append(PairedWhy(segment, metric, len(means), delta, contributors))
    return tuple(out)


def worse_cells(cells: Iterable[Any]) -> list[tuple[str, str]]:
    """The (segment, metric) of each comparison cell whose candidate is significantly worse or
    fails a threshold control passes: the cells a reader asks why of."""
    return [
        (c.segment, c.metric) for c in cells if c.verdict == "worse" or c.threshold_status == "fail"
    ]


def why_table(found: Iterable[PairedWhy]) -> str:
    """A small Markdown table for the comparison asset's metadata: one row per worse cell."""
    rows = []
    for w in found:
        largest = w.largest_cause()
        rows.append(
            [
                f"{segment_label(w.segment)} / {w.metric}",
                number(w.delta, signed=True),
                "not split"
                if largest is None
                else f"{largest[0]} {number(w.share(largest[1]), percent=True)}",
                ", ".join(c.query_id for c in w.contributors[:3]),
                number(w.top_share, percent=True),
            ]
        )
    header = ["cell", "candidate - control", "largest cause", "top queries", "top ten explain"]
    return markdown_table(header, rows)


def why_markdown(found: Iterable[PairedWhy]) -> list[str]:
    """The comparison report's Markdown lines on the paired queries (none without a cell)."""
    parts = [w.markdown() for w in found]
    if not parts:
        return []
    return ["", "## Why: the paired queries", "", "\n\n".join(parts)]
