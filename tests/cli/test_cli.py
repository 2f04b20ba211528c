"""`retrieval-pipeline evaluate`: what it prints, writes and exits with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.warehouse import connection, evaluation, ingestion
from tests.processes import default_signals

LINES = [
    # worked example A: P@5 = 1/5, recall@20 = 1/4, RR = 1/2, AP = (1/2)/4
    {
        "trace_id": "a",
        "query_id": "q1",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["d3", "d1", "d9"],
        "relevance_scores": {"d1": 3, "d2": 2, "d3": 0, "d4": 1, "d5": 1},
        "segment": "factual",
    },
    # relevant at rank 1 and 2 of 2: P@5 = 2/5, recall = 2/2, RR = 1, AP = (1/1 + 2/2)/2
    {
        "trace_id": "b",
        "query_id": "q2",
        "timestamp": "2026-11-30T11:00:00Z",
        "retrieved_ids": ["x", "y", "x"],
        "relevant_ids": ["x", "y"],
    },
    {
        "trace_id": "c",
        "query_id": "q3",
        "timestamp": "2026-11-30T12:00:00Z",
        "retrieved_ids": ["x"],
    },
]


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    body = [json.dumps(line) for line in LINES] + ['{"trace_id": "broken"']
    path.write_text("\n".join(body) + "\n")
    return path


def test_summary_counts_and_means(traces: Path) -> None:
    result = CliRunner().invoke(
        main, ["evaluate", str(traces), "--metrics", "precision@5,recall@20,mrr,map"]
    )
    assert result.exit_code == 0, result.output
    assert (
        "Read 4 records from 1 file(s): 3 valid (2 scored; 1 unannotated, not scored), "
        "1 quarantined." in result.output
    )
    assert "Annotated traces: 2 of 3 (66.7%); 1 unannotated (not scored)" in result.output
    assert "repeated retrieved ids dropped: 1." in result.output
    means = {
        line.split()[0]: float(line.split()[1])
        for line in result.output.splitlines()
        if line.split() and line.split()[0] in {"precision@5", "recall@20", "mrr", "map"}
    }
    assert means["precision@5"] == pytest.approx(round((1 / 5 + 2 / 5) / 2, 4))
    assert means["recall@20"] == pytest.approx(round((1 / 4 + 2 / 2) / 2, 4))
    assert means["mrr"] == pytest.approx(round((1 / 2 + 1) / 2, 4))
    assert means["map"] == pytest.approx(round(((1 / 2) / 4 + (1 / 1 + 2 / 2) / 2) / 2, 4))
    assert f"{traces}:4: malformed JSON" in result.output


def test_json_summary_and_output_files(traces: Path, tmp_path: Path) -> None:
    out, rejected = tmp_path / "per_query.parquet", tmp_path / "rejected.csv"
    result = CliRunner().invoke(
        main,
        [
            "evaluate",
            str(traces),
            "--metrics",
            "P@5,RR",
            "--format",
            "json",
            "--output",
            str(out),
            "--quarantine",
            str(rejected),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["records_read"] == summary["records_valid"] + summary["records_quarantined"]
    assert summary["means"]["mrr"] == pytest.approx((1 / 2 + 1) / 2)
    table = pd.read_parquet(out)
    assert list(table.columns) == [
        "trace_id",
        "query_id",
        "segment",
        "variant",
        "n_retrieved",
        "n_relevant",
        "n_stale_labels",
        "precision@5",
        "mrr",
    ]
    assert list(table.trace_id) == ["a", "b", "c"]
    assert pd.isna(table.set_index("trace_id").loc["c", "mrr"])
    assert pd.read_csv(rejected).reason.tolist() == ["malformed JSON"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_output_formats_by_extension(traces: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"per_query{suffix}"
    assert CliRunner().invoke(main, ["evaluate", str(traces), "--output", str(out)]).exit_code == 0
    frame = pd.read_csv(out) if suffix == ".csv" else pd.read_json(out, lines=True)
    assert len(frame) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "ndcg"], "metric 'ndcg' needs a cut-off"),
        (["--metrics", "ndcg@0"], "the cut-off K must be >= 1"),
        (["--metrics", "bleu@4"], "unknown metric 'bleu@4'; valid metrics: ndcg@K"),
        (["--output", "x.xlsx"], "unknown output format .xlsx"),
        (["--relevance-level", "0"], "relevance level must be a number > 0"),
    ],
)
def test_bad_options_fail_with_one_line(traces: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["evaluate", str(traces), *args])
    assert result.exit_code == (1 if args[0] == "--output" else 2)  # a bad option value: 2
    assert result.output.count("\n") == 1 and result.output.startswith("Error: ")
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_path_names_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["evaluate", str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {tmp_path / 'nope'}: no such file or directory"


def test_evaluate_stages_nothing_on_disk(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # its database is new: every piece goes straight in, no Parquet staging file is written
    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", no_space)
    assert CliRunner().invoke(main, ["evaluate", str(traces)]).exit_code == 0


def test_evaluate_works_in_a_temporary_database_within_the_memory_limit(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv(connection.MEMORY_LIMIT_ENV, "300MB")
    opened: list[tuple[Path, str, bool]] = []
    connect = connection.connect

    def spy(
        database: Path, config: dict | None = None, scratch: bool = False
    ) -> duckdb.DuckDBPyConnection:
        conn = connect(database, config, scratch=scratch)
        row = conn.execute("select current_setting('memory_limit')").fetchone()
        opened.append((Path(database), str(row[0] if row else ""), scratch))
        return conn

    monkeypatch.setattr(evaluation, "connect", spy)  # where evaluate looks it up
    assert CliRunner().invoke(main, ["evaluate", str(traces)]).exit_code == 0
    ((database, limit, scratch),) = opened
    assert database.parent.parent == temporary and scratch
    assert limit == "286.1 MiB"  # DuckDB's words for 300MB = 300 * 10^6 bytes
    assert list(temporary.iterdir()) == []  # removed when it ended


def test_a_full_disk_fails_in_one_line(traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # DuckDB spills to disk beyond its memory limit; a full disk is an IO error of DuckDB's
    def no_space(conn: object) -> None:
        raise duckdb.IOException('Could not write file "/tmp/duckdb/spill.tmp": No space left')

    monkeypatch.setattr(ingestion, "_insert_piece", no_space)
    result = CliRunner().invoke(main, ["evaluate", str(traces)])
    assert result.exit_code == 1
    line = result.output.strip()
    assert line.startswith("Error: ") and "\n" not in line
    assert 'Could not write file "/tmp/duckdb/spill.tmp": No space left' in line


# What `evaluate` on trace records must not load: Dagster (the CLI never does), pandas (only a
# CSV or JSON lines output, `--by` or a statistical test needs it: pandas_deferred), scipy (only a
# statistical test needs it: `--stages`, `compare`), the configuration's models (pydantic: only a
# config file needs them), the readers of spans, Phoenix, judgments and TREC runs (only where
# such an input is given), and the other commands' modules.
NOT_FOR_EVALUATE = (
    "dagster",
    "pandas",
    "scipy",
    "scipy.stats",
    "pydantic",
    "retrieval_pipeline.config",
    "retrieval_pipeline.ingest.spans",
    "retrieval_pipeline.ingest.span_records",
    "retrieval_pipeline.ingest.phoenix",
    "retrieval_pipeline.ingest.judgments",
    "retrieval_pipeline.ingest.trec",
    "retrieval_pipeline.cli.trec",
    "retrieval_pipeline.defs",
    "retrieval_pipeline.live.monitor",
    "retrieval_pipeline.cli.monitor",
    "retrieval_pipeline.cli.compare",
    "retrieval_pipeline.cli.labels_from_clicks",
    "retrieval_pipeline.ab.compare",
)


def _modules_of_evaluate(traces: Path, output: Path) -> set[str]:
    """The modules a process running `evaluate TRACES --output OUTPUT` has loaded at its end."""
    probe = (
        "import sys, json; from retrieval_pipeline.cli import main; "
        "main(['evaluate', sys.argv[1], '--output', sys.argv[2]], standalone_mode=False); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(traces), str(output)],
        check=True,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "RETRIEVAL_PIPELINE_CONFIG"},
        preexec_fn=default_signals,
    ).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    assert "retrieval_pipeline.warehouse.evaluation" in loaded  # the probe did run evaluate
    return loaded


def test_evaluate_imports_only_what_it_uses(traces: Path, tmp_path: Path) -> None:
    loaded = _modules_of_evaluate(traces, tmp_path / "per_query.parquet")
    assert sorted(loaded & set(NOT_FOR_EVALUATE)) == []


def test_a_csv_output_loads_pandas_and_holds_the_parquet_rows(traces: Path, tmp_path: Path) -> None:
    """pandas writes the text formats: loaded after the scoring, it is known to pyarrow again
    (pandas_deferred), and the file holds the values the Parquet file holds."""
    loaded = _modules_of_evaluate(traces, tmp_path / "per_query.csv")
    assert "pandas" in loaded
    _modules_of_evaluate(traces, tmp_path / "per_query.parquet")
    parquet = pd.read_parquet(tmp_path / "per_query.parquet")
    text = pd.read_csv(tmp_path / "per_query.csv", keep_default_na=False, na_values=[""])
    assert list(text.columns) == list(parquet.columns)
    assert list(text.trace_id) == ["a", "b", "c"]
    pd.testing.assert_frame_equal(text, parquet, check_dtype=False)


def test_stages_load_scipy_only_when_asked(traces: Path) -> None:
    """scipy loads with a statistic, and `scipy.stats` only with the bootstrap of a small cell:
    a cell of N pairs or more takes its t-test and interval from `scipy.special`."""
    probe = (
        "import sys; from retrieval_pipeline.ab import stats; "
        "assert 'scipy' not in sys.modules, 'imported with ab.stats'; "
        "large = stats.paired_statistics([0.1, 0.5, 0.3] * 400, [0.2, 0.4, 0.9] * 400); "
        "assert large.p_t is not None and large.ci_low is not None, large; "
        "assert 'scipy.special' in sys.modules; "
        "assert 'scipy.stats' not in sys.modules, 'imported for a large cell'; "
        "stats.paired_statistics([0.1, 0.5, 0.3], [0.2, 0.4, 0.9]); "
        "assert 'scipy.stats' in sys.modules"
    )
    subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        preexec_fn=default_signals,
    )


def test_an_unknown_metric_exits_2_and_suggests_the_closest(traces: Path) -> None:
    result = CliRunner().invoke(main, ["evaluate", str(traces), "--metrics", "mrr,ndgc@10"])
    assert result.exit_code == 2
    assert result.output.startswith(
        "Error: --metrics: unknown metric 'ndgc@10': did you mean ndcg@10? valid metrics:"
    )
    assert result.output.count("\n") == 1
    far = CliRunner().invoke(main, ["evaluate", str(traces), "--metrics", "bleu@4"])
    assert far.exit_code == 2 and "did you mean" not in far.output  # nothing close: no guess


def test_json_keeps_records_scored_as_a_deprecated_alias(traces: Path) -> None:
    result = CliRunner().invoke(main, ["evaluate", str(traces), "--format", "json"])
    data = json.loads(result.output)
    assert data["records_scored"] == data["records_valid"] == 3
    assert data["deprecated_keys"] == {"records_scored": "records_valid"}
    assert data["records_valid"] == data["traces_annotated"] + data["traces_unannotated"]
