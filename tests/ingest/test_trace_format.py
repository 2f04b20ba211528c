"""The `[trace_format]` section: its defaults and its errors, which name the key."""

from __future__ import annotations

import pytest

from retrieval_pipeline.config import ConfigError, TraceFormatConfig, config_from_mapping


def error_of(section: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"trace_format": section}, source="pipeline.toml")
    return str(caught.value)


def test_defaults_are_openinference_and_genai() -> None:
    trace_format = config_from_mapping({}).trace_format
    assert trace_format == TraceFormatConfig()
    assert trace_format.document_id_attribute == "retrieval.documents.{i}.document.id"
    assert trace_format.metadata_keys() == {
        "query_id": "query_id",
        "segment": "segment",
        "variant": "variant",
        "relevant_ids": "relevant_ids",
        "relevance_scores": "relevance_scores",
        "label_source": "label_source",
    }


@pytest.mark.parametrize(
    ("section", "line"),
    [
        (
            {"document_id_attribute": "retrieval.documents.document.id"},
            "trace_format.document_id_attribute: must hold the list position as {i} exactly "
            "once, got 'retrieval.documents.document.id'",
        ),
        (
            {"reranker_output_id_attribute": "docs.{i}.{i}"},
            "trace_format.reranker_output_id_attribute: must hold the list position as {i} "
            "exactly once, got 'docs.{i}.{i}'",
        ),
        (
            {"query_attribute": ""},
            "trace_format.query_attribute: must be a non-empty attribute name without "
            "surrounding spaces, got ''",
        ),
        (
            {"metadata_attribute": 3},
            "trace_format.metadata_attribute: must be a valid string, got 3",
        ),
        (
            {"segment_key": "variant"},
            "trace_format: segment_key and variant_key are both 'variant'",
        ),
        (
            {"span_kind": "RETRIEVER"},
            "trace_format.span_kind: unknown key; allowed keys here: document_id_attribute, ",
        ),
    ],
)
def test_errors_name_the_key(section: dict[str, object], line: str) -> None:
    message = error_of(section)
    assert message.startswith("invalid pipeline config pipeline.toml:\n  - ")
    assert f"  - {line}" in message
