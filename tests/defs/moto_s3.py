"""An S3 server for tests: moto's, in a process of its own on 127.0.0.1 at a free port, with a
bucket; stopped by its process group (and waited for) when the block ends, failure or not."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.fs as pafs

HOST = "127.0.0.1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@contextmanager
def s3_server(folder: Path, bucket: str = "shards") -> Iterator[dict[str, str]]:
    """Yields the environment that reaches it (endpoint and credentials), `bucket` created."""
    port = _free_port()
    endpoint = f"http://{HOST}:{port}"
    command = [str(Path(sys.executable).parent / "moto_server"), "-H", HOST, "-p", str(port)]
    with (folder / "moto.log").open("w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=folder
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log_text = (folder / "moto.log").read_text()
                    raise RuntimeError(f"moto did not start: {log_text}") from None
                time.sleep(0.2)
        env = {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": endpoint}
        fs = pafs.S3FileSystem(
            access_key="testing", secret_key="testing", region="us-east-1",
            endpoint_override=f"{HOST}:{port}", scheme="http", allow_bucket_creation=True,
        )  # fmt: skip
        fs.create_dir(bucket)
        yield env
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
