"""Why a segment's mean moved: for each threshold miss and significant drop of the day's report,
the queries that moved it most, what changed in them, and the change split into causes.

Pure: the rows of sql/attr_finding_parts.sql, sql/attr_top_queries.sql and
sql/attr_query_traces.sql in (read by `warehouse.attribution`), `Explanation`s out, with their
Markdown, JSON and metadata forms. Definitions and their reasons: docs/why.md.

change = day mean - baseline mean = rankings + labels + coverage + traffic mix + new queries +
remainder, exactly: the first three are the split recurring queries' changes re-scored
(`why_causes`), weighted by their share of the day's traces; traffic mix and new queries are
exact over every query (sql/attr_query_changes.sql); the remainder is what is left: the
within-query change of the recurring queries not split (beyond SPLIT_QUERIES, or past the
SPLIT_TRACES a day reads beyond the queries shown), for a query with more than TRACES_PER_SIDE
traces a side the difference between its latest traces' change and its whole change, and
rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from retrieval_pipeline.reports.why_causes import (
    QueryChange,
    QueryTrace,
    Scoring,
    change_words,
    ranking_from_labels,
    split_query,
    with_entered,
)
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import escape_markdown, finite, markdown_table, number

SHOWN = 10  # contributors shown per finding; the top-ten share is theirs
SPLIT_QUERIES = 100  # recurring queries per finding whose change is split into causes
TRACES_PER_SIDE = 25  # the latest traces of a query per side (day, baseline) that a split reads
# the traces a day's split reads for queries beyond those shown: with TRACES_PER_SIDE, what
# bounds the attribution's cost whatever the traffic (queries beyond it are left unsplit)
SPLIT_TRACES = 5_000
ROUNDING = 1e-12  # a remainder this small is the sums' rounding: shown as 0

CAUSES: dict[str, str] = {
    "rankings": "rankings (same labels, another order)",
    "labels": "labels (new, changed or stale)",
    "coverage": "coverage (unjudged documents above judged ones: judged@k fell)",
    "traffic mix": "traffic mix (more or less of hard queries, queries gone)",
    "new queries": "new queries (not in the baseline)",
    "remainder": "remainder (recurring queries not split, sampling, rounding)",
}

FindingKey = tuple[str, str, str]  # segment, variant, metric


@dataclass(frozen=True)
class Contributor:
    """A recurring query and how much it moved the mean: contribution = within + mix, where
    within = its share of the day's traces x its change against its own baseline."""

    place: int
    query_id: str
    day_traces: int
    base_traces: int
    day_mean: float
    base_mean: float
    day_share: float
    base_share: float
    within: float
    mix: float
    change: QueryChange | None = None

    @property
    def contribution(self) -> float:
        return self.within + self.mix

    def parts(self) -> dict[str, float] | None:
        """Its within change split into causes, weighted by its share of the day's traces."""
        if self.change is None:
            return None
        c = self.change
        w = self.day_share
        return {"rankings": w * c.rankings, "labels": w * c.labels, "coverage": w * c.coverage}

    def what_changed(self, escape: Callable[[str], str] = str) -> str:
        """The relevant documents that left the top k and the unjudged ones that entered it."""
        return "not split" if self.change is None else change_words(self.change, escape)

    def to_dict(self) -> dict[str, Any]:
        return {
            "place": self.place,
            "query_id": self.query_id,
            "day_traces": self.day_traces,
            "baseline_traces": self.base_traces,
            "day_mean": self.day_mean,
            "baseline_mean": self.base_mean,
            "day_share": self.day_share,
            "baseline_share": self.base_share,
            "within": self.within,
            "mix": self.mix,
            "contribution": self.contribution,
            "causes": self.parts(),
            "fell": [] if self.change is None else [m.to_dict() for m in self.change.fell],
            "entered": [] if self.change is None else [m.to_dict() for m in self.change.entered],
            "stale_now": [] if self.change is None else list(self.change.stale_now),
            "depth": None if self.change is None else self.change.depth,
        }


