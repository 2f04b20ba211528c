"""The Dask harness: a two-worker LocalCluster on 127.0.0.1, and a Dagster job run on it
through `dagster_dask.dask_executor` with the scheduler's address in the run config."""

import os
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from tests.defs import dask_jobs
from tests.defs.dask_cluster import HOST, local_cluster, worker_pids


@pytest.fixture
def dask_scheduler() -> Iterator[str]:
    with local_cluster(workers=2) as address:
        yield address


def test_the_cluster_listens_on_localhost_with_two_worker_processes(dask_scheduler: str) -> None:
    assert dask_scheduler.startswith(f"tcp://{HOST}:")
    pids = worker_pids(dask_scheduler)
    assert len(pids) == 2 and os.getpid() not in pids


def test_a_job_runs_on_the_cluster(dask_scheduler: str, tmp_path: Path) -> None:
    workers = worker_pids(dask_scheduler)
    home = tmp_path / "dagster_home"
    home.mkdir()
    run_config = {"execution": {"config": {"cluster": {"existing": {"address": dask_scheduler}}}}}
    with (
        dg.DagsterInstance.local_temp(str(home)) as instance,
        dg.execute_job(
            dg.reconstructable(dask_jobs.sum_of_squares), instance=instance, run_config=run_config
        ) as result,
    ):
        assert result.success
        out = result.output_for_node("total")
    assert out["sum"] == 1 + 4 + 9 + 16 + 25 + 36 + 49 + 64 + 81 + 100
    assert out["pid"] in workers  # computed in a worker process, not in this one


def test_the_cluster_and_its_workers_are_gone_after_a_failure() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="the test failed"), local_cluster(workers=2) as address:
        pids = worker_pids(address)
        raise RuntimeError("the test failed")
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
