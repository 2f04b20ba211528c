"""Why the candidate is worse than control on the same queries: the paired queries that make the
difference (docs/why.md, "compare").

Pure: the per-trace table `compare` scores (query_id, segment, variant, a column per metric) and
the comparison's cells in, `PairedWhy`s out. A cell's paired difference is the mean over its
paired queries of (candidate's mean - control's mean), so each paired query contributes its
difference / the number of pairs, and the contributions add up to the cell's delta exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import escape_markdown, markdown_table, number

SHOWN = 10  # paired queries shown per cell


@dataclass(frozen=True)
class PairedContributor:
    """One paired query: each arm's mean over its annotated traces, and its share of the delta."""

    query_id: str
    control_mean: float
    candidate_mean: float
    contribution: float  # (candidate_mean - control_mean) / pairs

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "control_mean": self.control_mean,
            "candidate_mean": self.candidate_mean,
            "difference": self.candidate_mean - self.control_mean,
            "contribution": self.contribution,
        }


@dataclass(frozen=True)
class PairedWhy:
    """The paired queries that moved one cell (segment, metric) most, in the delta's direction."""

    segment: str
    metric: str
    pairs: int
    delta: float
    contributors: tuple[PairedContributor, ...]

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
        return (
            f"{escape(segment_label(self.segment))} / {escape(self.metric)}: candidate - control = "
            f"{number(self.delta, signed=True)} over {self.pairs} paired queries; most of it "
            f"from {top}; the top {len(self.contributors)} explain "
            f"{number(self.top_share, percent=True)}"
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
        return f"- {self.line(escape_markdown)}.\n\n" + markdown_table(header, rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "metric": self.metric,
            "pairs": self.pairs,
            "delta": self.delta,
            "top_share": self.top_share,
            "contributors": [c.to_dict() for c in self.contributors],
            "words": self.line(),
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


def why_markdown(found: Iterable[PairedWhy]) -> list[str]:
    """The comparison report's Markdown lines on the paired queries (none without a cell)."""
    parts = [w.markdown() for w in found]
    if not parts:
        return []
    return ["", "## Why: the paired queries", "", "\n\n".join(parts)]
