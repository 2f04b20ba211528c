"""Debian's `prometheus` and `promtool` for the tests: lint an exposition or a rules file, and run
a Prometheus server on 127.0.0.1 in a temporary folder, stopped by its process group.

`.ci/run` installs the Debian package; without it the tests that need it are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
MISSING = (
    "Debian's prometheus package (prometheus, promtool) is not installed: "
    "apt-get install prometheus (.ci/run does)"
)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, MISSING
    return subprocess.run(
        [PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def check_metrics(text: str) -> None:
    """`promtool check metrics`: the exposition parses and follows the naming conventions."""
    done = promtool("check", "metrics", stdin=text)
    assert done.returncode == 0, done.stdout + done.stderr


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process's group, SIGKILL after 10 s; wait for it either way."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


class Prometheus:
    """A running server: its base URL and its HTTP API."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = get_json(f"{self.url}/api/v1/{path}{query}")
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]


@contextlib.contextmanager
def running_prometheus(
    config: Path, folder: Path, ready_within_s: float = 60
) -> Iterator[Prometheus]:
    """Start Prometheus with `config` on a free 127.0.0.1 port, its storage under `folder`;
    yield once `/-/ready` answers; stop it by process group on the way out, failure or not."""
    assert PROMETHEUS is not None, MISSING
    port = free_port()
    log = folder / "prometheus.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,  # its own process group, so the group can be stopped
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + ready_within_s
        while True:
            assert process.poll() is None, f"prometheus exited: {server.tail()}"
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, f"prometheus not ready: {server.tail()}"
            time.sleep(0.2)
        yield server
    finally:
        stop_group(process)
