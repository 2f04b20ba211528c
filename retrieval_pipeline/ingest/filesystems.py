"""Where files live: a local path or an `s3://bucket/key` URL, resolved to a pyarrow file system.

Object stores are reached through pyarrow's own S3 file system (it ships with pyarrow: nothing
more to install), never through a DuckDB extension, which cannot be installed offline here.
Credentials come from the usual AWS places, read by the AWS SDK itself: `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, then `AWS_PROFILE` and the shared credentials
file. An S3-compatible store (MinIO, Ceph, moto) is named by an endpoint URL: the argument
`S3Settings.endpoint_url` when given, else the standard variables `AWS_ENDPOINT_URL_S3` and then
`AWS_ENDPOINT_URL` (the names the AWS command line and SDKs read, so that one setting serves this
project, `aws s3` and Delta Lake alike); an `http://` endpoint is spoken to without TLS. The
region is `S3Settings.region`, else `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`.

Every failure to reach or read a store is raised as `StoreError`, one line that names the URL
and, for a store that cannot be reached, its endpoint; the connect timeout and the number of
attempts are bounded (`S3Settings`), so an unreachable store fails in seconds, not minutes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from retrieval_pipeline.store import is_hidden

S3_SCHEME = "s3://"
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
DEFAULT_REGION = "us-east-1"
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Words that mean the store was not reached at all
# (pyarrow's, then Delta Lake's object store).
_UNREACHABLE = (
    "NETWORK_CONNECTION",
    "curlCode",
    "Could not connect",
    "Couldn't resolve",
    "error sending request",
    "tcp connect error",
)


class StoreError(OSError):
    """A store or file that cannot be reached or read; the message is one line naming it."""


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3 or an S3-compatible store; None means: from the environment."""

    endpoint_url: str | None = None
    region: str | None = None
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_attempts: int = 3

    def endpoint(self) -> str | None:
        """The endpoint URL in force (the argument, else the environment), or None for AWS."""
        if self.endpoint_url:
            return self.endpoint_url
        return next((os.environ[v] for v in ENDPOINT_VARIABLES if os.environ.get(v)), None)

    def region_name(self) -> str:
        if self.region:
            return self.region
        return next((os.environ[v] for v in REGION_VARIABLES if os.environ.get(v)), DEFAULT_REGION)

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 file system with these settings (credentials from the environment)."""
        endpoint = self.endpoint()
        options: dict[str, object] = {}
        if endpoint:
            parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
            options["scheme"] = parts.scheme
        return pafs.S3FileSystem(
            region=self.region_name(),
            connect_timeout=self.connect_timeout_s,
            request_timeout=self.request_timeout_s,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=self.max_attempts),
            **options,
        )

    def storage_options(self) -> dict[str, str]:
        """The same settings for Delta Lake's object store (`deltalake`'s `storage_options`);
        credentials it reads from the environment itself."""
        options = {
            "AWS_REGION": self.region_name(),
            "connect_timeout": f"{self.connect_timeout_s:g}s",
            "timeout": f"{self.request_timeout_s:g}s",
            "max_retries": str(max(self.max_attempts - 1, 0)),
            "retry_timeout": f"{self.request_timeout_s * self.max_attempts:g}s",
        }
        endpoint = self.endpoint()
        if endpoint:
            options["AWS_ENDPOINT_URL"] = endpoint
            if endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        return options


@dataclass(frozen=True)
class Location:
    """One file or folder: `url` as a user wrote it (for messages), `path` inside `filesystem`."""

    url: str
    filesystem: pafs.FileSystem = field(compare=False)
    path: str
    endpoint: str | None = None  # the object store's endpoint, when one was set

    @property
    def remote(self) -> bool:
        return self.url.startswith(S3_SCHEME)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def child(self, path: str) -> Location:
        """A file found under this folder, with its own URL."""
        relative = path[len(self.path.rstrip("/")) :].lstrip("/")
        url = f"{self.url.rstrip('/')}/{relative}" if relative else self.url
        return Location(url, self.filesystem, path, self.endpoint)


def is_url(source: str | Path) -> bool:
    """Whether `source` names a store by URL (`s3://...`) rather than a local path."""
    return isinstance(source, str) and _URL.match(source) is not None


def resolve(source: str | Path, settings: S3Settings | None = None) -> Location:
    """A local path (made absolute) or an `s3://bucket/key` URL as a `Location`; any other
    scheme is refused."""
    if isinstance(source, str) and (scheme := _URL.match(source)):
        if not source.startswith(S3_SCHEME):
            raise StoreError(
                f"{source}: unsupported store {scheme.group(1)}://; use a local path or s3://"
            )
        key = source[len(S3_SCHEME) :]
        if not key.split("/", 1)[0]:
            raise StoreError(f"{source}: no bucket named; write s3://bucket/prefix")
        chosen = settings or S3Settings()
        endpoint = chosen.endpoint()
        with store_errors(source, endpoint):
            filesystem = chosen.filesystem()
        return Location(source, filesystem, key.rstrip("/") or key, endpoint)
    path = Path(source).expanduser().absolute()
    return Location(str(path), pafs.LocalFileSystem(), path.as_posix())


def _hidden(relative: str) -> bool:
    """A hidden name (`store.is_hidden`) anywhere below the root."""
    return any(is_hidden(part) for part in relative.split("/") if part)


def list_files(location: Location, suffixes: tuple[str, ...] | None = None) -> list[Location]:
    """The file itself, or every file under the folder (recursively, hidden names left out,
    only names ending in one of `suffixes` when given, case-insensitive), in path order."""
    with store_errors(location.url, location.endpoint):
        info = location.filesystem.get_file_info(location.path)
        if info.type == pafs.FileType.NotFound:
            raise StoreError(f"{location.url}: no such file or folder")
        if info.type == pafs.FileType.File:
            return [location]
        selector = pafs.FileSelector(location.path, recursive=True)
        infos = location.filesystem.get_file_info(selector)
    root = location.path.rstrip("/")
    found: list[Location] = []
    for entry in infos:
        if entry.type != pafs.FileType.File or _hidden(entry.path[len(root) :]):
            continue
        if suffixes is not None and not entry.path.lower().endswith(suffixes):
            continue
        found.append(location.child(entry.path))
    return sorted(found, key=lambda found_location: found_location.path)


def open_stream(location: Location) -> pa.NativeFile:
    """The file's bytes as stored (`.read(n)`): a `.gz` file is not decompressed here, where
    pyarrow would by default, so that `ingest.gzip` reads every gzip stream the same way."""
    with store_errors(location.url, location.endpoint):
        return location.filesystem.open_input_stream(location.path, compression=None)


def open_file(location: Location) -> pa.NativeFile:
    """The file for random access (Parquet's footer is at its end)."""
    with store_errors(location.url, location.endpoint):
        return location.filesystem.open_input_file(location.path)


@contextmanager
def store_errors(url: str, endpoint: str | None = None) -> Iterator[None]:
    """Re-raise what a file system raises as a one-line `StoreError` naming `url` (and, when the
    store could not be reached, its endpoint)."""
    try:
        yield
    except StoreError:
        raise
    except FileNotFoundError as exc:
        raise StoreError(f"{url}: no such file or folder") from exc
    except OSError as exc:
        raise StoreError(describe_failure(url, endpoint, str(exc))) from exc


def describe_failure(url: str, endpoint: str | None, message: str) -> str:
    """One line for a store's failure, from the file system's own (often multi-line) message."""
    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", message).split())
    if any(word in text for word in _UNREACHABLE):
        where = endpoint or "its AWS endpoint"
        cause = _cause(text)
        return f"cannot reach the object store at {where} for {url}: {cause}"
    return f"{url}: {_cause(text)}"


def _cause(text: str) -> str:
    """The part of an AWS SDK message that says what happened, without request ids."""
    for marker in ("operation: ", "AWS Error "):
        if marker in text:
            text = text.split(marker, 1)[1]
            break
    text = re.split(r" \(Request ID|; Details:", text, maxsplit=1)[0]
    text = re.sub(r"curlCode: [0-9]+, ", "", text)
    return text[:200]
