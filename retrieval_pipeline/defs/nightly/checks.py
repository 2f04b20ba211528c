"""Asset checks: thresholds, annotation coverage, quarantine rate and the reranker's stages block
the deploy gate (error); the stale-label rate warns. A partition without data fails every check.

Each check is partitioned by day, so a day's verdict is its own: a rerun of an old day never
changes today's. It reads the warehouse for the run's partition range and records that range in
its metadata (`partition_start`, `partition_end`), which the deploy gate compares with its own;
a range run (a backfill) also records each day's own verdict under that day's partition.
The threshold and coverage checks sit on `regression_report` (whose rows carry each segment's
status), so a failing day still gets its report and only the deploy gate is stopped; the
quarantine check sits on `traces` and stops the run before anything is scored on broken input
(days without data alone let the days with data be scored; the gate still refuses them).
"""

import warnings
from collections.abc import Callable
from datetime import date

import dagster as dg
import pandas as pd

from retrieval_pipeline import gate
from retrieval_pipeline.defs.executor import POOL
from retrieval_pipeline.defs.nightly.assets import labels, regression_report, traces
from retrieval_pipeline.defs.partitions import daily_partitions, partition_days
from retrieval_pipeline.defs.resources import PipelineSettingsResource, WarehouseResource
from retrieval_pipeline.reports.stage_why import stage_why_lines
from retrieval_pipeline.warehouse import nightly
from retrieval_pipeline.warehouse.nightly import QualityCounts
from retrieval_pipeline.warehouse.stage_why import explain_stage_day
from retrieval_pipeline.warehouse.stages import read_stage_gains, read_stage_metrics

Share = tuple[int, int]  # (part, whole) of one day
# A check's verdict on the days start..end, with the severity it is recorded at.
Judge = Callable[[date, date], tuple[gate.Verdict, dg.AssetCheckSeverity]]


def _result(verdict: gate.Verdict, severity: dg.AssetCheckSeverity) -> dg.AssetCheckResult:
    metadata: dict[str, dg.MetadataValue] = {}
    for key, value in verdict.metadata.items():
        if key == "breakdown":
            metadata[key] = dg.MetadataValue.md(str(value))
        elif isinstance(value, bool):
            metadata[key] = dg.MetadataValue.bool(value)
        elif isinstance(value, int):
            metadata[key] = dg.MetadataValue.int(value)
        elif isinstance(value, float):
            metadata[key] = dg.MetadataValue.float(value)
        else:
            metadata[key] = dg.MetadataValue.text(str(value))
    return dg.AssetCheckResult(
        passed=verdict.passed,
        severity=severity,
        description=verdict.description,
        metadata=metadata,
    )


def _judged(context: dg.AssetCheckExecutionContext, judge: Judge) -> dg.AssetCheckResult:
    """The check's result for the run's days. Dagster records a one-day run's result under its
    day; a range run's result has no partition, so each day's own verdict is recorded too, under
    its day, for the UI and for the deploy gate of that day."""
    start, end = partition_days(context)
    if start != end:
        (spec,) = context.check_specs
        for day in gate.days_between(start, end):
            verdict, severity = judge(day, day)
            result = _result(verdict, severity)
            evaluation = dg.AssetCheckEvaluation(
                asset_key=spec.asset_key,
                check_name=spec.name,
                passed=verdict.passed,
                metadata=result.metadata,
                severity=severity,
                description=verdict.description,
                blocking=spec.blocking,
                partition=day.isoformat(),
            )
            # Dagster takes an AssetCheckEvaluation here, though `UserEvent` does not list it
            context.op_execution_context.log_event(evaluation)  # type: ignore[arg-type]
    return _result(*judge(start, end))


# Partitioned checks are a preview in Dagster 1.13: said once here, not at every load.
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)


def _check(
    asset: dg.AssetsDefinition, blocking: bool = True
) -> Callable[..., dg.AssetChecksDefinition]:
    return dg.asset_check(
        asset=asset, blocking=blocking, partitions_def=daily_partitions, pool=POOL
    )


@_check(regression_report)
def segment_thresholds(
    context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource
) -> dg.AssetCheckResult:
    """Fails when any segment and variant (or overall row) misses a metric threshold."""

    def judge(start: date, end: date) -> tuple[gate.Verdict, dg.AssetCheckSeverity]:
        with warehouse.get_connection() as conn:
            rows = nightly.read_regression_rows(conn, start, end)
        return gate.threshold_verdict(rows, start, end), dg.AssetCheckSeverity.ERROR

    return _judged(context, judge)


