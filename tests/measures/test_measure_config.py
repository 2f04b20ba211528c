"""The configuration's keys for incomplete judgments: gmax, judged_only, rbp's residual beside it,
and the list-level coverage metric."""

from __future__ import annotations

import pytest

from retrieval_pipeline.config import ConfigError, PipelineConfig, config_from_mapping


def test_defaults_and_the_coverage_metric() -> None:
    config = PipelineConfig()
    assert (config.gmax, config.judged_only) == (3.0, False)
    # judged@10 is scored beside the configured metrics, unless a judged@K is configured
    assert [m.name for m in config.scored_metrics()] == [*config.metrics, "judged@10"]
    chosen = config_from_mapping({"metrics": ["ndcg@10", "judged@5", "judged@20"]})
    assert chosen.coverage_metric() == "judged@20"
    assert [m.name for m in chosen.scored_metrics()] == ["ndcg@10", "judged@5", "judged@20"]


def test_rbp_brings_its_residual_and_aliases_are_canonical() -> None:
    config = config_from_mapping({"metrics": ["nDCG@10", "RBP(p=0.9)", "Bpref", "ERR@10"]})
    assert config.metrics == ("ndcg@10", "rbp@0.9", "rbp@0.9_residual", "bpref", "err@10")


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"gmax": 0}, "gmax: must be greater than 0, got 0"),
        ({"gmax": float("inf")}, "gmax: must be a finite number"),
        ({"gmax": "3"}, "gmax: must be a valid number"),
        ({"judged_only": "yes"}, "judged_only: must be a valid boolean, got 'yes'"),
        (
            {"metrics": ["rbp@0.8"], "thresholds": {"rbp@0.8_residual": 0.2}},
            "thresholds: 'rbp@0.8_residual' is a bound",
        ),
        (
            {"metrics": ["rbp@0.8"], "comparison": {"guarded_metrics": ["rbp@0.8_residual"]}},
            "comparison.guarded_metrics: 'rbp@0.8_residual' is a bound",
        ),
        ({"metrics": ["rbp@1.5"]}, "the persistence P of rbp@P must be a number in (0, 1)"),
    ],
)
def test_bad_values_name_the_key(data: dict, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(data)
    assert words in str(caught.value)


def test_judged_only_and_gmax_are_read() -> None:
    config = config_from_mapping({"gmax": 4, "judged_only": True})
    assert (config.gmax, config.judged_only) == (4.0, True)
