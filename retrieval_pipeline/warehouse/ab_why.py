"""Why the candidate is worse than control in the nightly's comparison: the paired queries behind
each worse cell of `variant_comparison` (sql/attr_pair_queries.sql), and the cell's delta split
into causes by re-scoring those queries' traces of both arms with control's labels
(sql/attr_pair_traces.sql, `reports.why_causes.split_query` with control as the baseline),
into `ab.why.PairedWhy`s (docs/why.md, "The nightly's variant_comparison").

Knows nothing of Dagster. The paired means run in SQL over the window's `query_metrics`; only
the labels of each cell's top queries' traces (at most `why.SPLIT_QUERIES`, their latest
`why.TRACES_PER_SIDE` traces an arm, within `why.SPLIT_TRACES`) come back to Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

import duckdb
import pandas as pd

from retrieval_pipeline.ab.compare import Comparison
from retrieval_pipeline.ab.why import SHOWN, PairedContributor, PairedWhy, worse_cells
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.reports import why
from retrieval_pipeline.reports.why_causes import QueryChange, change_words, split_query
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse.attribution import scoring_of
from retrieval_pipeline.warehouse.session import registered
from retrieval_pipeline.warehouse.sql import load_sql

SPLIT_CAUSES = ("rankings", "labels", "coverage")


def comparison_why(
    conn: duckdb.DuckDBPyConnection, config: PipelineConfig, day: date, comparison: Comparison
) -> tuple[PairedWhy, ...]:
    """A `PairedWhy` of each worse cell of `comparison` (partition `day`'s window), with its
    causes, in the cells' order; () without a worse cell."""
    cells = worse_cells(comparison.cells)
    if not cells:
        return ()
    section = config.comparison
    start, end = section.window(day)
    params: dict[str, object] = {
        "start_date": start,
        "end_date": end,
        "control": section.control,
        "candidate": section.candidate,
        "overall_segment": OVERALL_SEGMENT,
    }
    with registered(conn, "why_cells", pd.DataFrame(cells, columns=["segment", "metric"])):
        top = conn.execute(load_sql("attr_pair_queries"), params | {"top": why.SPLIT_QUERIES}).df()
    if top.empty:
        return ()
    # split_plan's columns: the candidate's traces as the day's, control's as the baseline's
    plan = why.split_plan(
        top.assign(
            variant=section.candidate,
            day_traces=top["candidate_values"],
            base_traces=top["control_values"],
        )
    )
    with registered(conn, "why_pairs", plan[["segment", "metric", "query_id"]]):
        cursor = conn.execute(
            load_sql("attr_pair_traces"), params | {"per_side": why.TRACES_PER_SIDE}
        )
        names = [column[0] for column in cursor.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    traces = why.query_traces(rows)
    found = []
    for segment, metric in cells:
        ranked = top[(top["segment"] == segment) & (top["metric"] == metric)]
        if ranked.empty:
            continue
        scoring = scoring_of(config, metric)
        changes = {
            str(q): split_query(traces[key], scoring)
            for q in ranked["query_id"]
            if (key := (segment, section.candidate, metric, str(q))) in traces
        }
        found.append(_paired_why(segment, metric, ranked.to_dict("records"), changes))
    return tuple(found)


def _paired_why(
    segment: str,
    metric: str,
    ranked: Sequence[Mapping[str, Any]],
    changes: Mapping[str, QueryChange | None],
) -> PairedWhy:
    first = ranked[0]
    pairs = int(first["pairs"])
    delta = float(first["candidate_value"]) - float(first["control_value"])
    weight = 1.0 / pairs
    split = {q: c for q, c in changes.items() if c is not None}
    sums = {
        name: math.fsum(weight * getattr(c, name) for c in split.values()) for name in SPLIT_CAUSES
    }
    remainder = delta - math.fsum(sums.values())
    # a rounding residue (DuckDB sums in parallel) is 0, not a share that flips sign
    sums["remainder"] = 0.0 if abs(remainder) <= why.ROUNDING else remainder
    contributors = []
    for row in ranked[:SHOWN]:
        change = split.get(str(row["query_id"]))
        contributors.append(
            PairedContributor(
                str(row["query_id"]),
                float(row["control_mean"]),
                float(row["candidate_mean"]),
                float(row["contribution"]),
                causes=None
                if change is None
                else {name: weight * getattr(change, name) for name in SPLIT_CAUSES},
                changed=None if change is None else change_words(change),
                fell=() if change is None else tuple(m.to_dict() for m in change.fell),
            )
        )
    return PairedWhy(
        segment,
        metric,
        pairs,
        delta,
        tuple(contributors),
        causes=tuple(sums.items()),
        split_queries=len(split),
    )