@dataclass(frozen=True)
class Explanation:
    """Why one finding (a miss or a watch) moved: contributors, new queries and causes."""

    segment: str
    variant: str
    metric: str
    kind: str  # "miss" or "watch"
    day_value: float
    base_value: float
    contributors: tuple[Contributor, ...]
    causes: tuple[tuple[str, float], ...]  # CAUSES order, the remainder last
    recurring_queries: int
    split_queries: int
    new_queries: int
    new_traces: int
    new_day_mean: float | None
    gone_queries: int

    @property
    def change(self) -> float:
        return self.day_value - self.base_value

    @property
    def top_share(self) -> float | None:
        """The share of the change the contributors shown explain (None: no change)."""
        if not self.change:
            return None
        return math.fsum(c.contribution for c in self.contributors) / self.change

    def share(self, value: float) -> float | None:
        return value / self.change if self.change else None

    def largest_cause(self) -> tuple[str, float]:
        """The cause that moved the mean furthest in the change's direction; new queries (no
        baseline of their own to say why) and the remainder are not causes to lead with."""
        named = [(n, v) for n, v in self.causes if n not in ("new queries", "remainder")]
        sign = 1.0 if self.change >= 0 else -1.0
        return max(named, key=lambda item: sign * item[1])

    def title(self, escape: Callable[[str], str] = str) -> str:
        return (
            f"{escape(segment_label(self.segment))} / {escape(self.variant)}: "
            f"{escape(self.metric)} {number(self.base_value)} -> {number(self.day_value)} "
            f"({number(self.change, signed=True)})"
        )

    def causes_text(self) -> str:
        """The causes of at least 1% of the change, largest first, and how many are smaller."""
        shares = [(name, value, self.share(value) or 0.0) for name, value in self.causes]
        large = sorted((c for c in shares if abs(c[2]) >= 0.01), key=lambda c: -abs(c[2]))
        words = [
            f"{name} {number(value, signed=True)} ({number(share, percent=True)})"
            for name, value, share in large
        ]
        small = len(shares) - len(large)
        if small:
            words.append(f"{small} other{'s' if small > 1 else ''} under 1% each")
        return ", ".join(words)

    def lines(self, escape: Callable[[str], str] = str) -> list[str]:
        """Three lines a person can act on: the change and its largest cause; the queries that
        moved it most; what changed in the first of them."""
        name, value = self.largest_cause()
        first = (
            f"{self.title(escape)}: largest cause {CAUSES[name]}, {number(value, signed=True)} "
            f"({number(self.share(value), percent=True)} of the change); causes: "
            f"{self.causes_text()}."
        )
        if not self.contributors:
            return [first, "No recurring query: each of the day's queries is new."]
        top = ", ".join(
            f"{escape(c.query_id)} ({number(c.contribution, signed=True)})"
            for c in self.contributors[:3]
        )
        second = (
            f"Queries that moved it most: {top}; the top {len(self.contributors)} explain "
            f"{number(self.top_share, percent=True)} of the change"
            + (
                f"; {self.new_queries} new {'query' if self.new_queries == 1 else 'queries'} "
                f"({self.new_traces} traces, day mean "
                f"{number(self.new_day_mean)})."
                if self.new_queries
                else "."
            )
        )
        lead = self.contributors[0]
        third = f"In {escape(lead.query_id)}: {lead.what_changed(escape)}."
        return [first, second, third]

    def markdown(self) -> str:
        header = ["#", "query", "traces day / baseline", "mean baseline -> day", "contribution"]
        header += ["rankings", "labels", "coverage", "mix", "what changed"]
        rows = []
        for c in self.contributors:
            parts = c.parts() or {}
            rows.append(
                [
                    c.place,
                    c.query_id,
                    f"{c.day_traces} / {c.base_traces}",
                    f"{number(c.base_mean)} -> {number(c.day_mean)}",
                    number(c.contribution, signed=True),
                    *(
                        number(parts.get(k), signed=True)
                        for k in ("rankings", "labels", "coverage")
                    ),
                    number(c.mix, signed=True),
                    c.what_changed(),
                ]
            )
        heading = f"### {self.kind.capitalize()}: {self.title(escape_markdown)}"
        lines = "\n".join(f"- {line}" for line in self.lines(escape_markdown))
        return "\n\n".join(
            [heading, lines, markdown_table(header, rows)] if rows else [heading, lines]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "variant": self.variant,
            "metric": self.metric,
            "kind": self.kind,
            "day_value": self.day_value,
            "baseline_value": self.base_value,
            "change": self.change,
            "causes": [
                {"cause": n, "value": v, "share": self.share(v), "words": CAUSES[n]}
                for n, v in self.causes
            ],
            "top_share": self.top_share,
            "recurring_queries": self.recurring_queries,
            "split_queries": self.split_queries,
            "new_queries": {
                "queries": self.new_queries,
                "traces": self.new_traces,
                "day_mean": self.new_day_mean,
            },
            "gone_queries": self.gone_queries,
            "contributors": [c.to_dict() for c in self.contributors],
            "lines": self.lines(),
        }


