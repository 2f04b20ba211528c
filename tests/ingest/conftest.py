"""Fixtures of the object-store tests: an S3 server (moto's server mode, `s3_server.py`) started
once per session on 127.0.0.1, and AWS variables that name only that server.

Each test that uses the server gets fresh AWS variables and the instance metadata service
switched off, so no test reaches any other address.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from retrieval_pipeline.ingest.filesystems import S3Settings

from .s3_server import S3, moto_server


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
