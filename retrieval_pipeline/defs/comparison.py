"""The A/B comparison in the pipeline: `variant_comparison` compares the configured candidate with
control over a look-back window ending at each partition day, and `variant_comparison_flag`
fails when the experiment is flagged for review or no comparison was possible.

Thin wiring over `retrieval_pipeline.comparison`: the window is aggregated in the warehouse
(`read_window`: `sql/rpt_comparison_window.sql` says what it holds and each day's level of each
arm, `rpt_comparison_pairs` and `_coverage` give the paired differences and the counts), so no
per-trace row reaches Python; the statistics come from `compare_data`, the files from
`html_report`. A range run compares each day of the range over its own window. The asset also
depends on `segment_metrics` for one thing only: the report's trend of the last 30 partitions.

The check is not blocking, at ERROR severity. Blocking acts only on downstream assets of the same
run and nothing is downstream of the comparison: blocking would only turn the nightly run red
whenever an experiment needs review, which is neither a failure of the pipeline nor a reason to
hold the retrieval stage's deploy gate. An experiment's promotion is gated on the check's latest
evaluation (passed, with `partition_start` / `partition_end` in its metadata), the way
`deploy_gate` reads its own checks.
"""

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg
import duckdb
import numpy as np
import pandas as pd

from retrieval_pipeline import html_report, report, trend
from retrieval_pipeline.comparison import (
    CONFIDENCE_LEVEL,
    ArmSummary,
    Comparison,
    ComparisonData,
    ComparisonSettings,
    PairedDifferences,
    SegmentCoverage,
    choose_metrics,
    compare_data,
    metric_order,
    query_metrics_choice,
    query_metrics_data,
)
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.defs.nightly.assets import query_metrics, segment_metrics, warehouse_asset
from retrieval_pipeline.defs.partitions import partition_days
from retrieval_pipeline.defs.resources import PipelineSettingsResource, WarehouseResource
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.warehouse.sql import load_sql

NO_COMPARISON = "no comparison possible"
REPORT_STEM = "variant_comparison"


def comparison_settings(config: PipelineConfig) -> ComparisonSettings:
    """The comparison's decision rules from the pipeline's configuration (thresholds and the
    minimum of annotated traces are the nightly checks' own)."""
    section = config.comparison
    return ComparisonSettings(
        alpha=section.alpha,
        guarded_metrics=section.guarded_metrics,
        thresholds=trend.config_thresholds(config),
        n_resamples=section.n_resamples,
        seed=section.seed,
        min_annotated_traces=max(1, config.checks.min_annotated_traces),
        normal_approximation_min_pairs=section.normal_approximation_min_pairs,
    )


def report_path(folder: Path, day: date, suffix: str) -> Path:
    """Where the comparison report of `day` is written (`suffix`: .html, .md or .json)."""
    return folder / f"{REPORT_STEM}_{day.isoformat()}{suffix}"


@dataclass(frozen=True)
class DayComparison:
    """One partition day's comparison over its window, or why there is none (`problem`).

    A comparison that ran but paired no query keeps both: its coverage explains the problem,
    and a threshold can still flag it."""

    day: date
    window_start: date
    window_end: date
    lookback_days: int
    days_with_data: int
    variants: tuple[str, ...]
    control: str
    candidate: str
    comparison: Comparison | None
    problem: str | None = None

    @property
    def possible(self) -> bool:
        return self.problem is None

    @property
    def flagged(self) -> bool:
        return self.comparison is not None and self.comparison.flagged

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.comparison.reasons if self.comparison is not None else ()

    def window_words(self) -> str:
        return (
            f"window {report.window_text(self.window_start, self.window_end)}, "
            f"{self.days_with_data} of {self.lookback_days} day(s) with data"
        )

    def note(self) -> str:
        """What was compared, in words (the reports' subtitle)."""
        return (
            f"Partition {self.day.isoformat()}: the traces of the {self.window_words()}; a "
            "query's traces are averaged per arm over the whole window."
        )

    def words(self) -> str:
        """One line: flagged or not, or why no comparison was possible."""
        head = f"{self.day.isoformat()} ({self.window_words()}): {self.candidate} vs {self.control}"
        if self.problem is not None:
            text = f"{head}: {NO_COMPARISON}: {self.problem}"
            return text + (f"; flagged: {'; '.join(self.reasons)}" if self.flagged else "")
        assert self.comparison is not None
        if self.flagged:
            return f"{head}: flagged for review: " + "; ".join(self.reasons)
        return f"{head}: not flagged ({self.comparison.coverage[-1].paired} paired queries)"

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: the outcome first, the whole comparison under `comparison`."""
        return {
            "partition": self.day.isoformat(),
            "window": {
                "start": self.window_start.isoformat(),
                "end": self.window_end.isoformat(),
                "lookback_days": self.lookback_days,
                "days_with_data": self.days_with_data,
            },
            "control": self.control,
            "candidate": self.candidate,
            "variants_in_window": list(self.variants),
            "comparison_possible": self.possible,
            "problem": self.problem,
            "flagged": self.flagged,
            "reasons": list(self.reasons),
            "words": self.words(),
            "comparison": self.comparison.to_dict() if self.comparison is not None else None,
        }


@dataclass(frozen=True)
class WindowData:
    """A window's traces as the comparison needs them: the days holding data, every variant
    served, and the comparison's aggregated input when both configured arms are there."""

    days_with_data: int
    variants: tuple[str, ...]
    data: ComparisonData | None


