"""The Dagster definitions (`[tool.dagster] module_name`): assets, checks, job, schedule, resources.

Loading them validates the configuration ($RETRIEVAL_PIPELINE_CONFIG or the built-in defaults),
so a bad file fails `dagster definitions validate` and the UI's code location with a message
naming the key. Locations: $RETRIEVAL_PIPELINE_STORE (trace store, default data/store),
$RETRIEVAL_PIPELINE_DB (DuckDB file, default data/warehouse.duckdb),
$RETRIEVAL_PIPELINE_REPORTS and $RETRIEVAL_PIPELINE_APPROVALS (default: beside the database);
$RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS=0 stores traces without their id lists.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import dagster as dg

from retrieval_pipeline.config import config_path, load_config
from retrieval_pipeline.defs import live
from retrieval_pipeline.defs.ab import assets as ab
from retrieval_pipeline.defs.executor import in_process_freeing_dead_slots
from retrieval_pipeline.defs.nightly import assets, checks, gate
from retrieval_pipeline.defs.resources import (
    APPROVALS_ENV,
    DB_ENV,
    DEFAULT_DB,
    DEFAULT_STORE,
    REPORTS_ENV,
    STORE_ENV,
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
    store_retrieved_ids,
)
from retrieval_pipeline.defs.schedules import nightly_job, nightly_schedule
from retrieval_pipeline.warehouse.connection import duckdb_budget

ASSETS = [
    assets.traces,
    assets.corpus,
    assets.labels,
    assets.query_metrics,
    assets.segment_metrics,
    assets.regression_report,
    gate.deploy_gate,
]


def _env_or(name: str, default: str) -> str | dg.EnvVar:
    return dg.EnvVar(name) if os.environ.get(name) else str(Path(default).absolute())


def _env_or_none(name: str) -> str | dg.EnvVar | None:
    return dg.EnvVar(name) if os.environ.get(name) else None


def build_defs(config: str | Path | None = None) -> dg.Definitions:
    """The definitions for a configuration file (None: $RETRIEVAL_PIPELINE_CONFIG, else the
    defaults); raises `config.ConfigError` naming the key when the file is invalid."""
    path = config_path(config)
    load_config(path)  # validate now, not at the first run
    duckdb_budget()  # a bad RETRIEVAL_PIPELINE_DUCKDB_* variable fails here too, named
    return dg.Definitions(
        assets=[*ASSETS, ab.variant_comparison, live.live_retrieval_metrics],
        asset_checks=[*checks.ALL_CHECKS, ab.variant_comparison_flag, live.live_sustained_drop],
        jobs=[nightly_job],
        schedules=[nightly_schedule],
        sensors=[live.live_monitoring_sensor],
        resources={
            "live_monitor": live.LiveMonitorResource(),
            "trace_store": TraceStoreResource(root=_env_or(STORE_ENV, DEFAULT_STORE)),
            "warehouse": WarehouseResource(
                database=_env_or(DB_ENV, DEFAULT_DB),
                store_retrieved_ids=store_retrieved_ids(),
            ),
            "settings": PipelineSettingsResource(
                config_path=str(path.absolute()) if path else None,
                reports_dir=_env_or_none(REPORTS_ENV),
                approvals_dir=_env_or_none(APPROVALS_ENV),
            ),
        },
        # DuckDB takes one writer per file: steps run one after another in the run's process,
        # and a run first frees the pool slots of runs killed outright (see defs/executor.py).
        executor=in_process_freeing_dead_slots,
    )


defs = build_defs()

# Dagster and the libraries loaded with these definitions are hundreds of thousands of objects that
# live as long as the process. Frozen, Python's full collections stop rescanning them at every run
# (bench/README.md, "Where the time goes").
gc.freeze()
