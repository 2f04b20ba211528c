"""The nightly job (every asset and check) and its schedule: 02:00 UTC, for the previous day."""

from __future__ import annotations

import dagster as dg

nightly_job = dg.define_asset_job(
    "nightly",
    selection=dg.AssetSelection.all(),
    description="Ingest, score and judge one day of traces, then gate the deploy on the checks.",
)

nightly_schedule = dg.build_schedule_from_partitioned_job(
    nightly_job, hour_of_day=2, minute_of_hour=0, name="nightly_schedule"
)
