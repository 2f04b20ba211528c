"""Daily partitions (UTC) and the date range a run covers."""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg

from retrieval_pipeline import environment

START_DATE_ENV = "RETRIEVAL_PIPELINE_START_DATE"
DEFAULT_START_DATE = "2026-01-01"


def start_date() -> str:
    """The first partition: $RETRIEVAL_PIPELINE_START_DATE (YYYY-MM-DD) or 2026-01-01."""
    return environment.start_date().isoformat()


daily_partitions = dg.DailyPartitionsDefinition(start_date=start_date(), timezone="UTC")


def partition_days(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext,
) -> tuple[date, date]:
    """First and last day (inclusive) of the run's partition or partition range."""
    window = context.partition_time_window
    return window.start.date(), (window.end - timedelta(days=1)).date()
