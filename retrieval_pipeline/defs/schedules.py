"""The nightly job (every asset and check) and its schedule: 02:00 UTC, for the previous day.

The schedule starts running (with `dagster dev` or `dagster-daemon run`) unless
$RETRIEVAL_PIPELINE_SCHEDULE says no; a toggle in the UI is kept by the instance and wins.
"""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.partitions.partitioned_schedule import (
    UnresolvedPartitionedAssetScheduleDefinition,
)

from retrieval_pipeline import environment

nightly_job = dg.define_asset_job(
    "nightly",
    selection=dg.AssetSelection.all(),
    description="Ingest, score and judge one day of traces, then gate the deploy on the checks.",
)


def build_nightly_schedule() -> (
    UnresolvedPartitionedAssetScheduleDefinition | dg.ScheduleDefinition
):
    """The schedule, running by default ($RETRIEVAL_PIPELINE_SCHEDULE=0: stopped)."""
    running = environment.schedule_running()
    return dg.build_schedule_from_partitioned_job(
        nightly_job,
        hour_of_day=2,
        minute_of_hour=0,
        name="nightly_schedule",
        default_status=(
            dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
        ),
    )


nightly_schedule = build_nightly_schedule()
