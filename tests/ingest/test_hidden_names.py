"""Hidden names hold no data (`store.is_hidden`): a file or folder whose name starts with `.` or
`_` (an upload in progress, Spark's `_SUCCESS` and `_temporary/`) is left out by every listing,
alike in a local folder and in an S3 bucket (moto, on 127.0.0.1), even with a trace file's
suffix: `filesystems.list_files`, a store's day (`trace_files` / `day_source`) and its corpus.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_pipeline.ingest.filesystems import list_files, resolve
from retrieval_pipeline.ingest.stores import open_store
from retrieval_pipeline.store import TRACE_SUFFIXES, day_source
from tests.s3_server import S3
from tests.test_store import DAY, touch

DATA = ["a.jsonl", "hour=01/f.parquet"]  # the day's data: one file beside, one in a subfolder
HIDDEN = [
    ".b.jsonl",  # an upload in progress
    "_c.jsonl",
    "_temporary/0/d.jsonl",  # Spark's attempt folder
    ".staging/e.parquet",
    "hour=01/_g.jsonl.gz",
    "_SUCCESS",
]


def _store(root: Path) -> Path:
    day = root / "traces" / f"date={DAY.isoformat()}"
    for name in [*DATA, *HIDDEN]:
        touch(day / name)
    # a corpus folder holding only hidden snapshots: no corpus at all
    touch(root / "corpus" / "_snapshot.parquet", "")
    touch(root / "corpus" / ".upload.csv", "doc_id,text\n")
    return root


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same store in a local folder and in the S3 server."""
    local = _store(tmp_path / "store")
    if request.param == "local":
        return str(local)
    s3: S3 = request.getfixturevalue("s3")
    s3.upload(local, "bucket/hidden/store")
    request.getfixturevalue("monkeypatch").setenv("AWS_ENDPOINT_URL", s3.endpoint)
    return "s3://bucket/hidden/store"


def test_a_listing_leaves_out_every_hidden_name_at_any_depth(root: str) -> None:
    day = f"{root}/traces/date={DAY.isoformat()}"
    listed = list_files(resolve(day), TRACE_SUFFIXES)
    assert [f.url.removeprefix(day + "/") for f in listed] == DATA


def test_a_store_serves_neither_hidden_trace_files_nor_a_hidden_corpus(root: str) -> None:
    store = open_store(root)
    files = day_source(store, DAY)
    assert isinstance(files, list)
    # the day's folder only (not its subfolders), hidden names left out
    assert [str(f).rsplit("/", 1)[-1] for f in files] == ["a.jsonl"]
    assert store.corpus_file() is None