@_check(regression_report)
def annotation_coverage(
    context: dg.AssetCheckExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.AssetCheckResult:
    """Fails when a segment and variant has fewer annotated traces than the configured share."""
    min_coverage = settings.load().checks.min_coverage

    def judge(start: date, end: date) -> tuple[gate.Verdict, dg.AssetCheckSeverity]:
        with warehouse.get_connection() as conn:
            rows = nightly.read_regression_rows(conn, start, end)
        verdict = gate.coverage_verdict(rows, min_coverage, start, end)
        return verdict, dg.AssetCheckSeverity.ERROR

    return _judged(context, judge)


def _daily_shares(
    warehouse: WarehouseResource, start: date, end: date, share: Callable[[QualityCounts], Share]
) -> dict[date, Share]:
    with warehouse.get_connection() as conn:
        return {
            day: share(nightly.quality_counts(conn, day, day))
            for day in gate.days_between(start, end)
        }


@_check(traces)
def quarantine_rate(
    context: dg.AssetCheckExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.AssetCheckResult:
    """Fails when a day's share of quarantined records exceeds the configured limit, or a day
    has no data. Broken input (a day over the limit) stops the run before anything is scored;
    days without data alone fail it at warning severity, so that a backfill still scores the
    days it has and the deploy gate refuses the missing ones (it requires this check passed)."""
    limit = settings.load().checks.max_quarantine_rate

    def judge(start: date, end: date) -> tuple[gate.Verdict, dg.AssetCheckSeverity]:
        per_day = _daily_shares(
            warehouse, start, end, lambda c: (c.quarantined_records, c.records_read)
        )
        verdict = gate.rate_verdict("quarantine rate", per_day, limit, "records read", start, end)
        broken = any(whole and part / whole > limit for part, whole in per_day.values())
        has_data = any(whole for _, whole in per_day.values())
        blocking = broken or not has_data
        return verdict, dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN

    return _judged(context, judge)


@_check(regression_report)
def reranker_stage(
    context: dg.AssetCheckExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.AssetCheckResult:
    """Fails when a reranker stage's mean misses its `[stages] thresholds` floor, or the
    reranker's gain over its input (its mean) is below `[stages] min_gain`, in any segment or
    overall; a missing value never passes. A day without reranker spans passes saying so,
    unless `[stages] require_reranker` is set (docs/spans.md, "Stages in the nightly")."""
    config = settings.load()
    stages = config.stages

    def judge(start: date, end: date) -> tuple[gate.Verdict, dg.AssetCheckSeverity]:
        with warehouse.get_connection() as conn:
            means = read_stage_metrics(conn, start, end)
            gains = read_stage_gains(conn, start, end)
            no_data = [
                day
                for day in gate.days_between(start, end)
                if not nightly.quality_counts(conn, day, day).records_read
            ]
            verdict = gate.stage_verdict(means, gains, stages, start, end, no_data)
            if not verdict.passed and not means.empty:
                # first stage against reranking, per query (docs/why.md, "The reranker's stages")
                lines = [
                    f"{day.isoformat()}: {line}" if start != end else line
                    for day in gate.days_between(start, end)
                    for line in stage_why_lines(
                        explain_stage_day(
                            conn,
                            config,
                            day,
                            means[pd.to_datetime(means["partition_date"]).dt.date == day],
                            gains[pd.to_datetime(gains["partition_date"]).dt.date == day],
                        )
                    ).splitlines()
                ]
                if lines:
                    verdict.metadata["why"] = "\n".join(lines)
        return verdict, dg.AssetCheckSeverity.ERROR

    return _judged(context, judge)


@_check(labels, blocking=False)
def stale_label_rate(
    context: dg.AssetCheckExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.AssetCheckResult:
    """Warns when a day's share of labels dropped as stale exceeds the configured limit."""
    limit = settings.load().checks.max_stale_label_rate

    def judge(start: date, end: date) -> tuple[gate.Verdict, dg.AssetCheckSeverity]:
        per_day = _daily_shares(warehouse, start, end, lambda c: (c.stale_labels, c.labels))
        verdict = gate.rate_verdict("stale-label rate", per_day, limit, "labels", start, end)
        return verdict, dg.AssetCheckSeverity.WARN

    return _judged(context, judge)


BLOCKING_CHECKS = (segment_thresholds, annotation_coverage, quarantine_rate, reranker_stage)
ALL_CHECKS = (*BLOCKING_CHECKS, stale_label_rate)
