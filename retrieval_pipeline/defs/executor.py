"""The pipeline's executor: Dagster's in-process executor, which first frees the concurrency slots
that runs killed outright (SIGKILL, OOM, power loss) still hold.

A killed run never reports its end, so its `duckdb` pool slot stays claimed and every later run
waits for it forever. Each run started by this executor tags itself with its process identity
(host, boot, pid and the process's start time); at the start of the next run, a slot held by a
run whose process is gone from this host is freed and that run is marked failed. A run without
these tags, or from another host, is never touched. The warehouse is a local DuckDB file, so
every run that can hold its slot runs on this host.

By hand (the same check, for a run that is stuck before any new run starts), with
`DAGSTER_HOME` set: `python -c "from retrieval_pipeline.defs.executor import main; main()"`.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

# The concurrency pool of every asset and check that opens the warehouse file: DuckDB takes one
# writer per file, and dagster_home/dagster.yaml limits the pool to one step at a time.
POOL = "duckdb"
POOLS = (POOL,)
HOST_TAG = "retrieval_pipeline/host"
PROCESS_TAG = "retrieval_pipeline/process"  # "<boot id>:<pid>:<start time>"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None when it is gone or a zombie;
    "" where /proc does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
    return None if fields[0] in ("Z", "X") else fields[19]


def process_identity(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{_boot_id()}:{pid}:{_start_time(pid) or ''}"


def is_alive(identity: str) -> bool:
    """Whether the process `identity` names still runs (a reused pid does not count)."""
    boot, pid_text, started = identity.split(":")
    if boot != _boot_id():
        return False  # the machine restarted since
    pid = int(pid_text)
    now = _start_time(pid)
    if now is None:
        return False
    if now == "" or started == "":  # no /proc: the pid's existence is all we know
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return now == started


def free_slots_of_dead_runs(
    instance: dg.DagsterInstance, current_run_id: str | None = None
) -> list[str]:
    """Free the pool slots (claimed or pending) of runs started on this host whose process is
    gone, marking those runs failed; returns their run ids."""
    storage = instance.event_log_storage
    holders: set[str] = set()
    for pool in POOLS:
        info = storage.get_concurrency_info(pool)
        holders |= {slot.run_id for slot in info.claimed_slots}
        holders |= {step.run_id for step in info.pending_steps}
    freed: list[str] = []
    for run_id in sorted(holders - {current_run_id}):
        run = instance.get_run_by_id(run_id)
        if run is None:
            continue
        identity = run.tags.get(PROCESS_TAG)
        if run.tags.get(HOST_TAG) != socket.gethostname() or not identity:
            continue
        if not run.is_finished and is_alive(identity):
            continue
        if not run.is_finished:
            instance.report_run_failed(
                run,
                f"the process of run {run_id} ({identity}) is gone (killed?); retrieval_pipeline "
                "marked the run failed and freed its concurrency slots",
            )
        storage.free_concurrency_slots_for_run(run_id)
        freed.append(run_id)
    return freed


class _FreeingExecutor(dg.Executor):
    """Tags the run with its process, frees dead runs' slots, then runs Dagster's executor."""

    def __init__(self, inner: dg.Executor) -> None:
        self._inner = inner

    @property
    def retries(self) -> Any:
        return self._inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self._inner.step_dependency_config

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        instance = plan_context.instance
        run_id = plan_context.run_id
        instance.add_run_tags(
            run_id, {HOST_TAG: socket.gethostname(), PROCESS_TAG: process_identity()}
        )
        for dead in free_slots_of_dead_runs(instance, run_id):
            plan_context.log.warning(
                f"freed the concurrency slots of run {dead}, whose process is gone"
            )
        yield from self._inner.execute(plan_context, execution_plan)


_IN_PROCESS = dg.in_process_executor


@dg.executor(name="in_process", config_schema=_IN_PROCESS.config_schema.as_field())
def in_process_freeing_dead_slots(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Dagster's in-process executor, freeing first the slots of runs whose process died."""
    create = _IN_PROCESS.executor_creation_fn
    assert create is not None
    return _FreeingExecutor(create(init_context))


_MULTIPROCESS = dg.multiprocess_executor


@dg.executor(
    name="multiprocess",
    config_schema=_MULTIPROCESS.config_schema.as_field(),
    requirements=dg.multiple_process_executor_requirements(),
)
def multiprocess_freeing_dead_slots(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Dagster's multiprocess executor (a process per step: the shards of a day run at once),
    freeing first the slots of runs whose process died."""
    create = _MULTIPROCESS.executor_creation_fn
    assert create is not None
    return _FreeingExecutor(create(init_context))


def main() -> int:
    """Free the slots of dead runs in the instance at $DAGSTER_HOME and say which."""
    if not os.environ.get("DAGSTER_HOME"):
        print("DAGSTER_HOME is not set: point it at the instance folder", file=sys.stderr)
        return 1
    with dg.DagsterInstance.get() as instance:
        freed = free_slots_of_dead_runs(instance)
    print(
        "freed the slots of " + ", ".join(freed)
        if freed
        else "no slot is held by a run whose process is gone"
    )
    return 0
