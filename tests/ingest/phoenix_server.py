"""A real Arize Phoenix server for tests: on 127.0.0.1, on free ports, with its SQLite store in a
temporary working directory, telemetry and every outside request off; stopped by its process
group, whatever happens to the test."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.processes import HOST, answers, default_signals, free_port, stop_group, wait_until

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

    def annotate_documents(self, notes: list[dict[str, object]]) -> None:
        """Document annotations written as a user's tools write them (`sync`: stored on return)."""
        import httpx

        answer = httpx.post(
            f"{self.base_url}/v1/document_annotations",
            params={"sync": "true"},
            json={"data": notes},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text


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
            preexec_fn=default_signals,
        )
    try:
        wait_until(
            lambda: answers(f"{url}/healthz", 5), process, "Phoenix", READY_WITHIN_S, log, 0.5
        )
        yield PhoenixServer(url, log)
    finally:
        stop_group(process, STOP_WITHIN_S)
