"""A real Arize Phoenix server for tests: on 127.0.0.1, on free ports, with its SQLite store in a
temporary working directory, telemetry and every outside request off; stopped by its process
group, whatever happens to the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
# Phoenix is ready in about 30 s on a quiet machine; a shared 2-core one can take a few times that.
READY_WITHIN_S = 300
STOP_WITHIN_S = 30


@dataclass(frozen=True)
class PhoenixServer:
    base_url: str
    log: Path

    def send(self, body: bytes) -> None:
        """One OTLP HTTP export request (protobuf), as an OpenTelemetry exporter sends it."""
        request = urllib.request.Request(
            f"{self.base_url}/v1/traces",
            data=body,
            headers={"content-type": "application/x-protobuf"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200, response.read()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _environment(working_dir: Path, port: int, grpc_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
    env.update(
        PHOENIX_WORKING_DIR=str(working_dir),
        PHOENIX_HOST=HOST,
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc_port),
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        PHOENIX_DISABLE_AGENT_ASSISTANT="true",
    )
    return env


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def phoenix_server(working_dir: Path) -> Iterator[PhoenixServer]:
    """Start `phoenix serve`, wait until it answers, yield it, then stop its process group."""
    working_dir.mkdir(parents=True, exist_ok=True)
    port, grpc_port = free_port(), free_port()
    log = working_dir / "server.log"
    url = f"http://{HOST}:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"],
            cwd=working_dir,
            env=_environment(working_dir, port, grpc_port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so that it stops whole
        )
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"Phoenix did not start (exit {process.returncode}):\n{tail}")
            time.sleep(0.5)
        yield PhoenixServer(url, log)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group, SIGKILL if it lingers, then SIGKILL to whatever of the group is left
    once the server itself has gone (a worker it started)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_WITHIN_S)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        pass
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
