"""The deploy gate: an approval record per day, written only when every blocking check passed for
the run's partitions (`checks.py` defines the checks, on the assets of `assets.py`).

The checks are partitioned by day and the gate judges each day on that day's verdicts: the ones
its own run recorded, else the latest recorded for the day by any run (Dagster has no public
per-partition lookup: the event log's `get_latest_asset_check_execution_by_key` with a
partition filter). A rerun of an older day never changes the verdict of a later one. It refuses
a day when a verdict failed, is missing or covers other days.
"""

from datetime import UTC, date, datetime

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecord

from retrieval_pipeline import gate
from retrieval_pipeline.defs.nightly import history
from retrieval_pipeline.defs.nightly.assets import (
    GROUP,
    SINGLE_RUN,
    range_metadata,
    regression_report,
)
from retrieval_pipeline.defs.nightly.metrics_file import record_success
from retrieval_pipeline.defs.partitions import daily_partitions, partition_days
from retrieval_pipeline.defs.resources import PipelineSettingsResource, WarehouseResource
from retrieval_pipeline.files import write_atomically
from retrieval_pipeline.text import json_text

# The checks the deploy gate requires (defined in checks.py).
BLOCKING_CHECK_KEYS = (
    dg.AssetCheckKey(dg.AssetKey("regression_report"), "segment_thresholds"),
    dg.AssetCheckKey(dg.AssetKey("regression_report"), "annotation_coverage"),
    dg.AssetCheckKey(dg.AssetKey("traces"), "quarantine_rate"),
    dg.AssetCheckKey(dg.AssetKey("regression_report"), "reranker_stage"),
)
BLOCKING_CHECKS = tuple(key.name for key in BLOCKING_CHECK_KEYS)


def _latest_record(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, day: date
) -> AssetCheckExecutionRecord | None:
    """The latest evaluation (or plan) of `check_key` recorded for partition `day`, by any run."""
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [check_key], partition_filter=PartitionKeyFilter(key=day.isoformat())
    )
    return records.get(check_key)


def _outcome(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, day: date
) -> gate.CheckOutcome | None:
    record = _latest_record(instance, check_key, day)
    if record is None:
        return None
    evaluation = None
    if record.event is not None and record.event.dagster_event is not None:
        data = record.event.dagster_event.event_specific_data
        evaluation = data if isinstance(data, dg.AssetCheckEvaluation) else None
    if evaluation is None:
        return gate.CheckOutcome(check_key.name, None, None, None, run_id=record.run_id)
    return _check_outcome(evaluation, record.run_id, record.create_timestamp)


def _check_outcome(
    evaluation: dg.AssetCheckEvaluation, run_id: str, evaluated_at: float
) -> gate.CheckOutcome:
    def text(key: str) -> str | None:
        value = evaluation.metadata.get(key)
        return str(value.value) if value is not None else None

    return gate.CheckOutcome(
        name=evaluation.check_name,
        passed=evaluation.passed,
        partition_start=text("partition_start"),
        partition_end=text("partition_end"),
        run_id=run_id,
        description=evaluation.description,
        evaluated_at=evaluated_at,
    )


def _outcomes_in_run(
    instance: dg.DagsterInstance, run_id: str
) -> dict[tuple[dg.AssetCheckKey, str | None], gate.CheckOutcome]:
    """The check evaluations this run recorded, by check and partition (None: a range run's
    verdict on the whole range). A concurrent run of the same day records its own evaluations
    too, so the latest one of a check may not be this run's."""
    found: dict[tuple[dg.AssetCheckKey, str | None], gate.CheckOutcome] = {}
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    for record in records:
        event = record.event_log_entry.dagster_event
        data = event.event_specific_data if event is not None else None
        if isinstance(data, dg.AssetCheckEvaluation):
            key = (dg.AssetCheckKey(data.asset_key, data.check_name), data.partition)
            found[key] = _check_outcome(data, run_id, record.event_log_entry.timestamp)
    return found


@dg.asset(
    partitions_def=daily_partitions,
    backfill_policy=SINGLE_RUN,
    kinds={"json"},
    group_name=GROUP,
    deps=[regression_report],
)
def deploy_gate(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Approval to deploy: materializes only when every blocking check passed for these partitions,
    and writes an approval record (partition, checks, results) a deploy system can read.

    Blocking checks stop this asset inside a run. Each day is judged on its own verdicts: the
    ones this run recorded for it, else the latest recorded for that day (the gate run alone);
    it refuses when one failed, is missing or covers other days."""
    start, end = partition_days(context)
    in_run = _outcomes_in_run(context.instance, context.run.run_id)
    verdicts = {
        day: {
            key.name: in_run.get((key, day.isoformat())) or _outcome(context.instance, key, day)
            for key in BLOCKING_CHECK_KEYS
        }
        for day in gate.days_between(start, end)
    }
    refusals = [
        refusal
        for day, outcomes in verdicts.items()
        for refusal in gate.gate_refusals(BLOCKING_CHECKS, outcomes, day, day)
    ]
    if refusals:
        raise dg.Failure(
            description=(
                f"deploy gate refuses {gate.window_text(start, end)}:\n" + "\n".join(refusals)
            ),
            metadata={"refusals": "\n".join(refusals)},
        )
    folder = settings.approvals_folder(warehouse)
    approved_at = datetime.now(UTC).isoformat(timespec="seconds")
    written: list[str] = []
    by_day: dict[date, history.Metadata] = {}
    passed = ", ".join(f"{name} passed" for name in BLOCKING_CHECKS)
    for day in gate.days_between(start, end):
        # one record per day, so a deploy system finds a day's approval by its name
        record = gate.approval_record(
            day,
            [o for o in verdicts[day].values() if o is not None],
            run_id=context.run.run_id,
            approved_at=approved_at,
        )
        path = folder / f"deploy_approval_{day.isoformat()}.json"
        write_atomically({path: json_text(record, indent=2, ensure_ascii=True) + "\n"})
        written.append(str(path))
        by_day[day] = {
            "summary": f"approved {day.isoformat()}: {passed}",
            "approval_record": dg.MetadataValue.path(str(path)),
        }
    return history.result(
        context,
        start,
        end,
        by_day,
        {
            **range_metadata(start, end),
            "range_summary": f"approved {gate.window_text(start, end)}: {passed}",
            "approval_records": "\n".join(written),
            **record_success(end),
        },
    )