def why_markdown(explanations: Sequence[Explanation]) -> list[str]:
    """The report's "Why" section: one part per finding (none without findings)."""
    if not explanations:
        return []
    intro = (
        "## Why\n\nPer finding: the change split into causes (they add up to it; docs/why.md), "
        f"the queries that moved it most (at most {SHOWN}) and what changed in them."
    )
    return [intro, *(e.markdown() for e in explanations)]


def why_lead(explanations: Sequence[Explanation]) -> list[str]:
    """Each miss's three lines (`Explanation.lines`), for the top of the report."""
    misses = [e for e in explanations if e.kind == "miss"]
    if not misses:
        return []
    return [
        "**Why** (in full under Why, below):\n"
        + "\n".join(f"- {line}" for e in misses for line in e.lines(escape_markdown))
    ]


def why_table(explanations: Sequence[Explanation]) -> str:
    """A small Markdown table for the report asset's metadata: one row per finding."""
    rows = []
    for e in explanations:
        name, value = e.largest_cause()
        rows.append(
            [
                e.title(),
                f"{name} {number(e.share(value), percent=True)}",
                ", ".join(c.query_id for c in e.contributors[:3]),
                number(e.top_share, percent=True),
            ]
        )
    return markdown_table(["finding", "largest cause", "top queries", "top ten explain"], rows)


def query_traces(
    rows: Iterable[Mapping[str, Any]], tops: Mapping[str, Sequence[str]] | None = None
) -> dict[tuple[str, str, str, str], list[QueryTrace]]:
    """The rows of sql/attr_query_traces.sql per (segment, variant, metric, query), as
    `QueryTrace`s: the ranking rebuilt from the labels' ranks (`ranking_from_labels`), the
    fresh labels (the stale ones removed), and the day's served top k from `tops` (trace id ->
    ids, sql/attr_day_top.sql) where given."""
    out: dict[tuple[str, str, str, str], list[QueryTrace]] = {}
    served = tops or {}
    for row in rows:
        stale = {str(d) for d in row["stale_ids"]}
        every = list(
            zip(map(str, row["label_ids"]), row["label_grades"], row["label_ranks"], strict=True)
        )
        labels = {doc: float(grade) for doc, grade, _ in every if doc not in stale}
        key = (str(row["segment"]), str(row["variant"]), str(row["metric"]), str(row["query_id"]))
        ranking = ranking_from_labels(
            [(doc, _rank_of(rank)) for doc, _, rank in every], int(row["n_retrieved"])
        )
        out.setdefault(key, []).append(
            QueryTrace(
                on_day=bool(row["on_day"]),
                served_at=pd.Timestamp(row["served_at"]).to_pydatetime(),
                retrieved=ranking,
                labels=labels,
                value=float(row["value"]),
                stale=tuple(sorted(stale)),
                top=tuple(str(d) for d in served.get(str(row["trace_id"]), ())),
            )
        )
    return out


def served_ids_wanted(explanations: Iterable[Explanation]) -> list[tuple[str, str, str, str]]:
    """(segment, variant, metric, query) of each contributor shown whose coverage part moved
    the mean in the change's direction: the queries whose unjudged documents now in the top k
    are worth naming (and the day's id lists worth reading: docs/why.md)."""
    return [
        (e.segment, e.variant, e.metric, c.query_id)
        for e in explanations
        for c in e.contributors
        if c.change is not None and c.change.coverage * e.change > 0
    ]


def with_served_ids(
    explanations: Iterable[Explanation],
    traces: Mapping[tuple[str, str, str, str], Sequence[QueryTrace]],
) -> tuple[Explanation, ...]:
    """`explanations` with the unjudged documents now in the top k of each contributor whose
    traces (`query_traces` with the day's served ids) are in `traces`."""
    out = []
    for e in explanations:
        contributors = tuple(
            replace(c, change=with_entered(c.change, traces[key]))
            if c.change is not None
            and (key := (e.segment, e.variant, e.metric, c.query_id)) in traces
            else c
            for c in e.contributors
        )
        out.append(replace(e, contributors=contributors))
    return tuple(out)