def _arms_present(variants: tuple[str, ...], config: PipelineConfig) -> bool:
    section = config.comparison
    return section.control in variants and section.candidate in variants


def window_from_rows(rows: pd.DataFrame, config: PipelineConfig) -> WindowData:
    """`WindowData` of a window's long `query_metrics` rows (`compare_query_metrics`' input), in
    pandas; ValueError when a configured metric is not among them."""
    section = config.comparison
    variants = tuple(sorted(str(v) for v in pd.unique(rows["variant"])))
    days = int(rows["partition_date"].nunique()) if len(rows) else 0
    if rows.empty or not _arms_present(variants, config):
        return WindowData(days, variants, None)
    metrics = query_metrics_choice(rows, config.metrics)
    data = query_metrics_data(rows, section.control, section.candidate, metrics)
    return WindowData(days, variants, data)


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


def read_window(conn: duckdb.DuckDBPyConnection, day: date, config: PipelineConfig) -> WindowData:
    """`WindowData` of partition `day`'s window, aggregated in the warehouse (the same numbers as
    `window_from_rows` on the window's rows); ValueError when a configured metric was not
    scored there."""
    section = config.comparison
    start, end = section.window(day)
    window = {"start_date": start, "end_date": end}
    groups = [
        WindowGroup(*row)
        for row in conn.execute(load_sql("rpt_comparison_window"), window).fetchall()
    ]
    variants = tuple(sorted({g.variant for g in groups}))
    days = len({g.partition_date for g in groups})
    if not groups or not _arms_present(variants, config):
        return WindowData(days, variants, None)
    arms = (section.control, section.candidate)
    metrics = choose_metrics(metric_order(sorted({g.metric for g in groups})), config.metrics)
    # as `query_metrics_data` sees them: the rows of the compared metrics only
    scored = [g for g in groups if g.metric in metrics]
    segments = tuple(sorted({g.segment for g in scored if g.variant in arms}))
    arm_params = window | {
        "control": section.control,
        "candidate": section.candidate,
        "overall_segment": OVERALL_SEGMENT,
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
    data = ComparisonData(
        control=section.control,
        candidate=section.candidate,
        metrics=metrics,
        variants=tuple(sorted({g.variant for g in scored})),
        segments=segments,
        pairs=pairs,
        levels=levels,
        coverage=coverage,
    )
    return WindowData(days, variants, data)


def compare_window(window: WindowData, day: date, config: PipelineConfig) -> DayComparison:
    """Compare the configured candidate with control over partition `day`'s window, given as
    `WindowData` (`read_window` in the warehouse, `window_from_rows` in pandas)."""
    section = config.comparison
    start, end = section.window(day)
    variants = window.variants

    def outcome(comparison: Comparison | None, problem: str | None) -> DayComparison:
        return DayComparison(
            day=day,
            window_start=start,
            window_end=end,
            lookback_days=section.lookback_days,
            days_with_data=window.days_with_data,
            variants=variants,
            control=section.control,
            candidate=section.candidate,
            comparison=comparison,
            problem=problem,
        )

    if not variants:
        return outcome(None, "the window holds no traces")
    absent = [
        f"{role} variant {name!r} has no traces in the window"
        for role, name in (("control", section.control), ("candidate", section.candidate))
        if name not in variants
    ]
    if absent or window.data is None:
        lead = ["the window holds one variant only"] if len(variants) < 2 else []
        problem = "; ".join([*lead, *absent]) + f"; variants present: {', '.join(variants)}"
        return outcome(None, problem)
    comparison = compare_data(window.data, comparison_settings(config))
    if comparison.coverage[-1].paired == 0:
        return outcome(
            comparison,
            f"no query was served and annotated by both {section.control} and "
            f"{section.candidate} in the window",
        )
    return outcome(comparison, None)


def write_reports(
    result: DayComparison, folder: Path, trend_rows: pd.DataFrame, config: PipelineConfig
) -> list[Path]:
    """Write the HTML, Markdown and JSON reports of one day; their paths."""
    title = f"Variant comparison {result.day.isoformat()}: {result.candidate} vs {result.control}"
    paths = [report_path(folder, result.day, suffix) for suffix in html_report.REPORT_SUFFIXES]
    html_path, md_path, json_path = paths
    note = result.note()
    if result.comparison is None:
        lines = [f"{NO_COMPARISON}: {result.problem}.", note]
        html_path.write_text(html_report.notice_html(title, lines), encoding="utf-8")
        md_path.write_text(html_report.notice_markdown(title, lines), encoding="utf-8")
    else:
        if result.problem is not None:
            note += f" {NO_COMPARISON}: {result.problem}."
        two_arms = trend_rows[trend_rows["variant"].isin([result.control, result.candidate])]
        trend_html = html_report.trend_section(
            two_arms,
            metrics=list(config.headline_metrics),
            thresholds=trend.config_thresholds(config),
            value_column="mean",
            title="Daily trend of the headline metrics",
            colours=html_report.arm_colours(result.control, result.candidate),
        )
        page = html_report.comparison_html(result.comparison, title, note, [trend_html])
        html_path.write_text(page, encoding="utf-8")
        markdown = html_report.comparison_markdown(result.comparison, note)
        md_path.write_text(markdown, encoding="utf-8")
    text = json.dumps(result.to_dict(), indent=2, allow_nan=False, ensure_ascii=False)
    json_path.write_text(text + "\n", encoding="utf-8")
    return paths


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    value = round(value, 3) + 0.0  # -1e-17 reads 0.000, not -0.000
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _cells_markdown(comparison: Comparison) -> str:
    header = ["segment", "metric", "paired", "control", "candidate", "delta"]
    header += [f"{CONFIDENCE_LEVEL:.0%} CI", "p Holm", "verdict", "CI method", "p method"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cell in comparison.cells:
        interval = (
            f"{_num(cell.ci_low, True)}..{_num(cell.ci_high, True)}"
            if cell.ci_low is not None and cell.ci_high is not None
            else "-"
        )
        p = cell.p_randomization_holm
        row = [
            report.segment_label(cell.segment),
            cell.metric,
            cell.n,
            _num(cell.control_mean),
            _num(cell.candidate_mean),
            _num(cell.delta, True),
            interval,
            "-" if p is None else f"{p:.4f}",
            cell.verdict,
            cell.ci_method or "-",
            cell.p_randomization_method or "-",
        ]
        lines.append("| " + " | ".join(report.escape_markdown(c) for c in row) + " |")
    return "\n".join(lines)


def _reasons_markdown(results: list[DayComparison], with_day: bool) -> str:
    lines = []
    for result in results:
        prefix = f"{result.day.isoformat()}: " if with_day else ""
        if result.problem is not None:
            lines.append(f"- {prefix}{NO_COMPARISON}: {report.escape_markdown(result.problem)}")
        lines += [f"- {prefix}{report.escape_markdown(r)}" for r in result.reasons]
    return "\n".join(lines) or "none"


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
        "cells": dg.MetadataValue.md(_cells_markdown(result.comparison)),
    }
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
    days = report.days_between(start, end)
    results: list[DayComparison] = []
    written: list[Path] = []
    inputs: list[tuple[date, WindowData, pd.DataFrame]] = []
    with warehouse.get_connection() as conn:
        for day in days:
            try:
                window = read_window(conn, day, config)
            except ValueError as exc:
                raise dg.Failure(description=f"variant comparison of {day}: {exc}") from exc
            inputs.append(
                (day, window, trend.read_segment_trend(conn, day, config.headline_metrics))
            )
    for day, window, day_trend in inputs:
        try:
            result = compare_window(window, day, config)
        except ValueError as exc:
            raise dg.Failure(description=f"variant comparison of {day}: {exc}") from exc
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
        "reasons": dg.MetadataValue.md(_reasons_markdown(results, with_day)),
        "files": "\n".join(str(p) for p in written),
        "html_report": dg.MetadataValue.path(str(report_path(folder, end, ".html"))),
    }
    if not with_day:
        # one point per partition: a range run would stamp one day's numbers on every day
        metadata |= _day_metadata(results[-1], config)
    return dg.MaterializeResult(metadata=metadata)


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
    for day in report.days_between(start, end):
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
            "\n".join(f"- {report.escape_markdown(p)}" for p in problems)
        )
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="\n".join(problems or passing),
        metadata=metadata,
    )
