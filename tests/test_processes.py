"""The processes the tests start (tests/processes.py): under a parent that ignores SIGTERM and
SIGINT (`nohup`, a CI runner's background job) each still starts with their default action, and
so do the processes those start in turn (Dagster's `tail -F` log watchers on a Dask worker); and a
process the session started is found after its parent has gone (tests/conftest.py's check).

Linux only: a process's ignored signals are read from /proc/PID/status.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dask.distributed import Client

from tests.dagster_runs import ForkServer
from tests.defs.dask_cluster import local_cluster
from tests.processes import (
    SESSION_MARK,
    STOP_SIGNALS,
    TOOLS,
    default_signals,
    ignored_signals,
    require_tool,
    started_processes,
)

TESTS = Path(__file__).resolve().parent
STARTS = {"Popen", "run", "call", "check_call", "check_output"}


@contextlib.contextmanager
def ignoring_stop_signals() -> Iterator[None]:
    """This process ignores SIGTERM and SIGINT while the block runs, as a test process started by
    a parent that ignores them does; what it had is restored after."""
    saved = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def _ends_on_sigterm(process: subprocess.Popen[bytes], within_s: float) -> bool:
    process.terminate()
    try:
        return process.wait(timeout=within_s) == -signal.SIGTERM
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False


def test_the_helper_gives_a_child_the_default_action_where_the_parent_ignores_it() -> None:
    with ignoring_stop_signals():
        plain = subprocess.Popen(["sleep", "60"], preexec_fn=None)  # the control: as inherited
        helped = subprocess.Popen(["sleep", "60"], preexec_fn=default_signals)
    # SIGTERM is 15, SIGINT 2: bits 14 and 1 of the SigIgn mask
    assert {signal.SIGTERM, signal.SIGINT} <= ignored_signals(plain.pid)
    assert not {signal.SIGTERM, signal.SIGINT} & ignored_signals(helped.pid)
    assert not _ends_on_sigterm(plain, within_s=1.0)  # it ignored SIGTERM: killed instead
    assert _ends_on_sigterm(helped, within_s=10.0)


def test_the_dagster_run_server_does_not_inherit_ignored_signals(tmp_path: Path) -> None:
    """The process that forks the fault tests' Dagster CLI runs (`dagster_runs.ForkServer`): a
    Python program that installs no handler of its own, so it keeps whatever it starts with.
    (Servers such as Prometheus, Phoenix or moto handle SIGTERM and SIGINT themselves, so they
    cannot show the difference.)"""
    with ignoring_stop_signals():
        server = ForkServer({"DAGSTER_HOME": str(tmp_path)})
    try:
        assert not set(STOP_SIGNALS) & ignored_signals(server.pid)
    finally:
        server.close()


def _a_step_starts_a_watcher() -> tuple[set[int], set[int], bool]:
    """Run on a Dask worker: what the worker ignores, and a child it starts as Dagster starts its
    `tail -F` log watchers (a plain Popen), and whether that child ends on SIGTERM."""
    watcher = subprocess.Popen(["sleep", "60"], preexec_fn=None)  # as Dagster starts it
    return ignored_signals(os.getpid()), ignored_signals(watcher.pid), _ends_on_sigterm(watcher, 10)


def test_a_dask_worker_and_what_it_starts_stop_on_sigterm_under_an_ignoring_parent() -> None:
    with ignoring_stop_signals(), local_cluster(workers=1) as address, Client(address) as client:
        ((worker, watcher, ended),) = client.run(_a_step_starts_a_watcher).values()
    assert not set(STOP_SIGNALS) & worker
    assert not set(STOP_SIGNALS) & watcher
    assert ended


def _orphan(*prefix: str) -> int:
    """A `sleep 60` whose parent shell has exited (so it is no longer below this process)."""
    done = subprocess.run(
        [*prefix, "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        preexec_fn=default_signals,
    )
    return int(done.stdout)


def test_a_process_whose_parent_exited_is_still_found_by_its_mark() -> None:
    mark = os.environ[SESSION_MARK]
    marked = _orphan()
    unmarked = _orphan("env", "-u", SESSION_MARK)  # started here, but without the mark
    try:
        assert _parent(marked) != os.getpid()  # the shell has exited: not below this process
        found = {survivor.pid: survivor.command for survivor in started_processes(mark)}
        assert found.get(marked) == "sleep 60"
        assert unmarked not in found
    finally:
        for pid in (marked, unmarked):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def test_every_process_the_tests_start_gets_the_default_signals() -> None:
    """Each `subprocess` call under tests/ names `preexec_fn=default_signals`, or `None` where a
    test wants what is inherited (the controls above)."""
    missing = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
                and node.func.attr in STARTS
            ):
                continue
            given = {k.arg: k.value for k in node.keywords}.get("preexec_fn")
            named = isinstance(given, ast.Name) and given.id == "default_signals"
            control = isinstance(given, ast.Constant) and given.value is None
            if not (named or (control and path == Path(__file__))):
                missing.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert missing == [], "start these with preexec_fn=default_signals (tests/processes.py)"


def test_a_missing_tool_skips_with_its_reason_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(TOOLS, "absent", (("no-such-program-here",), "install it so"))
    monkeypatch.setitem(TOOLS, "shell", (("no-such-program-here", "sh"),
                                         "comes with the system"))  # fmt: skip
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^absent is not installed: install it so$"):
        require_tool("absent")
    assert require_tool("shell") == shutil.which("sh")  # the first name found
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        require_tool("absent")
    assert str(failed.value) == (
        "absent is not installed: install it so; under CI=true a missing tool fails the test"
    )
    assert require_tool("shell") == shutil.which("sh")
