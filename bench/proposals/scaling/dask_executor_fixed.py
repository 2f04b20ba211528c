# mypy: ignore-errors
# (scratch prototype, kept as it ran: parallel_validation.py against the engine before the
# refactor, commit e08d857; see bench/proposals/scaling/README.md)
"""Prototype (docs/scaling.md): dagster-dask's executor with the run and its known state passed
as Dagster serdes text (dask 2025+ walks tuples, and Dagster's @record types refuse iteration),
task keys per run (dagster-io/dagster#21418), and the run's pool steps chained one after another.
Only `cluster: {existing: {address: ...}}` is handled here."""

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
    dask_executor,
    get_dask_resource_requirements,
    query_on_dask_worker,
)


def _on_worker(dependencies, recon_job, run_text, run_config, step_keys, instance_ref, state_text):
    run = deserialize_value(run_text, DagsterRun)
    state = deserialize_value(state_text, KnownExecutionState) if state_text else None
    return [
        serialize_value(e)
        for e in query_on_dask_worker(
            dependencies, recon_job, run, run_config, step_keys, instance_ref, state
        )
    ]


class FixedDaskExecutor(DaskExecutor):
    def execute(self, plan_context, execution_plan):
        cluster = self.cluster_configuration["address"]
        run = plan_context.dagster_run
        run_text = serialize_value(run)
        state = execution_plan.known_state
        state_text = serialize_value(state) if state is not None else None
        with dask.distributed.Client(cluster) as client:
            futures = {}
            last_pool = None
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    deps = [futures[k] for si in step.step_inputs for k in si.dependency_keys]
                    if step.pool and last_pool is not None:
                        deps.append(last_pool)
                    future = client.submit(
                        _on_worker,
                        deps,
                        plan_context.reconstructable_job,
                        run_text,
                        plan_context.run_config,
                        [step.key],
                        plan_context.instance.get_ref(),
                        state_text,
                        key=f"{run.run_id}.{step.key}",
                        resources=get_dask_resource_requirements(step.tags),
                        pure=False,
                    )
                    futures[step.key] = future
                    if step.pool:
                        last_pool = future
            for _, result in iterate_with_context(
                raise_execution_interrupts,
                dask.distributed.as_completed(list(futures.values()), with_results=True),
            ):
                for text in result:
                    yield deserialize_value(text, DagsterEvent)


@dg.executor(
    name="dask",
    config_schema=dask_executor.config_schema.as_field(),
    requirements=dg.multiple_process_executor_requirements(),
)
def fixed_dask_executor(init_context):
    ((cluster_type, conf),) = init_context.executor_config["cluster"].items()
    return FixedDaskExecutor(cluster_type, conf)
