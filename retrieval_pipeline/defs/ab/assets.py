"""The A/B comparison in the pipeline: `variant_comparison` compares the configured candidate with
control over a look-back window ending at each partition day, and `variant_comparison_flag`
fails when the experiment is flagged for review or no comparison was possible.

Thin wiring: the window is aggregated in the warehouse (`warehouse.ab_window.read_window`), so no
per-trace row reaches Python; the day's comparison comes from `ab.day.compare_window`, the paired
queries and causes behind each worse cell from `warehouse.ab_why.comparison_why` (docs/why.md),
the files from `reports.comparison.write_reports`. A range run compares each day of the range
over its own window. The asset also depends on `segment_metrics` for one thing only: the
report's trend of the last 30 partitions.

The check is not blocking, at ERROR severity. Blocking acts only on downstream assets of the same
run and nothing is downstream of the comparison: blocking would only turn the nightly run red
whenever an experiment needs review, which is neither a failure of the pipeline nor a reason to
hold the retrieval stage's deploy gate. An experiment's promotion is gated on the check's latest
evaluation (passed, with `partition_start` / `partition_end` in its metadata), the way
`deploy_gate` reads its own checks.
"""

import json
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from retrieval_pipeline.ab.day import NO_COMPARISON, DayComparison, WindowData, compare_window
from retrieval_pipeline.ab.why import why_table
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.defs.nightly.assets import query_metrics, segment_metrics, warehouse_asset
from retrieval_pipeline.defs.partitions import partition_days
from retrieval_pipeline.defs.resources import PipelineSettingsResource, WarehouseResource
from retrieval_pipeline.gate import days_between
from retrieval_pipeline.reports import judged
from retrieval_pipeline.reports.comparison import (
    cells_markdown,
    reasons_markdown,
    report_path,
    write_reports,
)
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import escape_markdown
from retrieval_pipeline.warehouse.ab_why import comparison_why
from retrieval_pipeline.warehouse.ab_window import read_window
from retrieval_pipeline.warehouse.trend import read_segment_trend


def _day_metadata(
    result: DayComparison, config: PipelineConfig
) -> "dict[str, dg.RawMetadataValue]":
    """The numbers of one day, so the UI plots them per partition."""
    metadata: dict[str, dg.RawMetadataValue] = {
        "window_start": result.window_start.isoformat(),
        "window_end": result.window_end.isoformat(),
        "days_with_data": result.days_with_data,
        "comparison_possible": result.possible,
        "flagged": result.flagged,
    }
    if result.comparison is None:
        return metadata
    overall = result.comparison.coverage[-1]
    metadata |= {
        "paired_queries": overall.paired,
        "control_only_queries": overall.control_only,
        "candidate_only_queries": overall.candidate_only,
        "shared_unpaired_queries": overall.shared_unpaired,
        "control_traces": overall.control_traces,
        "candidate_traces": overall.candidate_traces,
        "cells": dg.MetadataValue.md(cells_markdown(result.comparison)),
        "judged_share_warnings": "\n".join(judged.comparison_warnings(result.comparison)) or "none",
    }
    comparison = result.comparison
    if comparison.judged and comparison.judged[-1].segment == OVERALL_SEGMENT:
        shares = comparison.judged[-1]
        for arm, share in (("control", shares.control), ("candidate", shares.candidate)):
            metadata[f"{comparison.judged_metric} ({arm})"] = (
                float("nan") if share is None else share
            )
    for metric in config.headline_metrics:
        if metric not in result.comparison.metrics:
            continue
        cell = result.comparison.cell(OVERALL_SEGMENT, metric)
        holm = cell.p_randomization_holm
        metadata[f"delta {metric}"] = float("nan") if cell.delta is None else cell.delta
        metadata[f"p_holm {metric}"] = float("nan") if holm is None else holm
    return metadata


