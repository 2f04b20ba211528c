"""The `[stages]` section: per-stage floors and the reranker's least gain, validated with the
rest of the file and named in its errors (docs/spans.md, "Stages in the nightly")."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from retrieval_pipeline.config import ConfigError, PipelineConfig, StagesConfig, load_config
from retrieval_pipeline.gate import stage_verdict

DAY = pd.Timestamp("2026-12-01")


def error_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    return str(caught.value)


def test_stages_default_to_no_floor() -> None:
    assert PipelineConfig().stages == StagesConfig()
    assert not PipelineConfig().stages.thresholds and not PipelineConfig().stages.min_gain


def test_stages_are_read_in_canonical_names(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        '[stages]\nthresholds = {reranker = {"nDCG@10" = 0.5}}\nmin_gain = {RR = -0.01}\n'
        "require_reranker = true\n",
        encoding="utf-8",
    )
    stages = load_config(path).stages
    assert stages.thresholds == {"reranker": {"ndcg@10": 0.5}}
    assert stages.min_gain == {"mrr": -0.01}
    assert stages.require_reranker is True


def test_every_stage_problem_in_one_message(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        '[stages]\nthresholds = {retriever = {"ndcg@10" = 0.5}, reranker = {"ndcg@10" = 1.5}}\n'
        'min_gain = {"ndcg@10" = -2, mrr = "x", ndgc = 0.1, map = nan}\n'
        'require_reranker = "yes"\nmin_gains = 1\n',
    )
    assert (
        "stages.thresholds.retriever: must be 'reranker_input' or 'reranker' (the retriever's "
        "floors are [thresholds] and [segment_thresholds]), got 'retriever'" in message
    )
    assert 'stages.thresholds.reranker."ndcg@10": must be a number in [0, 1], got 1.5' in message
    assert (
        'stages.min_gain."ndcg@10": must be a gain in [-1, 1] (output - input), got -2.0' in message
    )
    assert "stages.min_gain.mrr: must be a valid number, got 'x'" in message
    assert "stages.min_gain.ndgc: unknown metric 'ndgc'" in message
    assert "stages.min_gain.map: must be a finite number, got nan" in message
    assert "stages.require_reranker: must be a valid boolean, got 'yes'" in message
    assert (
        "stages.min_gains: unknown key; allowed keys here: thresholds, min_gain, require_reranker"
        in message
    )


def test_stage_metrics_must_be_configured_and_not_bounds(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        'metrics = ["ndcg@10", "rbp@0.8"]\n[stages]\n'
        'thresholds = {reranker_input = {"recall@5" = 0.2}}\nmin_gain = {"rbp@0.8_residual" = 0}\n',
    )
    assert (
        "stages.thresholds.reranker_input: 'recall@5' is not among the configured metrics"
        in message
    )
    assert "stages.min_gain: 'rbp@0.8_residual' is a bound" in message


def frames(mean: float | None, gain: float | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    means = pd.DataFrame(
        [
            {
                "partition_date": DAY,
                "stage": "reranker",
                "segment": "__all__",
                "variant": "control",
                "metric": "ndcg@10",
                "traces": 4,
                "annotated_traces": 4,
                "mean": mean,
            }
        ]
    )
    gains = pd.DataFrame(
        [{"partition_date": DAY, "segment": "faq", "metric": "ndcg@10", "pairs": 4, "gain": gain}]
    )
    return means, gains


@pytest.mark.parametrize(
    ("mean", "gain", "passed"),
    [
        (0.6, -0.01, True),  # on the floors
        (0.6, -0.0100001, False),
        (0.4999, 0.2, False),
        (None, 0.2, False),  # a missing mean never passes
        (math.nan, 0.2, False),
        (0.6, None, False),  # a gain without a pair never passes
        (0.6, math.nan, False),
    ],
)
def test_the_stage_verdict(mean: float | None, gain: float | None, passed: bool) -> None:
    stages = StagesConfig(thresholds={"reranker": {"ndcg@10": 0.5}}, min_gain={"ndcg@10": -0.01})
    day = DAY.date()
    verdict = stage_verdict(*frames(mean, gain), stages, day, day)
    assert verdict.passed is passed, verdict.description


def test_the_stage_verdict_without_a_reranker() -> None:
    empty = frames(0.6, 0.0)[0].iloc[0:0], frames(0.6, 0.0)[1].iloc[0:0]
    day = DAY.date()
    loose = stage_verdict(*empty, StagesConfig(min_gain={"ndcg@10": 0.0}), day, day)
    assert (
        loose.passed and loose.description == "no reranker stage for 2026-12-01: nothing to judge"
    )
    strict = stage_verdict(*empty, StagesConfig(require_reranker=True), day, day)
    assert not strict.passed
    assert strict.description == (
        "no data for 2026-12-01 (no reranker stage, and [stages] requires one)"
    )


def test_a_day_without_traces_fails_the_stage_verdict() -> None:
    empty = frames(0.6, 0.0)[0].iloc[0:0], frames(0.6, 0.0)[1].iloc[0:0]
    day = DAY.date()
    verdict = stage_verdict(*empty, StagesConfig(), day, day, no_data=[day])
    assert not verdict.passed
    assert verdict.description == "no data for 2026-12-01 (no traces)"
