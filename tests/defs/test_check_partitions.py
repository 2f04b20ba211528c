"""A check's verdict is per day: rerunning an older day never changes a later day's verdict, in
the instance or at the deploy gate (issue 34, item 2)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter

from retrieval_pipeline.defs.nightly.gate import BLOCKING_CHECK_KEYS, deploy_gate
from retrieval_pipeline.sample import write_sample_store
from tests.dagster_runs import PIPELINE, RunFolder, checks_by_name, failure_messages, materialize

LATEST = date(2026, 11, 30)  # the sample's injected regression: segment_thresholds fails
OLDER = LATEST - timedelta(days=1)  # clean: every check passes
THRESHOLDS = dg.AssetCheckKey(dg.AssetKey("regression_report"), "segment_thresholds")


def verdict(instance: dg.DagsterInstance, key: dg.AssetCheckKey, day: date) -> bool | None:
    """The latest verdict recorded for `day` (None: none)."""
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [key], partition_filter=PartitionKeyFilter(key=day.isoformat())
    ).get(key)
    if record is None or record.event is None or record.event.dagster_event is None:
        return None
    data = record.event.dagster_event.event_specific_data
    return data.passed if isinstance(data, dg.AssetCheckEvaluation) else None


def test_rerunning_an_older_day_leaves_the_latest_day_failing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_sample_store(store, days=2, seed=7, end_date=LATEST)
    folder = RunFolder(tmp_path / "run")
    resources = folder.resources(store)
    instance = dg.DagsterInstance.ephemeral()

    assert materialize(PIPELINE, resources, OLDER, instance=instance).success
    latest = materialize(PIPELINE, resources, LATEST, instance=instance)
    assert not latest.success
    assert checks_by_name(latest)["segment_thresholds"].passed is False
    rerun = materialize(PIPELINE, resources, OLDER, instance=instance)
    assert rerun.success, failure_messages(rerun)

    # Dagster's per-check "latest" is now the older day's pass: what the gate read before
    latest_of_check = instance.get_latest_asset_check_evaluation_record(THRESHOLDS)
    assert latest_of_check is not None and latest_of_check.partition == str(OLDER)
    # each day keeps its own verdict
    assert verdict(instance, THRESHOLDS, LATEST) is False
    assert {key.name: verdict(instance, key, OLDER) for key in BLOCKING_CHECK_KEYS} == {
        "segment_thresholds": True,
        "annotation_coverage": True,
        "quarantine_rate": True,
        "reranker_stage": True,
    }
    # and the gate of the latest day, run alone, still refuses on that day's failure
    alone = materialize([deploy_gate], resources, LATEST, instance=instance)
    (message,) = failure_messages(alone)
    assert f"deploy gate refuses {LATEST}" in message
    assert f"segment_thresholds failed in run {latest.run_id}" in message
    assert not (folder.approvals / f"deploy_approval_{LATEST}.json").exists()
    # the older day's gate alone approves on its own verdicts
    assert materialize([deploy_gate], resources, OLDER, instance=instance).success


def test_a_backfill_records_each_day_s_verdict(tmp_path: Path) -> None:
    """A range run's checks judge the range and record each day's own verdict under its day."""
    store = tmp_path / "store"
    write_sample_store(store, days=2, seed=7, end_date=LATEST)
    resources = RunFolder(tmp_path / "run").resources(store)
    instance = dg.DagsterInstance.ephemeral()

    result = materialize(PIPELINE, resources, days=[OLDER, LATEST], instance=instance)
    assert not result.success  # the range holds the regression day
    assert verdict(instance, THRESHOLDS, OLDER) is True
    assert verdict(instance, THRESHOLDS, LATEST) is False
    alone = materialize([deploy_gate], resources, OLDER, instance=instance)
    assert alone.success, failure_messages(alone)
