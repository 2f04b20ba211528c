"""`evaluate` at its edges: output paths checked before any work, an input with nothing to score,
files that are not trace files, the quarantine's header, and the means per group (`--by`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result

from retrieval_pipeline.cli import main
from retrieval_pipeline.warehouse import evaluation


def trace(trace_id: str, segment: str, variant: str, rank: int | None) -> str:
    """A trace whose reciprocal rank is 1/rank (None: unannotated, not scored)."""
    fields: dict[str, object] = {
        "trace_id": trace_id,
        "query_id": f"q-{trace_id}",
        "timestamp": "2026-11-30T10:00:00Z",
        "retrieved_ids": ["d1", "d2", "d3"],
        "segment": segment,
        "variant": variant,
    }
    if rank is not None:
        fields["relevant_ids"] = [f"d{rank}"]
    return json.dumps(fields)


LINES = [
    trace("a", "factual", "control", 1),
    trace("b", "factual", "candidate", 2),
    trace("c", "multi_hop", "control", 3),
    trace("d", "multi_hop", "control", 1),
    trace("e", "multi_hop", "control", None),
]


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["evaluate", *args])


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any trace is read: the checks come first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("run_evaluation was called")

    monkeypatch.setattr(evaluation, "run_evaluation", refuse)


def one_error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    (line,) = result.output.splitlines()
    return line


@pytest.mark.usefixtures("no_work")
def test_an_unwritable_output_is_one_line_before_any_work(traces: Path) -> None:
    line = one_error_line(run(str(traces), "--output", "/proc/out.parquet"))
    assert line.startswith("Error: --output /proc/out.parquet: cannot write there (")


@pytest.mark.usefixtures("no_work")
def test_an_output_under_a_file(traces: Path, tmp_path: Path) -> None:
    under = tmp_path / "notes.txt" / "out.parquet"
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    line = one_error_line(run(str(traces), "--quarantine", str(under)))
    assert line == f"Error: --quarantine {under}: {tmp_path / 'notes.txt'} is a file, not a folder"


@pytest.mark.usefixtures("no_work")
def test_a_missing_folder_is_not_created(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "missing" / "deeper" / "out.csv"
    line = one_error_line(run(str(traces), "--output", str(out)))
    assert line == f"Error: --output {out}: the folder {out.parent} does not exist"
    assert not (tmp_path / "missing").exists()


@pytest.mark.usefixtures("no_work")
def test_an_output_that_is_a_folder_or_named_twice(traces: Path, tmp_path: Path) -> None:
    folder = tmp_path / "out.parquet"
    folder.mkdir()
    line = one_error_line(run(str(traces), "--output", str(folder)))
    assert line == f"Error: --output {folder}: is a folder; give a file name"
    same = tmp_path / "both.jsonl"
    line = one_error_line(run(str(traces), "--output", str(same), "--quarantine", str(same)))
    assert line == f"Error: --output and --quarantine name the same file {same}"
    assert set(tmp_path.iterdir()) == {traces, folder}  # the probes left nothing behind


@pytest.mark.usefixtures("no_work")
def test_an_empty_folder_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_error_line(run(str(empty)))
    assert line == (
        f"Error: no trace files (.jsonl, .jsonl.gz, .ndjson, .ndjson.gz, .parquet) in {empty}:"
        " nothing to score"
    )


@pytest.mark.usefixtures("no_work")
def test_other_files_are_listed_on_stderr(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    for name in ("a.json", "b.csv", "README.txt"):
        (folder / name).write_text("{}", encoding="utf-8")
    result = run(str(folder))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"skipped 3 file(s) that are not trace files by their name: {folder / 'README.txt'},"
        f" {folder / 'a.json'}, {folder / 'b.csv'}",
        f"Error: no trace files (.jsonl, .jsonl.gz, .ndjson, .ndjson.gz, .parquet) in {folder}:"
        " nothing to score",
    ]


def test_past_five_skipped_files_the_rest_are_counted(traces: Path) -> None:
    folder = traces.parent
    for n in range(7):
        (folder / f"note{n}.txt").write_text("-", encoding="utf-8")
    result = run(str(folder))
    assert result.exit_code == 0, result.output
    (note,) = [line for line in result.stderr.splitlines() if line.startswith("skipped")]
    assert note.startswith("skipped 7 file(s) that are not trace files by their name: ")
    assert note.endswith(f"{folder / 'note4.txt'} and 2 more")
    assert (
        "Read 5 records from 1 file(s): 5 valid (4 scored; 1 unannotated, not scored), "
        "0 quarantined."
    ) in result.stdout


def test_trace_files_without_a_record_are_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    line = one_error_line(run(str(empty)))
    assert line == "Error: no records in the 1 trace file(s) given: nothing to score"


def test_means_by_segment_and_variant(traces: Path) -> None:
    result = run(str(traces), "--metrics", "mrr", "--by", "segment,variant")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("Means by segment, variant:")
    table = [line.split() for line in lines[start + 1 : start + 5]]
    assert table == [
        ["segment", "variant", "annotated", "mrr"],
        ["factual", "candidate", "1", "of", "1", f"{1 / 2:.4f}"],
        ["factual", "control", "1", "of", "1", f"{1 / 1:.4f}"],
        ["multi_hop", "control", "2", "of", "3", f"{(1 / 3 + 1 / 1) / 2:.4f}"],
    ]
    by_variant = json.loads(
        run(str(traces), "--metrics", "mrr", "--by", "variant", "--format", "json").stdout
    )["by"]
    assert by_variant["columns"] == ["variant"]
    assert by_variant["groups"] == [
        {"variant": "candidate", "traces": 1, "annotated_traces": 1, "means": {"mrr": 1 / 2}},
        {
            "variant": "control",
            "traces": 4,
            "annotated_traces": 3,
            "means": {"mrr": pytest.approx((1 + 1 / 3 + 1) / 3)},
        },
    ]


def test_by_takes_only_segment_and_variant(traces: Path) -> None:
    result = run(str(traces), "--by", "query_id")
    assert result.exit_code == 2
    assert "Invalid value for --by: expected a comma-separated list of segment, variant" in (
        result.output
    )


def test_the_quarantine_header_says_how_many_more_and_how_to_keep_them(
    traces: Path, tmp_path: Path
) -> None:
    with traces.open("a", encoding="utf-8") as out:
        out.write("".join('{"trace_id": "broken' + str(n) + '"\n' for n in range(7)))
    shown = run(str(traces)).stdout.splitlines()
    header = shown.index(
        "Quarantined (first 5 of 7; 2 more: add --quarantine FILE (.jsonl, .csv or .parquet)"
        " to keep them all):"
    )
    assert [line.split(": ")[-1] for line in shown[header + 1 : header + 6]] == [
        "malformed JSON"
    ] * 5
    kept = tmp_path / "quarantine.csv"
    lines = run(str(traces), "--quarantine", str(kept)).stdout.splitlines()
    assert f"Quarantined (first 5 of 7; 2 more); all 7 written to {kept}:" in lines
    assert len(pd.read_csv(kept)) == 7
