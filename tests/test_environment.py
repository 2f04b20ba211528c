"""Every environment variable is validated where it is read, with its name and value in the
message (issue 27, class 10): `RETRIEVAL_PIPELINE_DUCKDB_MEMORY_LIMIT=garbage` was a traceback and
`-1GB` silently meant no limit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from retrieval_pipeline import environment as env
from retrieval_pipeline.cli import main
from retrieval_pipeline.environment import EnvironmentValueError
from tests.processes import default_signals

MEMORY = env.DUCKDB_MEMORY_LIMIT

# DuckDB's own reading of a memory limit, e.g. "488.2 MiB"
_SHOWN = re.compile(r"([0-9.]+) (bytes|KiB|MiB|GiB|TiB)")
_SHOWN_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def duckdb_bytes(limit: str) -> tuple[float, float]:
    """The memory limit DuckDB sets for `limit` (the oracle), in bytes, and how far that can be
    below the limit itself: DuckDB shows one decimal of its unit, cut (512MB is 488.28 MiB,
    shown `488.2 MiB`)."""
    conn = duckdb.connect(config={"memory_limit": limit})
    try:
        row = conn.execute("select current_setting('memory_limit')").fetchone()
    finally:
        conn.close()
    assert row is not None
    match = _SHOWN.fullmatch(str(row[0]))
    assert match is not None, row
    unit = _SHOWN_UNITS[match.group(2)]
    return float(match.group(1)) * unit, 0.1 * unit


def refusal(reader: object, name: str, value: str) -> str:
    with pytest.raises(EnvironmentValueError) as caught:
        reader({name: value})  # type: ignore[operator]
    message = str(caught.value)
    assert message.startswith(f"{name}={value.strip()!r}: "), message
    return message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("512MB", 512e6),
        ("4GB", 4e9),
        ("2 GiB", 2 * 2**30),
        ("1.5GB", 1.5e9),
        (" 768MiB ", 768 * 2**20),
        ("8MB", 8e6),
        ("1tb", 1e12),
    ],
)
def test_a_memory_limit_duckdb_reads_the_same(value: str, expected: float) -> None:
    limit = env.memory_limit({MEMORY: value})
    assert env.memory_limit_bytes(limit) == pytest.approx(expected)
    shown, cut = duckdb_bytes(limit)
    assert expected - cut < shown <= expected


def test_a_percent_memory_limit_is_passed_on() -> None:
    assert env.memory_limit({MEMORY: "50%"}) == "50%"
    assert env.memory_limit_bytes("50%") is None


@pytest.mark.parametrize("unset", [{}, {MEMORY: ""}, {MEMORY: "   "}])
def test_an_unset_memory_limit_is_the_default(unset: dict[str, str]) -> None:
    assert env.memory_limit(unset) == env.DEFAULT_MEMORY_LIMIT == "512MB"


@pytest.mark.parametrize(
    "value",
    ["garbage", "-1GB", "-1", "1000", "1e3MB", "100PB", "1 terabyte", "150%", "0%", "GB", "nan GB"],
)
def test_a_memory_limit_that_is_not_a_size_is_refused(value: str) -> None:
    message = refusal(env.memory_limit, MEMORY, value)
    assert "must be a size such as 512MB or 4GB" in message


@pytest.mark.parametrize("value", ["0GB", "1KB", "7.9MB", "100B"])
def test_a_memory_limit_too_small_to_run_is_refused(value: str) -> None:
    assert "must be at least 8MB" in refusal(env.memory_limit, MEMORY, value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", True), ("1", True), ("yes", True), ("TRUE", True), ("0", False), (" no ", False)],
)
def test_store_retrieved_ids_reads_yes_or_no(value: str, expected: bool) -> None:
    assert env.store_retrieved_ids({env.STORE_RETRIEVED_IDS: value}) is expected


def test_store_retrieved_ids_refuses_anything_else() -> None:
    message = refusal(env.store_retrieved_ids, env.STORE_RETRIEVED_IDS, "maybe")
    assert message.endswith("must be 1, true, yes, 0, false or no")


def test_the_start_date() -> None:
    assert env.start_date({}) is None  # unset: the config's, else the store's earliest day
    assert env.start_date({env.START_DATE: "2025-06-30"}) == date(2025, 6, 30)
    for value in ["2026-13-45", "20260101", "yesterday", "2026-02-30", "9999-12-31", "1899-12-31"]:
        message = refusal(env.start_date, env.START_DATE, value)
        assert "must be a date YYYY-MM-DD from 1900-01-01 to 2999-12-31" in message


def test_the_live_interval() -> None:
    assert env.live_interval_seconds({}) == 300
    assert env.live_interval_seconds({env.LIVE_INTERVAL: "86400"}) == 86_400
    for value in ["0", "-5", "1.5", "ten", "86401", "99999999999999999999"]:
        message = refusal(env.live_interval_seconds, env.LIVE_INTERVAL, value)
        assert "must be a whole number of seconds from 1 to 86400" in message


def test_path_variables() -> None:
    assert env.path(env.DB, {}) is None
    assert env.path(env.DB, {env.DB: ""}) is None
    assert env.path(env.STORE, {env.STORE: " data/my store "}) == Path(" data/my store ")
    message = refusal(lambda e: env.path(env.REPORTS, e), env.REPORTS, "out\x00put")
    assert "holds no NUL byte" in message
    with pytest.raises(ValueError, match="is not a path variable"):
        env.path(MEMORY, {})


# --- where the variables are read -------------------------------------------------------------


def test_evaluate_names_a_bad_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"trace_id": "t", "query_id": "q", "timestamp": "2026-11-30", "retrieved_ids": ["a"]}\n'
    )
    monkeypatch.setenv(MEMORY, "-1GB")  # DuckDB itself would read it as no limit at all
    result = CliRunner().invoke(main, ["evaluate", str(trace)])
    assert result.exit_code == 1
    assert f"{MEMORY}='-1GB': must be a size such as 512MB or 4GB" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        (env.START_DATE, "2026-13-45", "must be a date YYYY-MM-DD"),
        (env.LIVE_INTERVAL, "0", "must be a whole number of seconds from 1 to 86400"),
        (env.DUCKDB_MEMORY_LIMIT, "garbage", "must be a size such as 512MB"),
        (env.STORE_RETRIEVED_IDS, "maybe", "must be 1, true, yes, 0, false or no"),
    ],
)
def test_the_dagster_definitions_refuse_to_load_on_a_bad_value(
    name: str, value: str, words: str
) -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import retrieval_pipeline.defs"],
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=default_signals,
    )
    assert loaded.returncode != 0
    assert f"EnvironmentValueError: {name}={value!r}: {words}" in loaded.stderr


def test_the_phoenix_store_variables_are_checked() -> None:
    endpoint = "RETRIEVAL_PIPELINE_PHOENIX_ENDPOINT"
    assert env.phoenix_endpoint({}) is None
    assert env.phoenix_endpoint({endpoint: "http://127.0.0.1:6006"}) == ("http://127.0.0.1:6006")
    with pytest.raises(env.EnvironmentValueError, match=endpoint):
        env.phoenix_endpoint({endpoint: "127.0.0.1:6006"})
    assert env.phoenix_project({"RETRIEVAL_PIPELINE_PHOENIX_PROJECT": "search"}) == "search"
