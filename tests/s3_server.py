"""An S3 server for the object-store tests: moto's server mode, as a separate process, and the
fixtures that use it (a folder's conftest.py imports them: `s3_endpoint`, `aws_env`, `s3`).

The server runs on 127.0.0.1 on a free port, in a temporary directory, in its own process group,
once per session; it is stopped by that group's id (SIGTERM, then SIGKILL) and waited for, also
when a test fails. Each test that uses it gets fresh AWS variables naming only that server, with
the instance metadata service switched off and proxies unset, so no test reaches any other
address.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from retrieval_pipeline.ingest.filesystems import S3Settings
from tests.processes import answers, default_signals, free_port, stop_group, wait_until

START_TIMEOUT_S = 60.0


def _moto_command(port: int) -> list[str]:
    beside = Path(sys.executable).parent / "moto_server"
    program = [str(beside)] if beside.exists() else [sys.executable, "-m", "moto.server"]
    return [*program, "-H", "127.0.0.1", "-p", str(port)]


@contextmanager
def moto_server(folder: Path) -> Iterator[str]:
    """A moto S3 server running in `folder` while the block runs; its URL."""
    log = folder / "moto.log"
    with log.open("wb") as out:
        port = free_port()
        process = subprocess.Popen(
            _moto_command(port),
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as one
            preexec_fn=default_signals,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until(
                lambda: answers(f"{url}/moto-api/"),
                process,
                "moto_server",
                START_TIMEOUT_S,
                log,
                poll_s=0.1,
            )
            yield url
        finally:
            stop_group(process)


@dataclass(frozen=True)
class S3:
    """The server as a test sees it: its URL, settings for the code under test, and a file
    system for the test's own setup (it may create buckets)."""

    endpoint: str
    settings: S3Settings
    admin: pafs.S3FileSystem

    def upload(self, local: Path, key: str) -> None:
        """Copy a local file or folder to `key` (`bucket/prefix`), byte for byte (pyarrow would
        gzip a `.gz` name once more unless told not to)."""
        if local.is_file():
            with (
                local.open("rb") as source,
                self.admin.open_output_stream(key, compression=None) as target,
            ):
                target.write(source.read())
            return
        for path in sorted(local.rglob("*")):
            if path.is_file():
                self.upload(path, f"{key.rstrip('/')}/{path.relative_to(local).as_posix()}")


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server running for this test session."""
    pytest.importorskip("moto", reason="the S3 tests need moto[server] (test extra)")
    with moto_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


# unset: another account or endpoint, and proxies (the S3 clients would send requests through one)
_UNSET = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    *(f"{name}_proxy" for name in ("http", "https", "all")),
    *(f"{name}_PROXY" for name in ("HTTP", "HTTPS", "ALL")),
)


@pytest.fixture()
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """AWS variables that name no real account and no metadata service."""
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


@pytest.fixture()
def s3(s3_endpoint: str, aws_env: None) -> S3:
    """The session's S3 server with a bucket named `bucket`."""
    admin = pafs.S3FileSystem(
        endpoint_override=s3_endpoint.removeprefix("http://"),
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    admin.create_dir("bucket")
    settings = S3Settings(endpoint_url=s3_endpoint, connect_timeout_s=2, max_attempts=2)
    return S3(s3_endpoint, settings, admin)
