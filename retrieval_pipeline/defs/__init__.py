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
import logging
from pathlib import Path

import dagster as dg

from retrieval_pipeline import environment
from retrieval_pipeline.config import ExecutionConfig, config_path, load_config
from retrieval_pipeline.defs import live
from retrieval_pipeline.defs.ab import assets as ab
from retrieval_pipeline.defs.executor import (
    in_process_freeing_dead_slots,
    multiprocess_freeing_dead_slots,
)
from retrieval_pipeline.defs.nightly import (
    assets,
    checks,
    click_labels,
    gate,
    judgments,
    phoenix,
    stages,
)
from retrieval_pipeline.defs.partitions import tell_outside_days
from retrieval_pipeline.defs.resources import (
    APPROVALS_ENV,
    DB_ENV,
    DEFAULT_DB,
    DEFAULT_STORE,
    PHOENIX_ENDPOINT_ENV,
    PHOENIX_PROJECT_ENV,
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
    judgments.judgments,
    assets.labels,
    assets.query_metrics,
    assets.segment_metrics,
    stages.stage_metrics,
    assets.regression_report,
    gate.deploy_gate,
]


SHARDED = frozenset({"traces", "labels", "query_metrics"})


LOG = logging.getLogger(__name__)


def nightly_assets(execution: ExecutionConfig) -> list[dg.AssetsDefinition]:
    """The nightly's assets: as they are, or with `traces`, `labels` and `query_metrics` made
    one sharded asset of the same keys (`[execution] shards`, docs/scaling.md)."""
    if execution.shards == 1:
        return list(ASSETS)
    from retrieval_pipeline.defs.nightly.shards import sharded_day

    kept = [a for a in ASSETS if not {k.to_user_string() for k in a.keys} & SHARDED]
    return [sharded_day(execution.shards), *kept]


def nightly_executor(execution: ExecutionConfig) -> dg.ExecutorDefinition:
    """The executor `[execution] executor` names, each first freeing the pool slots of runs
    killed outright (defs/executor.py)."""
    if execution.executor == "multiprocess":
        # a fork server that has imported the definitions once: a spawned process per step
        # would import Dagster, pandas and SciPy again each time (about 2x the run's wall time)
        preloaded = {"forkserver": {"preload_modules": ["retrieval_pipeline.defs"]}}
        return multiprocess_freeing_dead_slots.configured({"start_method": preloaded})
    if execution.executor == "dask":
        from retrieval_pipeline.defs.dask import dask_executor

        address = {"existing": {"address": execution.dask_scheduler}}
        return dask_executor.configured({"cluster": address})
    return in_process_freeing_dead_slots


def _env_or(name: str, default: str) -> str | dg.EnvVar:
    return dg.EnvVar(name) if environment.path(name) else str(Path(default).absolute())


def _env_or_none(name: str) -> str | dg.EnvVar | None:
    return dg.EnvVar(name) if environment.path(name) else None


def build_defs(config: str | Path | None = None) -> dg.Definitions:
    """The definitions for a configuration file (None: $RETRIEVAL_PIPELINE_CONFIG, else the
    defaults); raises `config.ConfigError` naming the key when the file is invalid."""
    path = config_path(config)
    loaded = load_config(path)  # validate now, not at the first run
    duckdb_budget()  # a bad RETRIEVAL_PIPELINE_DUCKDB_* variable fails here too, named
    optional = [click_labels.click_labels] if loaded.click_labels.enabled else []
    if environment.phoenix_endpoint() and environment.phoenix_project():
        optional.append(phoenix.phoenix_scores)  # scores back to the store (docs/phoenix.md)
    trace_store = TraceStoreResource(
        root=_env_or(STORE_ENV, DEFAULT_STORE),
        phoenix_endpoint=dg.EnvVar(PHOENIX_ENDPOINT_ENV)
        if environment.phoenix_endpoint()
        else None,
        phoenix_project=dg.EnvVar(PHOENIX_PROJECT_ENV) if environment.phoenix_project() else None,
        config_path=str(path.absolute()) if path else None,
    )
    # the store as the variables name it now (the resource holds EnvVars, read when a run starts)
    missing = TraceStoreResource(
        root=str(environment.path(STORE_ENV) or Path(DEFAULT_STORE).absolute()),
        phoenix_endpoint=environment.phoenix_endpoint(),
        phoenix_project=environment.phoenix_project(),
    ).missing_folder()
    if missing is not None:  # `dagster dev` from another folder: said when the definitions load
        LOG.warning(
            "retrieval_pipeline: %s; the partitions and plots stay empty until it does", missing
        )
    return dg.Definitions(
        assets=[
            *nightly_assets(loaded.execution),
            ab.variant_comparison,
            live.live_retrieval_metrics,
            *optional,
        ],
        asset_checks=[*checks.ALL_CHECKS, ab.variant_comparison_flag, live.live_sustained_drop],
        jobs=[nightly_job],
        schedules=[nightly_schedule],
        sensors=[live.live_monitoring_sensor],
        resources={
            "live_monitor": live.LiveMonitorResource(),
            "trace_store": trace_store,
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
        # DuckDB takes one writer per file: by default steps run one after another in the run's
        # process; with shards, the steps that open the warehouse are in the `duckdb` pool. A run
        # first frees the pool slots of runs killed outright (see defs/executor.py).
        executor=nightly_executor(loaded.execution),
    )


defs = build_defs()
tell_outside_days()  # `dagster asset materialize` with a day outside the range: one line

# Dagster and the libraries loaded with these definitions are hundreds of thousands of objects that
# live as long as the process. Frozen, Python's full collections stop rescanning them at every run
# (bench/README.md, "Where the time goes").
gc.freeze()