@warehouse_asset(deps=[query_metrics, segment_metrics])
def variant_comparison(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """The configured candidate against control on the same queries over the look-back window
    ending at each partition day: paired differences per segment and metric with intervals and
    tests, and the review flag; written as HTML, Markdown and JSON files.

    A window without both variants is reported in words, and the check fails on it."""
    start, end = partition_days(context)
    config = settings.load()
    folder = settings.reports_folder(warehouse)
    days = days_between(start, end)
    results: list[DayComparison] = []
    written: list[Path] = []
    inputs: list[tuple[date, WindowData, pd.DataFrame]] = []
    with warehouse.get_connection() as conn:
        for day in days:
            try:
                window = read_window(conn, day, config)
            except ValueError as exc:
                raise dg.Failure(description=f"variant comparison of {day}: {exc}") from exc
            inputs.append((day, window, read_segment_trend(conn, day, config.headline_metrics)))
    for day, window, day_trend in inputs:
        try:
            result = compare_window(window, day, config)
        except ValueError as exc:
            raise dg.Failure(description=f"variant comparison of {day}: {exc}") from exc
        result = _with_why(warehouse, config, result)
        context.log.info(result.words())
        results.append(result)
        written += write_reports(result, folder, day_trend, config)
    with_day = start != end
    metadata: dict[str, dg.RawMetadataValue] = {
        "partition_start": start.isoformat(),
        "partition_end": end.isoformat(),
        "summary": "\n".join(r.words() for r in results),
        "control": config.comparison.control,
        "candidate": config.comparison.candidate,
        "flagged_days": sum(r.flagged for r in results),
        "days_without_comparison": sum(not r.possible for r in results),
        "reasons": dg.MetadataValue.md(reasons_markdown(results, with_day)),
        "files": "\n".join(str(p) for p in written),
        "html_report": dg.MetadataValue.path(str(report_path(folder, end, ".html"))),
    }
    found = [(r.day, w) for r in results if r.comparison is not None for w in r.comparison.why]
    if found:
        metadata["why"] = dg.MetadataValue.md(why_table(w for _, w in found))
        metadata["why_in_words"] = "\n".join(
            f"{day.isoformat()}: {w.line()}" if with_day else w.line() for day, w in found
        )
    if not with_day:
        # one point per partition: a range run would stamp one day's numbers on every day
        metadata |= _day_metadata(results[-1], config)
    return dg.MaterializeResult(metadata=metadata)


def _with_why(
    warehouse: WarehouseResource, config: PipelineConfig, result: DayComparison
) -> DayComparison:
    """`result` with the paired queries and causes behind each worse cell (none without one)."""
    comparison = result.comparison
    if comparison is None or not result.possible:
        return result
    with warehouse.get_connection() as conn:
        found = comparison_why(conn, config, result.day, comparison)
    return replace(result, comparison=replace(comparison, why=found)) if found else result


def _read_outcome(folder: Path, day: date) -> dict[str, Any] | None:
    path = report_path(folder, day, ".json")
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@dg.asset_check(asset=variant_comparison, blocking=False)
def variant_comparison_flag(
    context: dg.AssetCheckExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.AssetCheckResult:
    """Fails (ERROR, not blocking) when the experiment is flagged for review on a day of the
    run, or no comparison was possible there; the reasons in words."""
    start, end = partition_days(context)
    folder = settings.reports_folder(warehouse)
    with_day = start != end
    problems: list[str] = []
    passing: list[str] = []
    flagged_days = no_comparison_days = 0
    for day in days_between(start, end):
        outcome = _read_outcome(folder, day)
        prefix = f"{day.isoformat()}: " if with_day else ""
        if outcome is None:
            no_comparison_days += 1
            problems.append(
                f"{prefix}{NO_COMPARISON}: no variant_comparison report for {day.isoformat()} "
                f"in {folder}; materialize variant_comparison for it first"
            )
            continue
        if not outcome["comparison_possible"]:
            no_comparison_days += 1
            problems.append(f"{prefix}{NO_COMPARISON}: {outcome['problem']}")
        if outcome["flagged"]:
            flagged_days += 1
            problems += [f"{prefix}{reason}" for reason in outcome["reasons"]]
        if outcome["comparison_possible"] and not outcome["flagged"]:
            passing.append(str(outcome["words"]))
    metadata: dict[str, dg.RawMetadataValue] = {
        "partition_start": start.isoformat(),
        "partition_end": end.isoformat(),
        "flagged_days": flagged_days,
        "days_without_comparison": no_comparison_days,
    }
    if problems:
        metadata["reasons"] = dg.MetadataValue.md(
            "\n".join(f"- {escape_markdown(p)}" for p in problems)
        )
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="\n".join(problems or passing),
        metadata=metadata,
    )
