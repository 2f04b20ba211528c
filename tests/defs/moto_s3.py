"""An S3 server for the sharded-nightly tests: moto's (`tests.s3_server.moto_server`, on
127.0.0.1 at a free port, stopped by its process group when the block ends, failure or not), with
a bucket and the environment that reaches it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.fs as pafs

from tests.s3_server import moto_server

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}


@contextmanager
def s3_server(folder: Path, bucket: str = "shards") -> Iterator[dict[str, str]]:
    """Yields the environment that reaches it (endpoint and credentials), `bucket` created."""
    with moto_server(folder) as endpoint:
        fs = pafs.S3FileSystem(
            access_key="testing", secret_key="testing", region="us-east-1",
            endpoint_override=endpoint.removeprefix("http://"), scheme="http",
            allow_bucket_creation=True,
        )  # fmt: skip
        fs.create_dir(bucket)
        yield {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": endpoint}
