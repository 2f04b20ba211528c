"""The processes the tests start (moto's S3, Phoenix, Prometheus, dagster-webserver, Chromium,
the Dagster CLI, Dask's workers): the programs they need (`require_tool`), how each starts, a
free port on 127.0.0.1, waiting until one answers, stopping it by its process group, and finding
any that outlived its test.

Every process a test starts gets `preexec_fn=default_signals` (Dask's workers call it from their
setup): an ignored signal is inherited through fork and exec, so a suite run under a parent that
ignores SIGTERM (some CI runners and supervisors) or SIGINT (a background job of a script) would
otherwise start servers and Dagster runs whose own children (Dagster's `tail -F` log watchers)
ignore the signal that stops them.
Each server is started with `start_new_session=True`, so its process group is its own: stopping
the group stops whatever the server started too, and nothing outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

HOST = "127.0.0.1"
# The signals that ask a process to stop: Dagster stops its log watchers with SIGTERM and maps
# SIGTERM to its SIGINT handler; a background job of a non-interactive shell ignores SIGINT.
# SIGHUP is left as inherited: `nohup` ignores it on purpose, and nothing here stops a process
# with it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# In the environment of every process this test session starts (tests/conftest.py sets it): a
# process whose parent has exited is no longer a descendant, but it still carries this.
SESSION_MARK = "RETRIEVAL_TESTS_SESSION"
# never through a proxy: every server a test reaches is on this machine
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# The programs some tests need, each with the names it goes by and how to install it. Debian's
# packages are what .ci/run installs; dagster-webserver comes with the test extra.
_APT = "apt-get install {} (.ci/run does)"
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "chromium": (("chromium", "chromium-browser"), _APT.format("chromium")),
    "prometheus": (("prometheus",), _APT.format("prometheus")),
    "promtool": (("promtool",), _APT.format("prometheus")),
    "dagster-webserver": (("dagster-webserver",), "pip install -e '.[test]'"),
}


def in_ci() -> bool:
    """Whether this is a CI run: `CI` set to true (.ci/run exports it; so do GitHub Actions,
    GitLab CI and most runners)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def find_tool(name: str) -> str | None:
    """Where program `name` (a key of `TOOLS`) is: beside this interpreter (a virtual
    environment's scripts), else on PATH; None when it is nowhere."""
    names, _ = TOOLS[name]
    for program in names:
        beside = Path(sys.executable).with_name(program)
        if os.access(beside, os.X_OK):
            return str(beside)
        if found := shutil.which(program):
            return found
    return None


def require_tool(name: str) -> str:
    """The path of program `name` (a key of `TOOLS`). Where it is missing the test is skipped,
    its reason saying how to install it, or, under CI (`in_ci`), fails: a skip in CI would pass
    unseen."""
    path = find_tool(name)
    if path is not None:
        return path
    reason = f"{name} is not installed: {TOOLS[name][1]}"
    if in_ci():
        pytest.fail(f"{reason}; under CI=true a missing tool fails the test", pytrace=False)
    pytest.skip(reason)


def default_signals() -> None:
    """The default action for `STOP_SIGNALS`, none of them blocked: `preexec_fn` of every
    process a test starts, run in the child before it executes its program."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def ignored_signals(pid: int) -> set[int]:
    """The signals process `pid` ignores, from the SigIgn mask of /proc/PID/status (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")]
    bits = int(mask, 16)
    return {number for number in range(1, 65) if bits >> (number - 1) & 1}


@dataclass(frozen=True)
class Survivor:
    """A process this session started that is still running: its id and command line."""

    pid: int
    command: str


def _proc(pid: str, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone meanwhile, or not ours to read
        return b""


def started_processes(mark: str, root: int | None = None) -> list[Survivor]:
    """The live processes below `root` (this process unless told) and those whose environment
    holds `SESSION_MARK=mark`, zombies left out, in pid order (Linux's /proc)."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    marked: set[int] = set()
    needle = f"{SESSION_MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == root:
            continue
        stat = _proc(entry.name, "stat")
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[0] == b"Z":
            continue
        parents[int(entry.name)] = int(fields[1])
        if needle in _proc(entry.name, "environ").split(b"\0"):
            marked.add(int(entry.name))
    below: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - below
        below |= frontier
    found = []
    for pid in sorted(below | marked):
        command = _proc(str(pid), "cmdline").replace(b"\0", b" ").strip()
        if command:  # an empty command line: a kernel thread, or gone meanwhile
            found.append(Survivor(pid, command.decode(errors="replace")))
    return found


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