def split_plan(top: pd.DataFrame) -> pd.DataFrame:
    """The rows of `top` (sql/attr_top_queries.sql) whose traces are read and split: every
    query shown (place <= SHOWN), then the others by place across findings while the traces
    they read (at most TRACES_PER_SIDE a side) fit in SPLIT_TRACES."""
    shown = top["place"] <= SHOWN
    reads = top["day_traces"].clip(upper=TRACES_PER_SIDE) + top["base_traces"].clip(
        upper=TRACES_PER_SIDE
    )
    rest = top[~shown].assign(reads=reads[~shown])
    rest = rest.sort_values(["place", "segment", "variant", "metric"], kind="stable")
    fits = rest["reads"].cumsum() <= SPLIT_TRACES
    return pd.concat([top[shown], rest[fits].drop(columns="reads")])


def _rank_of(value: object) -> int | None:
    rank = finite(value, numbers_only=True)
    return None if rank is None else int(rank)


def explain(
    findings: Iterable[tuple[str, str, str, str]],
    parts: pd.DataFrame,
    top: pd.DataFrame,
    traces: Mapping[tuple[str, str, str, str], Sequence[QueryTrace]],
    scorings: Mapping[str, Scoring],
) -> tuple[Explanation, ...]:
    """One `Explanation` per finding (segment, variant, metric, kind) that has a baseline: its
    parts (attr_finding_parts rows), its top queries (attr_top_queries rows, `place` order)
    and their traces (`query_traces`), each metric re-scored as `scorings[metric]` says."""
    by_key = {(r["segment"], r["variant"], r["metric"]): r for r in parts.to_dict("records")}
    tops: dict[FindingKey, list[dict[str, Any]]] = {}
    for row in top.sort_values("place").to_dict(orient="records"):
        tops.setdefault((row["segment"], row["variant"], row["metric"]), []).append(row)
    out = []
    for segment, variant, metric, kind in findings:
        key = (segment, variant, metric)
        row = by_key.get(key)
        if row is None or not all(
            finite(v, numbers_only=True) is not None for v in (row["day_value"], row["base_value"])
        ):
            continue
        contributors = [
            _contributor(r, traces.get((*key, str(r["query_id"])), ()), scorings[metric])
            for r in tops.get(key, [])
        ]
        out.append(_explanation(key, kind, row, contributors))
    return tuple(out)


def _contributor(
    row: Mapping[str, Any], traces: Sequence[QueryTrace], scoring: Scoring
) -> Contributor:
    return Contributor(
        place=int(row["place"]),
        query_id=str(row["query_id"]),
        day_traces=int(row["day_traces"]),
        base_traces=int(row["base_traces"]),
        day_mean=float(row["day_mean"]),
        base_mean=float(row["base_mean"]),
        day_share=float(row["day_share"]),
        base_share=float(row["base_share"]),
        within=float(row["within"]),
        mix=float(row["mix"]),
        change=split_query(traces, scoring) if traces else None,
    )


def _explanation(
    key: FindingKey, kind: str, row: Mapping[str, Any], contributors: list[Contributor]
) -> Explanation:
    split = [c for c in contributors if c.change is not None]
    sums = {
        name: math.fsum((c.parts() or {})[name] for c in split)
        for name in ("rankings", "labels", "coverage")
    }
    change = float(row["day_value"]) - float(row["base_value"])
    sums["traffic mix"] = float(row["mix"])
    sums["new queries"] = float(row["new_part"])
    remainder = change - math.fsum(sums.values())
    # a rounding residue (DuckDB sums in parallel: the last bits differ from run to run) is 0,
    # not a share of the change that flips sign between two runs of the same day
    sums["remainder"] = 0.0 if abs(remainder) <= ROUNDING else remainder
    new_mean = row["new_day_mean"]
    return Explanation(
        segment=key[0],
        variant=key[1],
        metric=key[2],
        kind=kind,
        day_value=float(row["day_value"]),
        base_value=float(row["base_value"]),
        contributors=tuple(contributors[:SHOWN]),
        causes=tuple((name, sums[name]) for name in CAUSES),
        recurring_queries=int(row["recurring_queries"]),
        split_queries=len(split),
        new_queries=int(row["new_queries"]),
        new_traces=int(row["new_traces"]),
        new_day_mean=finite(new_mean, numbers_only=True),
        gone_queries=int(row["gone_queries"]),
    )
