"""Files in an S3 store read as they are read locally: listed alike, byte for byte the same.

The store is moto's S3 server, started by the tests on 127.0.0.1 (conftest.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_pipeline.ingest.filesystems import (
    S3Settings,
    StoreError,
    list_files,
    open_file,
    open_stream,
    resolve,
)
from retrieval_pipeline.ingest.judgments import read_judgments
from retrieval_pipeline.ingest.trec import read_trec_run
from tests.processes import free_port
from tests.s3_server import S3

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")


def _day_folder(root: Path) -> Path:
    """A day of trace files as a store holds them, with files that are not data beside them."""
    day = root / "traces" / "date=2026-11-30"
    (day / "hour=01").mkdir(parents=True)
    records = [
        {"trace_id": f"t{i}", "query_id": f"q{i % 3}", "timestamp": "2026-11-30T01:00:00Z",
         "retrieved_ids": [f"d{i}", f"d{i + 1}"], "relevance_scores": {f"d{i}": i % 4}}
        for i in range(50)
    ]  # fmt: skip
    lines = "".join(json.dumps(r) + "\n" for r in records).encode()
    (day / "a.jsonl").write_bytes(lines)
    (day / "hour=01" / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    pq.write_table(pa.Table.from_pylist(records), day / "c.parquet")
    (day / ".c.parquet.partial").write_bytes(b"half a file")
    (day / "_SUCCESS").write_bytes(b"")
    (day / "notes.txt").write_text("not a trace file")
    return day


def test_listing_and_reading_from_s3_is_byte_identical_to_local(s3: S3, tmp_path: Path) -> None:
    local_day = _day_folder(tmp_path)
    s3.upload(tmp_path / "traces", "bucket/identical/traces")

    local = list_files(resolve(local_day), TRACE_SUFFIXES)
    remote = list_files(
        resolve("s3://bucket/identical/traces/date=2026-11-30", s3.settings), TRACE_SUFFIXES
    )

    # hidden names (.partial, _SUCCESS) and other suffixes are left out, alike on both sides
    assert [f.url.removeprefix(str(local_day)) for f in local] == [
        "/a.jsonl",
        "/c.parquet",
        "/hour=01/b.jsonl.gz",
    ]
    prefix = "s3://bucket/identical/traces/date=2026-11-30"
    assert [f.url.removeprefix(prefix) for f in remote] == [
        f.url.removeprefix(str(local_day)) for f in local
    ]
    for here, there in zip(local, remote, strict=True):
        with open_stream(there) as stream:
            assert stream.read() == Path(here.path).read_bytes()
    with open_file(remote[1]) as handle:
        assert pq.read_table(handle).equals(pq.read_table(local[1].path))


def test_judgments_and_runs_read_from_s3_equal_local(s3: S3, tmp_path: Path) -> None:
    (tmp_path / "judgments").mkdir()
    qrels = tmp_path / "judgments" / "set1.qrels"
    qrels.write_text("q1 0 d1 2\nq1 0 d2 -1\nq2 0 d9 x\n")
    labels = tmp_path / "judgments" / "clicks.csv"
    labels.write_text("query_id,doc_id,grade,estimate\nq2,d3,1,0.4\n")
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 d1 1 2.0 tag\nq1 Q0 d2 2 2.0 tag\n")
    s3.upload(tmp_path, "bucket/runs")

    here = read_judgments([tmp_path / "judgments"])
    there = read_judgments(["s3://bucket/runs/judgments"], s3.settings)
    assert there.table.drop_columns(["source_file"]).equals(
        here.table.drop_columns(["source_file"])
    )
    assert there.table["source_file"].to_pylist() == [
        "s3://bucket/runs/judgments/set1.qrels",
        "s3://bucket/runs/judgments/set1.qrels",
        "s3://bucket/runs/judgments/clicks.csv",
    ]
    assert (there.read, there.kept, there.quarantined) == (here.read, here.kept, 1)
    assert there.quarantine["source_file"].to_pylist() == ["s3://bucket/runs/judgments/set1.qrels"]

    assert read_trec_run("s3://bucket/runs/run.txt", settings=s3.settings).ranked() == {
        "q1": ["d2", "d1"]  # tied scores: docno descending
    }


def test_the_endpoint_may_come_from_the_standard_variable(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x.qrels").write_text("q 0 d 1\n")
    s3.upload(tmp_path / "x.qrels", "bucket/env/x.qrels")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    assert S3Settings().endpoint() == s3.endpoint
    assert read_judgments("s3://bucket/env/x.qrels").table["grade"].to_pylist() == [1.0]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # the S3-specific one wins
    assert S3Settings().endpoint() == "http://127.0.0.1:9"
    assert S3Settings(endpoint_url=s3.endpoint).endpoint() == s3.endpoint  # the argument wins


def test_a_missing_key_or_bucket_is_one_line_naming_it(s3: S3) -> None:
    with pytest.raises(StoreError) as missing:
        list_files(resolve("s3://bucket/nothing/here", s3.settings))
    assert str(missing.value) == "s3://bucket/nothing/here: no such file or folder"
    with pytest.raises(StoreError) as no_bucket:
        list_files(resolve("s3://no-such-bucket/x", s3.settings))
    assert "\n" not in str(no_bucket.value)
    assert str(no_bucket.value).startswith("s3://no-such-bucket/x: ")


def test_an_unreachable_store_is_one_line_naming_it(aws_env: None) -> None:
    port = free_port()  # nothing listens there
    settings = S3Settings(endpoint_url=f"http://127.0.0.1:{port}", connect_timeout_s=1,
                          max_attempts=1)  # fmt: skip
    with pytest.raises(StoreError) as failure:
        read_judgments("s3://bucket/judgments/", settings)
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(
        f"cannot reach the object store at http://127.0.0.1:{port} for s3://bucket/judgments/: "
    )


def test_other_schemes_are_refused() -> None:
    with pytest.raises(StoreError, match=r"gs://b/x: unsupported store gs://"):
        resolve("gs://b/x")
    with pytest.raises(StoreError, match="no bucket named"):
        resolve("s3:///key")
