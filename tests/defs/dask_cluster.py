"""A Dask distributed cluster for tests: a scheduler and worker processes on 127.0.0.1 only.

`local_cluster()` starts a `dask.distributed.LocalCluster` (no dashboard, random free ports, its
files in a temporary folder), yields the scheduler's address, and closes it on the way out,
failure or not; a worker process still alive after the close is killed by its process id and
waited for, so no test leaves one behind.

The workers are spawned by Dask (multiprocessing), so no `preexec_fn` reaches them: each runs this
module's `dask_setup` as it starts (Dask's preload), which gives it the default action for
SIGTERM and SIGINT (`tests.processes.default_signals`). The processes a step starts there, such as
Dagster's `tail -F` log watchers, inherit it and stop when Dagster asks.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from dask.distributed import Client, LocalCluster, Worker

from tests.processes import default_signals

HOST = "127.0.0.1"


def dask_setup(worker: Worker) -> None:
    """Dask's preload hook, run in each worker process as it starts (module docstring)."""
    default_signals()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child that exited but was not reaped yet is not alive
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not our child: it exists
    return done == 0


def _stop(pids: list[int], grace_s: float = 10.0) -> None:
    """Wait for `pids` to exit; kill those still there after `grace_s`, and wait for them."""
    deadline = time.monotonic() + grace_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


@contextmanager
def local_cluster(workers: int = 2) -> Iterator[str]:
    """A LocalCluster of `workers` single-threaded worker processes; yields the scheduler's
    address (tcp://127.0.0.1:PORT)."""
    with tempfile.TemporaryDirectory(prefix="dask-test-") as folder:
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host=HOST,
            scheduler_port=0,
            dashboard_address=None,
            local_directory=folder,
            preload=[__name__],
        )
        pids: list[int] = []
        try:
            with Client(cluster) as client:
                client.wait_for_workers(workers, timeout=60)
                pids = sorted(client.run(os.getpid).values())
            yield cluster.scheduler_address
        finally:
            cluster.close(timeout=30)
            _stop(pids)


def worker_pids(address: str) -> list[int]:
    """The process ids of the cluster's workers."""
    with Client(address) as client:
        return sorted(client.run(os.getpid).values())
