"""Debian's `prometheus` and `promtool` for the tests: lint an exposition or a rules file, and run
a Prometheus server on 127.0.0.1 in a temporary folder, stopped by its process group.

`.ci/run` installs the Debian package; without it the tests that need it are skipped, or fail
under CI (`tests.processes.require_tool`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.processes import (
    answers,
    default_signals,
    free_port,
    require_tool,
    stop_group,
    wait_until,
)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=default_signals,
    )


def check_metrics(text: str) -> None:
    """`promtool check metrics`: the exposition parses and follows the naming conventions."""
    done = promtool("check", "metrics", stdin=text)
    assert done.returncode == 0, done.stdout + done.stderr


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


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
    program = require_tool("prometheus")
    port = free_port()
    log = folder / "prometheus.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                program,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,  # its own process group, so the group can be stopped
            preexec_fn=default_signals,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    try:
        wait_until(
            lambda: answers(f"{server.url}/-/ready"), process, "prometheus", ready_within_s, log
        )
        yield server
    finally:
        stop_group(process)
