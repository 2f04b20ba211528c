"""The first partition: $RETRIEVAL_PIPELINE_START_DATE, else the configuration's `start_date`,
else the trace store's earliest day, else yesterday; not a fixed date the UI counts from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from retrieval_pipeline.config import CONFIG_ENV, ConfigError
from retrieval_pipeline.defs.partitions import START_DATE_ENV, start_date
from retrieval_pipeline.defs.resources import STORE_ENV


@pytest.fixture(autouse=True)
def _nothing_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(START_DATE_ENV, raising=False)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "store"))


def day_folder(root: Path, day: str) -> None:
    (root / "store" / "traces" / f"date={day}").mkdir(parents=True)


def test_the_store_s_earliest_day(tmp_path: Path) -> None:
    for day in ("2026-11-20", "2026-11-17", "2026-11-30"):
        day_folder(tmp_path, day)
    assert start_date() == "2026-11-17"


def test_an_empty_store_starts_yesterday() -> None:
    assert start_date() == (datetime.now(UTC).date() - timedelta(days=1)).isoformat()


def test_the_configuration_comes_before_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    day_folder(tmp_path, "2026-11-17")
    config = tmp_path / "pipeline.toml"
    config.write_text("start_date = 2026-06-01\n", encoding="utf-8")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    assert start_date() == "2026-06-01"
    monkeypatch.setenv(START_DATE_ENV, "2026-03-01")  # and the variable before both
    assert start_date() == "2026-03-01"


def test_a_bad_start_date_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text('start_date = "June"\n', encoding="utf-8")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    with pytest.raises(ConfigError, match="start_date"):
        start_date()
    monkeypatch.setenv(START_DATE_ENV, "June")
    with pytest.raises(ValueError, match=f"{START_DATE_ENV}='June': must be a date YYYY-MM-DD"):
        start_date()
