"""The `[phoenix]` section: labels in, scores out (docs/phoenix.md), validated with the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_pipeline.config import ConfigError, PhoenixConfig, PipelineConfig, load_config


def test_phoenix_defaults_count_human_and_llm_labels_and_write_scores() -> None:
    phoenix = PipelineConfig().phoenix
    assert phoenix == PhoenixConfig()
    assert phoenix.label_kinds == ("HUMAN", "LLM")
    assert phoenix.label_annotation == "relevance"
    assert phoenix.write_scores is True
    assert phoenix.identifier == "retrieval_pipeline"
    assert phoenix.batch_size == 1000


def test_phoenix_section_is_read(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        '[phoenix]\nlabel_kinds = ["HUMAN"]\nwrite_scores = false\nlabel_annotation = "grade"\n',
        encoding="utf-8",
    )
    phoenix = load_config(path).phoenix
    assert (phoenix.label_kinds, phoenix.write_scores, phoenix.label_annotation) == (
        ("HUMAN",),
        False,
        "grade",
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('label_kinds = ["ROBOT"]', "phoenix.label_kinds"),
        ('identifier = ""', "phoenix.identifier"),
        ("batch_size = 5000", "phoenix.batch_size"),
        ("label_annotation = []", "phoenix.label_annotation"),
    ],
)
def test_a_bad_phoenix_key_names_its_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(f"[phoenix]\n{text}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert field in str(caught.value)


def test_label_annotation_may_name_several_annotations(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text('[phoenix]\nlabel_annotation = ["relevance", "relevance_llm"]\n', "utf-8")
    assert load_config(path).phoenix.label_names() == ("relevance", "relevance_llm")
    assert PhoenixConfig().label_names() == ("relevance",)
