"""A sharded day's plan and where its shards write: pure (pyarrow's file systems, no DuckDB).

A day's files are dealt to shards by size, largest first, each to the shard holding the fewest
bytes so far (ties: the lower file, the lower shard), so that shards are even where file sizes are
not; each file keeps its place in the whole day's listing (`file_order`), which orders records
for the repeated-`trace_id` rule. Shard outputs go under
`<root>/date=YYYY-MM-DD/run=<run id>/shard=<i>-of-<n>/`, where the root is a local folder or an
`s3://bucket/prefix` URL (docs/scaling.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow.fs as pafs

S3_SCHEME = "s3://"
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DayFile:
    """One trace file of a day: its place in the day's listing, path and size in bytes."""

    order: int
    path: str
    size: int


def deal(files: Sequence[DayFile], shards: int) -> list[list[DayFile]]:
    """`files` dealt to `shards` shards, by size (see the module); each shard's files in their
    day order. A shard may get none (fewer files than shards)."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    loads = [0] * shards
    dealt: list[list[DayFile]] = [[] for _ in range(shards)]
    for file in sorted(files, key=lambda f: (-f.size, f.order)):
        lightest = min(range(shards), key=lambda i: (loads[i], i))
        loads[lightest] += file.size
        dealt[lightest].append(file)
    return [sorted(share, key=lambda f: f.order) for share in dealt]


def day_files(paths: Sequence[Path]) -> list[DayFile]:
    """The day's trace files (in the store's order) with their sizes."""
    return [DayFile(order, str(path), path.stat().st_size) for order, path in enumerate(paths)]


def shard_folder(root: str, day: date, run_id: str, index: int, count: int) -> str:
    """Where shard `index` of `count` writes day `day` of run `run_id`."""
    return "/".join(
        [root.rstrip("/"), f"date={day.isoformat()}", f"run={run_id}", f"shard={index}-of-{count}"]
    )


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The file system of a local path or an `s3://` URL, and the path within it.

    S3: credentials as the AWS SDK finds them (`AWS_ACCESS_KEY_ID`, ...); an S3-compatible
    store's endpoint from `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` (`http://` spoken
    without TLS); the region from `AWS_REGION`, else `AWS_DEFAULT_REGION`, else us-east-1."""
    if not location.startswith(S3_SCHEME):
        return pafs.LocalFileSystem(), str(Path(location).absolute())
    endpoint = next((os.environ[v] for v in ENDPOINT_VARIABLES if os.environ.get(v)), None)
    region = next((os.environ[v] for v in REGION_VARIABLES if os.environ.get(v)), "us-east-1")
    options: dict[str, object] = {"region": region, "connect_timeout": 5, "request_timeout": 30}
    if endpoint:
        scheme, _, rest = endpoint.partition("://")
        options |= {"endpoint_override": rest or scheme, "scheme": scheme if rest else "https"}
    return pafs.S3FileSystem(**options), location[len(S3_SCHEME) :]


def default_root(warehouse_folder: Path) -> str:
    """The shard root when none is configured: beside the warehouse file."""
    return str(warehouse_folder / "shards")
