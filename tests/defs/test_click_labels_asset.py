"""The optional `click_labels` asset: defined only when enabled, it labels a day from the click
logs of its look-back window exactly as `labels-from-clicks` does on the same files."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from pydantic import ValidationError

from retrieval_pipeline.config import ClickLabelsConfig, PipelineConfig
from retrieval_pipeline.defs import build_defs
from retrieval_pipeline.defs.nightly.click_labels import click_labels
from retrieval_pipeline.defs.resources import (
    PipelineSettingsResource,
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.labels.clicks import MIN_CLIP, ClickLabelError, ClickLabelOptions
from retrieval_pipeline.labels.command import labels_from_clicks
from retrieval_pipeline.store import LocalTraceStore
from tests.labels.click_simulation import simulate

DAY = date(2026, 11, 30)
ENABLED = "[click_labels]\nenabled = true\nlookback_days = 2\nmin_impressions = 10\n"


def write_store(root: Path) -> None:
    """Three days of click logs; the first is outside a two-day window ending on DAY."""
    log = simulate(seed=8, n_queries=5, pages_per_variant=12).records
    for offset, part in enumerate((log[:40], log[40:200], log[200:])):
        folder = root / "clicks" / f"date={DAY - timedelta(days=2 - offset)}"
        folder.mkdir(parents=True)
        (folder / "clicks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    (root / "clicks" / f"date={DAY}" / "README.md").write_text("not a log")


def test_defined_only_when_enabled(tmp_path: Path) -> None:
    enabled = tmp_path / "on.toml"
    enabled.write_text(ENABLED)
    keys = {key.to_user_string() for key in build_defs(enabled).resolve_all_asset_keys()}
    assert "click_labels" in keys
    default = {key.to_user_string() for key in build_defs(None).resolve_all_asset_keys()}
    assert "click_labels" not in default


def test_a_day_is_labelled_from_its_window(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(store)
    config = tmp_path / "pipeline.toml"
    config.write_text(ENABLED)
    database = tmp_path / "db" / "warehouse.duckdb"
    result = dg.materialize(
        [click_labels],
        resources={
            "trace_store": TraceStoreResource(root=str(store)),
            "warehouse": WarehouseResource(database=str(database)),
            "settings": PipelineSettingsResource(config_path=str(config)),
        },
        partition_key=DAY.isoformat(),
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    folder = database.parent / "click_labels" / f"date={DAY}"
    judgments = pd.read_parquet(folder / "judgments.parquet")
    # the same files by hand: the window's two days, not the day before it
    files = LocalTraceStore(store).click_files(DAY - timedelta(days=1))
    files += LocalTraceStore(store).click_files(DAY)
    assert [f.parent.name for f in files] == [f"date={DAY - timedelta(days=1)}", f"date={DAY}"]
    by_hand = labels_from_clicks(
        files,
        tmp_path / "by_hand.parquet",
        tmp_path / "p.json",
        ClickLabelOptions(min_impressions=10),
    )
    pd.testing.assert_frame_equal(judgments, pd.read_parquet(tmp_path / "by_hand.parquet"))
    assert by_hand.counts.used == 5 * 4 * 12 - 40  # every page but the first day's
    (materialization,) = result.asset_materializations_for_node("click_labels")
    metadata = materialization.metadata
    assert metadata["labelled_pairs"].value == len(judgments)
    assert metadata["impressions_used"].value == by_hand.counts.used
    assert metadata["propensity rank 2"].value == pytest.approx(
        json.loads((folder / "PROPENSITIES.json").read_text())["propensities"]["2"]
    )


def test_the_defaults_are_the_labelling_defaults() -> None:
    section = PipelineConfig().click_labels
    options = ClickLabelOptions()
    assert (section.max_rank, section.min_impressions, section.clip) == (
        options.max_rank,
        options.min_impressions,
        options.clip,
    )
    assert section.cut_points == options.cut_points
    # the smallest clip too (issue 32: below it the labels file would hold NaN)
    assert ClickLabelsConfig(clip=MIN_CLIP).clip == ClickLabelOptions(clip=MIN_CLIP).clip
    with pytest.raises(ValidationError):
        ClickLabelsConfig(clip=MIN_CLIP / 2)
    with pytest.raises(ClickLabelError):
        ClickLabelOptions(clip=MIN_CLIP / 2)


def test_a_store_without_click_logs_gives_no_files(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    assert LocalTraceStore(tmp_path).click_files(DAY) == []
