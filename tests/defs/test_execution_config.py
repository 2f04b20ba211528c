"""`[execution]`: validated with the key named, and the definitions it builds."""

from pathlib import Path

import dagster as dg
import pytest

from retrieval_pipeline.config import ConfigError, load_config
from retrieval_pipeline.defs import build_defs


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("shards = 0", "execution.shards: must be greater than or equal to 1"),
        ('executor = "dask"', 'executor "dask" needs dask_scheduler'),
        ('dask_scheduler = "tcp://127.0.0.1:8786"', "dask_scheduler is used only with"),
        ('executor = "celery"', "execution.executor"),
    ],
)
def test_a_bad_execution_section_names_the_key(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_config(_config(tmp_path, f"[execution]\n{text}\n"))


def test_one_shard_keeps_the_nightly_assets(tmp_path: Path) -> None:
    defs = build_defs(_config(tmp_path, "[execution]\nshards = 1\n"))
    job = defs.resolve_implicit_global_asset_job_def()
    assert not any(node.name.startswith("shard") for node in job.graph.node_dict.values())
    assert isinstance(defs.executor, dg.ExecutorDefinition)
    assert defs.executor.name == "in_process"


def test_three_shards_make_three_shard_steps_and_a_merge(tmp_path: Path) -> None:
    text = '[execution]\nshards = 3\nexecutor = "multiprocess"\n'
    defs = build_defs(_config(tmp_path, text))
    sharded = defs.resolve_assets_def("traces")
    assert {key.to_user_string() for key in sharded.keys} == {"traces", "labels", "query_metrics"}
    ops = {node.name for node in sharded.node_def.iterate_node_defs()}
    assert {"shard_plan", "shard_0_of_3", "shard_1_of_3", "shard_2_of_3", "shard_merge"} <= ops
    assert isinstance(defs.executor, dg.ExecutorDefinition)
    assert defs.executor.name == "multiprocess"
