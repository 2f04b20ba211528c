"""An object store that cannot be read, named as TRACES: one line on standard error naming the
URL and the cause, exit code 1, as for `--judgments` and every other bad input; never a
traceback (once 35 to 50 lines)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import default_signals, free_port
from tests.s3_server import S3

RUN_WITHIN_S = 300


def run_cli(*args: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    """The command line in its own process, the object store at `endpoint`."""
    environment = {**os.environ, "AWS_ENDPOINT_URL_S3": endpoint}
    return subprocess.run(
        [sys.executable, "-c", "from retrieval_pipeline.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=RUN_WITHIN_S,
        check=False,
        preexec_fn=default_signals,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0].removeprefix("Error: ")


def traces_file(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    record = '{"trace_id":"t1","query_id":"q1","timestamp":"2026-12-01T10:00:00Z",'
    path.write_text(record + '"retrieved_ids":["d1"],"relevant_ids":["d1"]}\n', encoding="utf-8")
    return path


def test_a_missing_bucket_named_as_traces_is_one_line_as_for_judgments(
    s3: S3, tmp_path: Path
) -> None:
    url = "s3://no-such-bucket/traces/"
    as_traces = one_error_line(run_cli("evaluate", url, endpoint=s3.endpoint))
    judgments = ("evaluate", str(traces_file(tmp_path)), "--judgments", url)
    as_judgments = one_error_line(run_cli(*judgments, endpoint=s3.endpoint))
    assert as_traces == f"{url}: no such file or folder"
    assert as_traces == as_judgments  # one mechanism: the same words for the same failure


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_an_object_store_that_is_down_is_one_line_naming_it(aws_env: None, command: str) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    url = "s3://bucket/traces/"
    args = [command, url] + (["--control", "a", "--candidate", "b"] if command == "compare" else [])
    line = one_error_line(run_cli(*args, endpoint=endpoint))
    assert line.startswith(f"cannot reach the object store at {endpoint} for {url}: ")
