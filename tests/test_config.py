"""The pipeline's TOML configuration: defaults, the example file, loading and its error messages."""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path

import pytest

from retrieval_pipeline.config import (
    CONFIG_ENV,
    BaselineConfig,
    ChecksConfig,
    ConfigError,
    PipelineConfig,
    config_from_mapping,
    load_config,
    thresholds_frame,
)
from retrieval_pipeline.metrics import DEFAULT_METRICS, parse_metrics

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config.example.toml"


def write(tmp_path: Path, text: str, name: str = "pipeline.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message, "the message names the file"
    return message


def test_example_file_equals_the_defaults() -> None:
    assert load_config(EXAMPLE) == PipelineConfig()


def test_defaults() -> None:
    config = PipelineConfig()
    assert config.metrics == DEFAULT_METRICS
    assert config.gain == "exponential"
    assert config.relevance_level == 1.0
    assert config.baseline.policy == "trailing_days"
    assert config.baseline.trailing_days == 7
    assert set(config.headline_metrics) <= set(config.metrics)
    assert set(config.thresholds) <= set(config.metrics)
    assert config.metric_objects() == parse_metrics(list(DEFAULT_METRICS))


def test_no_path_and_no_env_gives_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert load_config() == PipelineConfig()


def test_env_var_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, 'gain = "linear"\n')
    monkeypatch.setenv(CONFIG_ENV, str(path))
    assert load_config().gain == "linear"


def test_explicit_path_wins_over_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(write(tmp_path, 'gain = "linear"\n', "env.toml")))
    explicit = write(tmp_path, "relevance_level = 2\n", "explicit.toml")
    config = load_config(explicit)
    assert config.gain == "exponential"
    assert config.relevance_level == 2.0


def test_aliases_are_stored_canonically(tmp_path: Path) -> None:
    text = """
metrics = ["nDCG@10", "RR", "P@5"]
headline_metrics = ["NDCG@10"]
[thresholds]
"nDCG@10" = 0.5
"P@5" = 0.2
[segment_thresholds.code]
RR = 0.4
"""
    config = load_config(write(tmp_path, text))
    assert config.metrics == ("ndcg@10", "mrr", "precision@5")
    assert config.headline_metrics == ("ndcg@10",)
    assert config.thresholds == {"ndcg@10": 0.5, "precision@5": 0.2}
    assert config.segment_thresholds == {"code": {"mrr": 0.4}}


def test_unset_thresholds_and_headline_follow_the_metrics(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'metrics = ["ndcg@5", "mrr"]\n'))
    assert config.thresholds == {"mrr": 0.65}
    assert config.headline_metrics == ("mrr",)


def test_segment_override_wins_over_default() -> None:
    config = PipelineConfig(segment_thresholds={"long_tail": {"ndcg@10": 0.5}})
    assert config.threshold("long_tail", "ndcg@10") == 0.5
    assert config.threshold("factual", "ndcg@10") == 0.65
    assert config.threshold("long_tail", "mrr") == 0.65
    assert config.threshold("factual", "precision@5") is None


def test_thresholds_frame_has_a_default_row_per_metric_and_each_override() -> None:
    config = PipelineConfig(
        segment_thresholds={"code": {"mrr": 0.4}},
        checks=ChecksConfig(min_annotated_traces=7),
    )
    frame = thresholds_frame(config)
    defaults = frame[frame["segment"].isna()]
    assert list(defaults["metric"]) == list(config.metrics)
    by_metric = dict(zip(defaults["metric"], defaults["threshold"], strict=True))
    assert by_metric["ndcg@10"] == 0.65
    assert math.isnan(by_metric["precision@5"])  # reported, never judged
    overrides = frame[frame["segment"].notna()]
    assert overrides[["segment", "metric", "threshold"]].values.tolist() == [["code", "mrr", 0.4]]
    assert set(frame["min_annotated"]) == {7}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({}, (date(2026, 11, 23), date(2026, 11, 29))),
        ({"trailing_days": 3}, (date(2026, 11, 27), date(2026, 11, 29))),
        ({"policy": "previous_day"}, (date(2026, 11, 29), date(2026, 11, 29))),
        (
            {"policy": "pinned", "pinned_date": date(2026, 11, 1)},
            (date(2026, 11, 1), date(2026, 11, 1)),
        ),
    ],
)
def test_baseline_windows(policy: dict[str, object], expected: tuple[date, date]) -> None:
    assert BaselineConfig.model_validate(policy).window(date(2026, 11, 30)) == expected


def test_pinned_date_from_toml(tmp_path: Path) -> None:
    text = '[baseline]\npolicy = "pinned"\npinned_date = 2026-11-01\n'
    assert load_config(write(tmp_path, text)).baseline.pinned_date == date(2026, 11, 1)


# --- errors name the key and what is allowed -------------------------------------------------


def test_unknown_metric_lists_the_valid_names(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'metrics = ["ndgc@10", "mrr"]\n')
    assert "metrics: unknown metric 'ndgc@10'" in message
    assert "valid metrics: ndcg@K, mrr" in message


def test_cutoff_must_be_positive(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'metrics = ["ndcg@0"]\n')
    assert "metrics:" in message and "K must be >= 1, got 0" in message


def test_threshold_outside_unit_interval(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[thresholds]\n"ndcg@10" = 1.5\nmrr = -0.1\n')
    assert 'thresholds."ndcg@10": must be a number in [0, 1], got 1.5' in message
    assert "thresholds.mrr: must be a number in [0, 1], got -0.1" in message


def test_threshold_key_must_be_a_metric(tmp_path: Path) -> None:
    message = error_of(tmp_path, "[thresholds]\nndgc = 0.5\n")
    assert "thresholds.ndgc: unknown metric 'ndgc'" in message


def test_threshold_for_a_metric_not_computed(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[segment_thresholds.code]\n"recall@5" = 0.5\n')
    assert "segment_thresholds.code: 'recall@5' is not among the configured metrics" in message


def test_unknown_key_lists_the_allowed_keys(tmp_path: Path) -> None:
    message = error_of(tmp_path, "treshold = 1\n[checks]\nmin_coverag = 0.3\n")
    assert "treshold: unknown key; allowed keys here: metrics, gain," in message
    assert (
        "checks.min_coverag: unknown key; allowed keys here: min_annotated_traces, min_coverage,"
        in message
    )


def test_every_problem_in_one_message(tmp_path: Path) -> None:
    text = 'gain = "log"\nrelevance_level = 0\n[baseline]\npolicy = "weekly"\n'
    message = error_of(tmp_path, text)
    assert "gain: must be 'exponential' or 'linear', got 'log'" in message
    assert "relevance_level: must be greater than 0, got 0" in message
    assert "baseline.policy: must be 'trailing_days', 'previous_day' or 'pinned'" in message
    assert message.count("\n  - ") == 3


def test_wrong_types_are_named(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[checks]\nmin_annotated_traces = "many"\nmin_coverage = true\n')
    assert "checks.min_annotated_traces: must be a valid integer, got 'many'" in message
    assert "checks.min_coverage: must be a valid number, got True" in message


def test_pinned_policy_needs_a_date(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[baseline]\npolicy = "pinned"\n')
    assert 'baseline: policy "pinned" needs pinned_date' in message


def test_not_toml(tmp_path: Path) -> None:
    assert "not valid TOML" in error_of(tmp_path, "metrics = [\n")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"cannot read pipeline config .*nope\.toml"):
        load_config(missing)


def test_mapping_errors_name_the_source() -> None:
    with pytest.raises(ConfigError, match="invalid pipeline config <test>"):
        config_from_mapping({"gain": 1}, source="<test>")
