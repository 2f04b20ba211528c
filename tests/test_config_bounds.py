"""The configuration refuses what the engine cannot run, naming the key and the file (issue 27,
class 10): a cut-off K beyond DuckDB's 32-bit list positions, a window of a million days, an
infinite relevance level, a file that is not UTF-8."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.config import MAX_WINDOW_DAYS, ConfigError, load_config
from retrieval_pipeline.metrics import (
    MAX_CUTOFF,
    MetricConfigError,
    check_relevance_level,
    parse_metric,
)


def error_of(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "pipeline.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message, "the message names the file"
    return message


def test_the_largest_cut_off_is_the_engines_32_bit_limit() -> None:
    assert MAX_CUTOFF == 2**31 - 1
    assert parse_metric(f"precision@{MAX_CUTOFF}").k == MAX_CUTOFF
    with pytest.raises(MetricConfigError, match=r"K must be at most 2147483647, got 2147483648"):
        parse_metric("P@2147483648")


def test_a_cut_off_too_large_names_the_key(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'metrics = ["ndcg@10", "precision@4294967296"]\n')
    assert "metrics: " in message and "K must be at most 2147483647, got 4294967296" in message


def test_the_largest_cut_off_runs(tmp_path: Path) -> None:
    # P@K over one relevant document retrieved first: 1 / K, even at the largest K
    trace = (
        '{"trace_id": "t", "query_id": "q", "timestamp": "2026-11-30", "retrieved_ids": ["a"],'
        ' "relevant_ids": ["a"]}\n'
    )
    (tmp_path / "t.jsonl").write_text(trace)
    result = CliRunner().invoke(
        main,
        ["evaluate", str(tmp_path / "t.jsonl"), "--metrics", f"P@{MAX_CUTOFF}", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    assert f'"precision@{MAX_CUTOFF}": {1 / MAX_CUTOFF!r}' in result.output


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[baseline]\ntrailing_days = 1000000\n", "baseline.trailing_days"),
        ("[comparison]\nlookback_days = 1000000\n", "comparison.lookback_days"),
    ],
)
def test_a_window_of_a_million_days_is_refused(tmp_path: Path, text: str, key: str) -> None:
    message = error_of(tmp_path, text)
    assert f"{key}: must be less than or equal to {MAX_WINDOW_DAYS}, got 1000000" in message


def test_the_longest_window_is_accepted_and_computable(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        f"[baseline]\ntrailing_days = {MAX_WINDOW_DAYS}\n"
        f"[comparison]\nlookback_days = {MAX_WINDOW_DAYS}\n"
    )
    config = load_config(path)
    day = date(2026, 11, 30)
    assert config.baseline.window(day) == (day - timedelta(MAX_WINDOW_DAYS), day - timedelta(1))
    assert config.comparison.window(day)[0] == day - timedelta(MAX_WINDOW_DAYS - 1)


@pytest.mark.parametrize("level", ["inf", "+inf", "nan", "-inf"])
def test_a_relevance_level_that_is_not_finite_is_refused(tmp_path: Path, level: str) -> None:
    message = error_of(tmp_path, f"relevance_level = {level}\n")
    assert "relevance_level: " in message


def test_the_command_line_refuses_an_infinite_relevance_level() -> None:
    with pytest.raises(MetricConfigError, match="relevance level must be finite, got inf"):
        check_relevance_level(float("inf"))
    result = CliRunner().invoke(main, ["evaluate", "x.jsonl", "--relevance-level", "inf"])
    assert result.exit_code != 0
    assert "relevance level must be finite, got inf" in result.output


def test_a_config_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    before = b'gain = "linear"\n# caf'  # Latin-1's e-acute follows: 0xe9, not UTF-8
    message = error_of(tmp_path, before + b"\xe9\n")
    assert f"not UTF-8 text: byte 0xe9 at offset {len(before)}" in message
