"""The servers the tests start (moto's S3, Phoenix, Prometheus, dagster-webserver, Chromium):
a free port on 127.0.0.1, waiting until one answers, and stopping it by its process group.

Each server is started with `start_new_session=True`, so its process group is its own: stopping
the group stops whatever the server started too, and nothing outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

HOST = "127.0.0.1"
# never through a proxy: every server a test reaches is on this machine
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether a GET of `url` succeeds (a 2xx answer) now."""
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            return bool(200 <= response.status < 300)
    except (urllib.error.URLError, OSError):
        return False


def wait_until(
    ready: Callable[[], bool],
    process: subprocess.Popen[bytes],
    what: str,
    within_s: float,
    log: Path | None = None,
    poll_s: float = 0.2,
) -> None:
    """Return once `ready()` is true; RuntimeError naming `what` and the end of `log` when the
    process exits first or `within_s` passes."""
    deadline = time.monotonic() + within_s
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            state = (
                f"exited with {process.returncode}"
                if process.returncode is not None
                else f"not ready after {within_s:.0f} s"
            )
            tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"{what} {state}:\n{tail}")
        time.sleep(poll_s)


def stop_group(process: subprocess.Popen[bytes], within_s: float = 10) -> None:
    """SIGTERM to the process's group, SIGKILL when it lingers past `within_s`, then SIGKILL to
    whatever of the group is left once the leader has gone (a worker it started); waited for."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=within_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
