"""The trace store resource's span options: the config's [trace_format], and a Phoenix store."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from retrieval_pipeline.defs import build_defs
from retrieval_pipeline.defs.resources import TraceStoreResource
from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.store import LocalTraceStore


def test_the_definitions_read_spans_through_the_configs_trace_format(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text('[trace_format]\nquery_id_key = "qid"\n', encoding="utf-8")
    resources = build_defs(config).resources
    assert resources is not None
    resource = resources["trace_store"]
    assert isinstance(resource, TraceStoreResource)
    assert resource.config_path == str(config.absolute())
    assert resource.span_reading().format.query_id_key == "qid"
    assert resource.span_reading().stage == "retriever"
    assert TraceStoreResource(root="x").span_reading().format.query_id_key == "query_id"


def test_a_phoenix_store_needs_an_endpoint_and_a_project(tmp_path: Path) -> None:
    both = TraceStoreResource(
        root=str(tmp_path), phoenix_endpoint="http://127.0.0.1:1", phoenix_project="p"
    )
    store = both.get_store()
    assert isinstance(store, PhoenixStore)
    assert store.describe() == "Phoenix project p at http://127.0.0.1:1"
    assert store.corpus_file() is None
    assert isinstance(TraceStoreResource(root=str(tmp_path)).get_store(), LocalTraceStore)
    with pytest.raises(dg.Failure, match="needs both an endpoint and a project"):
        TraceStoreResource(root=str(tmp_path), phoenix_project="p").get_store()


def test_a_phoenix_store_reads_its_annotations_and_adds_the_phoenix_scores_asset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text('[phoenix]\nlabel_annotation = ["relevance", "judge"]\n', "utf-8")
    assert "phoenix_scores" not in {
        k.to_user_string() for k in build_defs(config).resolve_all_asset_keys()
    }
    monkeypatch.setenv("RETRIEVAL_PIPELINE_PHOENIX_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("RETRIEVAL_PIPELINE_PHOENIX_PROJECT", "p")
    defs = build_defs(config)
    assert "phoenix_scores" in {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert "phoenix_scores" in {
        k.to_user_string() for k in defs.resolve_job_def("nightly").asset_layer.selected_asset_keys
    }
    store = TraceStoreResource(
        root=str(tmp_path),
        phoenix_endpoint="http://127.0.0.1:9",
        phoenix_project="p",
        config_path=str(config),
    ).get_store()
    assert isinstance(store, PhoenixStore) and store.labels is not None
    assert store.labels.label_names() == ("relevance", "judge")
