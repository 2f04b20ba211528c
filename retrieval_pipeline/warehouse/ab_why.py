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
from retrieval_pipeline.reports.why_causes import (
    QueryChange,
    change_words,
    split_query,
    with_entered,
)
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
    split: list[tuple[str, str, list[dict[str, Any]], dict[str, QueryChange | None]]] = []
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
        split.append((segment, metric, ranked.to_dict("records"), changes))
    _with_served_ids(conn, config, params, rows, split)
    return tuple(_paired_why(*cell) for cell in split)


def _with_served_ids(
    conn: duckdb.DuckDBPyConnection,
    config: PipelineConfig,
    params: Mapping[str, object],
    rows: Sequence[Mapping[str, Any]],
    split: Sequence[tuple[str, str, Sequence[Mapping[str, Any]], dict[str, QueryChange | None]]],
) -> None:
    """The unjudged documents the candidate put in the top k of each query shown whose
    coverage part moved the delta, into `split`'s changes: the candidate's id lists read for
    those queries' traces only (the widest column; none where the warehouse keeps no lists)."""
    wanted: set[tuple[str, str, str]] = set()
    for segment, metric, ranked, changes in split:
        delta = float(ranked[0]["candidate_value"]) - float(ranked[0]["control_value"])
        for row in ranked[:SHOWN]:
            change = changes.get(str(row["query_id"]))
            if change is not None and change.coverage * delta > 0:
                wanted.add((segment, metric, str(row["query_id"])))
    if not wanted:
        return
    kept = [
        r
        for r in rows
        if r["on_day"] and (str(r["segment"]), str(r["metric"]), str(r["query_id"])) in wanted
    ]
    served = pd.DataFrame(
        [(r["partition_date"], r["trace_id"]) for r in kept],
        columns=["partition_date", "trace_id"],
    )
    depth = max(scoring_of(config, metric).depth for _, metric, _ in wanted)
    with registered(conn, "why_pair_served", served):
        window = {"start_date": params["start_date"], "end_date": params["end_date"]}
        cursor = conn.execute(load_sql("attr_pair_top"), {**window, "depth": depth})
        tops = {str(t): list(ids or []) for t, ids in cursor.fetchall()}
    candidate = str(params["candidate"])
    with_ids = why.query_traces(kept, tops)
    for segment, metric, _, changes in split:
        for q, change in changes.items():
            key = (segment, candidate, metric, q)
            if change is not None and (segment, metric, q) in wanted and key in with_ids:
                changes[q] = with_entered(change, with_ids[key])


def _paired_why(
    segment: str,
    metric: str,
    ranked: Sequence[Mapping[str, Any]],
    changes: Mapping[str, QueryChange | None],
) -> PairedWhy:
    """One cell's `PairedWhy` from its ranked queries and their splits (None: not split)."""
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
                entered=() if change is None else tuple(m.to_dict() for m in change.entered),
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
