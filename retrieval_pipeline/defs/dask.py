"""The nightly job on a Dask distributed cluster: dagster-dask's executor, fixed for this Dagster
and Dask (docs/scaling.md, "In Dagster").

dagster-dask 0.29 hands the run (a `DagsterRun`) to `Client.submit` as it is; Dask 2025+ walks
every tuple it is given, and Dagster's `@record` types refuse to be iterated, so every
partitioned run, and every run using pools, failed before its first step. Here the run and the
known state travel as Dagster's serialized text. Tasks are keyed by run as well as step (two
runs at once no longer share keys: dagster-io/dagster#21418), and since dagster-dask claims no
pool slots, the run's steps in a pool are chained one after another (the warehouse's steps never
overlap within a run; another run's wait on the file's lock). Only `cluster: {existing:
{address: ...}}` is served: the cluster is the deployment's, started apart from the runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg
import dask.distributed
from dagster._core.errors import raise_execution_interrupts
from dagster._core.events import DagsterEvent
from dagster._core.execution.plan.state import KnownExecutionState
from dagster._core.storage.dagster_run import DagsterRun
from dagster._serdes import deserialize_value, serialize_value
from dagster._utils import iterate_with_context
from dagster_dask.executor import (
    DaskExecutor,
    get_dask_resource_requirements,
    query_on_dask_worker,
)

from retrieval_pipeline.defs.executor import _FreeingExecutor


def _step_on_worker(
    dependencies: list[Any],
    recon_job: Any,
    run_text: str,
    run_config: dict[str, Any],
    step_keys: list[str],
    instance_ref: Any,
    state_text: str | None,
) -> list[str]:
    """Run steps on a Dask worker; the run, its state and the events as serialized text."""
    run = deserialize_value(run_text, DagsterRun)
    state = deserialize_value(state_text, KnownExecutionState) if state_text else None
    events = query_on_dask_worker(
        dependencies, recon_job, run, run_config, step_keys, instance_ref, state
    )
    return [serialize_value(event) for event in events]


class FixedDaskExecutor(DaskExecutor):
    """dagster-dask's executor, submitting serialized runs under per-run task keys."""

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[DagsterEvent]:
        if self.cluster_type != "existing":
            raise dg.DagsterInvariantViolationError(
                "the nightly's Dask executor takes an existing cluster's address only"
            )
        if not plan_context.instance.is_persistent:
            raise dg.DagsterInvariantViolationError(
                "Dask execution needs a persistent Dagster instance: set DAGSTER_HOME"
            )
        run = plan_context.dagster_run
        state = execution_plan.known_state
        run_text = serialize_value(run)
        state_text = serialize_value(state) if state is not None else None
        with dask.distributed.Client(self.cluster_configuration["address"]) as client:
            futures: dict[str, Any] = {}
            last_in_pool: Any = None
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    dependencies = [
                        futures[key] for step_input in step.step_inputs
                        for key in step_input.dependency_keys
                    ]  # fmt: skip
                    if step.pool and last_in_pool is not None:
                        dependencies.append(last_in_pool)
                    future = client.submit(
                        _step_on_worker,
                        dependencies,
                        plan_context.reconstructable_job,
                        run_text,
                        plan_context.run_config,
                        [step.key],
                        plan_context.instance.get_ref(),
                        state_text,
                        key=f"{run.job_name}.{run.run_id}.{step.key}",
                        resources=get_dask_resource_requirements(step.tags),
                        pure=False,
                    )
                    futures[step.key] = future
                    if step.pool:
                        last_in_pool = future
            results = dask.distributed.as_completed(list(futures.values()), with_results=True)
            for _, texts in iterate_with_context(raise_execution_interrupts, results):
                for text in texts:
                    yield deserialize_value(text, DagsterEvent)


_CONFIG = {"cluster": dg.Field({"existing": dg.Field({"address": dg.StringSource})})}


@dg.executor(
    name="dask", config_schema=_CONFIG, requirements=dg.multiple_process_executor_requirements()
)
def dask_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """The nightly's steps on the Dask cluster at `cluster.existing.address`."""
    cluster: dict[str, Any] = dict(init_context.executor_config["cluster"])  # type: ignore[call-overload]
    ((cluster_type, configuration),) = cluster.items()
    return _FreeingExecutor(FixedDaskExecutor(cluster_type, configuration))
