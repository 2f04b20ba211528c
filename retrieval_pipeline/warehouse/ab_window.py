"""The A/B comparison's window, aggregated in the warehouse: no per-trace row reaches Python.

`read_window` runs `sql/rpt_comparison_window.sql` (what the window holds and each day's level of
each arm), then `rpt_comparison_pairs` (the paired differences per segment and metric) and
`rpt_comparison_coverage` (the counts), and hands `ab.day.compare_window` a `WindowData`, with
the partition day's own threshold misses from `segment_metrics`, the table the regression report
reads (`gate.misses_of`: the same misses in the same words).
"""

from __future__ import annotations

from datetime import date
from typing import NamedTuple

import duckdb
import numpy as np

from retrieval_pipeline.ab.compare import ComparisonData, SegmentCoverage, judged_shares
from retrieval_pipeline.ab.day import WindowData, arms_present
from retrieval_pipeline.ab.pairing import choose_metrics, metric_order
from retrieval_pipeline.ab.stats import ArmSummary, PairedDifferences
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.gate import Miss, misses_of
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse.nightly import read_segment_metrics
from retrieval_pipeline.warehouse.sql import load_sql


class WindowGroup(NamedTuple):
    """A row of `sql/rpt_comparison_window.sql`: a day, variant, segment and metric of the
    window, and its annotated values' count, mean, sample standard deviation and range."""

    partition_date: date
    variant: str
    segment: str
    metric: str
    n: int
    mean: float | None
    sd: float | None
    low: float | None
    high: float | None
    not_a_number: int  # NaN values, counted in none of the above


def read_window(conn: duckdb.DuckDBPyConnection, day: date, config: PipelineConfig) -> WindowData:
    """`WindowData` of partition `day`'s window, aggregated in the warehouse (the same numbers as
    `ab.pairing.data_from_long` on the window's rows: `tests/oracles.py`); ValueError when a
    configured metric was not scored there."""
    section = config.comparison
    start, end = section.window(day)
    window = {"start_date": start, "end_date": end}
    groups = [
        WindowGroup(*row)
        for row in conn.execute(load_sql("rpt_comparison_window"), window).fetchall()
    ]
    variants = tuple(sorted({g.variant for g in groups}))
    days = len({g.partition_date for g in groups})
    day_misses = read_day_misses(conn, day)
    if not groups or not arms_present(variants, config):
        return WindowData(days, variants, None, day_misses)
    arms = (section.control, section.candidate)
    metrics = choose_metrics(metric_order(sorted({g.metric for g in groups})), config.metrics)
    # as the pandas pairing sees them: the rows of the compared metrics only
    scored = [g for g in groups if g.metric in metrics]
    segments = tuple(sorted({g.segment for g in scored if g.variant in arms}))
    arm_params = window | {
        "control": section.control,
        "candidate": section.candidate,
    }
    pairs: dict[tuple[str, str], PairedDifferences] = {}
    for metric in metrics:
        found = conn.execute(
            load_sql("rpt_comparison_pairs"), arm_params | {"metric": metric}
        ).fetchnumpy()
        for segment, control, candidate, differences in zip(
            found["segment"],
            found["control_mean"],
            found["candidate_mean"],
            found["differences"],
            strict=True,
        ):
            pairs[(str(segment), metric)] = PairedDifferences(
                float(control), float(candidate), np.asarray(differences, dtype=float)
            )
    # each arm's level: its days' summaries pooled per segment, and over every segment
    parts: dict[tuple[str, str, str], list[ArmSummary]] = {}
    for g in scored:
        if g.variant in arms and g.n > 0:
            day_level = ArmSummary(g.n, g.mean, g.sd, g.low, g.high)
            for segment in (g.segment, OVERALL_SEGMENT):
                parts.setdefault((segment, g.metric, g.variant), []).append(day_level)
    levels = {key: ArmSummary.pooled(found) for key, found in parts.items()}
    not_a_number: dict[tuple[str, str, str], int] = {}
    for g in scored:
        if g.variant in arms and g.not_a_number:
            for segment in (g.segment, OVERALL_SEGMENT):
                key = (segment, g.metric, g.variant)
                not_a_number[key] = not_a_number.get(key, 0) + g.not_a_number
    # a day's traces are its rows of any one of its metrics (sql/rpt_comparison_coverage.sql)
    coverage_metric: dict[date, str] = {}
    for partition, metric in sorted({(g.partition_date, g.metric) for g in scored}):
        coverage_metric.setdefault(partition, metric)
    coverage_params = arm_params | {
        "coverage_days": list(coverage_metric),
        "coverage_metrics": list(coverage_metric.values()),
    }
    coverage = {
        str(row[0]): SegmentCoverage(str(row[0]), *(int(value) for value in row[1:]))
        for row in conn.execute(load_sql("rpt_comparison_coverage"), coverage_params).fetchall()
    }
    # each arm's judged share of its top K, from the coverage metric's rows (not compared)
    judged_metric = config.coverage_metric()
    judged = judged_shares(
        ((g.segment, g.variant, g.n, g.mean) for g in groups if g.metric == judged_metric),
        section.control,
        section.candidate,
    )
    data = ComparisonData(
        control=section.control,
        candidate=section.candidate,
        metrics=metrics,
        variants=tuple(sorted({g.variant for g in scored})),
        segments=segments,
        pairs=pairs,
        levels=levels,
        coverage=coverage,
        not_a_number=not_a_number,
        judged_metric=judged_metric if judged else None,
        judged=judged,
    )
    return WindowData(days, variants, data, day_misses)


def read_day_misses(conn: duckdb.DuckDBPyConnection, day: date) -> tuple[Miss, ...]:
    """Partition `day`'s own threshold misses, as its regression report names them: from the
    day's `segment_metrics` rows, whose status the regression rows copy (none if not built)."""
    return tuple(misses_of(read_segment_metrics(conn, day, day)))
