"""`retrieval-pipeline compare`: pairing on hand-written traces, the flag, exit codes, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from retrieval_pipeline.cli import main
from tests.processes import default_signals


def record(trace: str, query: str, variant: str, rank: int | None, **extra: object) -> str:
    """A trace whose one relevant document `rel` sits at `rank` (None: no labels at all)."""
    retrieved = [f"x{i}" for i in range(1, 4)]
    data: dict[str, object] = {
        "trace_id": trace,
        "query_id": query,
        "timestamp": "2026-01-10T12:00:00Z",
        "retrieved_ids": retrieved,
        "segment": "s1",
        "variant": variant,
    }
    if rank is not None:
        retrieved[rank - 1] = "rel"
        data["relevant_ids"] = ["rel"]
    data.update(extra)
    return json.dumps(data)


# MRR per trace = 1 / rank. q1: A 1, B 1/2. q2: A 1 twice (mean 1), B 1/3. q3: both served, B
# unannotated. q4: A only. q5: B only. q6: B's only label `gone` is absent from the corpus.
LINES = [
    record("a1", "q1", "A", 1),
    record("b1", "q1", "B", 2),
    record("a2", "q2", "A", 1),
    record("a2bis", "q2", "A", 1),
    record("b2", "q2", "B", 3),
    record("a3", "q3", "A", 1),
    record("b3", "q3", "B", None),
    record("a4", "q4", "A", 1),
    record("b5", "q5", "B", 1),
    record("a6", "q6", "A", 1),
    record("b6", "q6", "B", None, retrieved_ids=["gone", "x2"], relevant_ids=["gone"]),
    '{"trace_id": "broken", "query_id": ',
]


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.csv"
    path.write_text("doc_id\nrel\nx1\nx2\nx3\n", encoding="utf-8")  # no `gone`
    return path


def run(traces: Path, *args: str) -> Result:
    base = ["compare", str(traces), "--control", "A", "--candidate", "B", "--metrics", "mrr"]
    return CliRunner().invoke(main, [*base, "--n-resamples", "199", *args])


def test_pairing_counts_and_summary(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = run(traces, "--output", str(out))
    assert result.exit_code == 0, result.output
    assert (
        "Read 12 records from 1 file(s): 11 valid (10 scored; 1 unannotated, not scored), "
        "1 quarantined" in result.output
    )
    assert "3 paired queries; 1 served by A only, 1 by B only, 1 by both" in result.output
    assert "Not flagged." in result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    s1 = data["coverage"][0]
    assert s1["segment"] == "s1"
    assert (s1["paired"], s1["shared_unpaired"], s1["control_only"], s1["candidate_only"]) == (
        3,
        1,
        1,
        1,
    )
    cell = data["cells"][0]
    assert (cell["segment"], cell["metric"], cell["n"]) == ("s1", "mrr", 3)
    assert cell["control_mean"] == pytest.approx(1.0)
    assert cell["candidate_mean"] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)
    assert cell["candidate_trace_mean"] == pytest.approx((1 / 2 + 1 / 3 + 1 + 1) / 4)


def test_stale_labels_are_dropped_as_in_evaluate(
    traces: Path, corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    result = run(traces, "--corpus", str(corpus), "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "1 stale labels dropped" in result.output
    s1 = json.loads(out.read_text(encoding="utf-8"))["coverage"][0]
    # q6's candidate trace lost its only label: served by both, no longer paired
    assert (s1["paired"], s1["shared_unpaired"]) == (2, 2)


def test_flag_is_reported_and_fails_only_when_asked(traces: Path) -> None:
    limits = ["--threshold", "mrr=0.8", "--min-annotated", "1"]
    flagged = run(traces, *limits)
    assert flagged.exit_code == 0, flagged.output
    assert "FLAGGED for review:" in flagged.output
    assert "  - s1: mrr 0.708 < 0.800 (control 1.000)" in flagged.output
    assert "  - all segments: mrr 0.708 < 0.800 (control 1.000)" in flagged.output
    assert run(traces, *limits, "--fail-on-flag").exit_code == 3
    # too few annotated traces for the default minimum of 20: not judged, not flagged
    assert run(traces, "--threshold", "mrr=0.8", "--fail-on-flag").exit_code == 0
    # a threshold for one segment only: the overall row is not judged
    one = run(traces, "--threshold", "s1:mrr=0.8", "--min-annotated", "1", "--fail-on-flag")
    assert one.exit_code == 3
    assert "s1: mrr 0.708 < 0.800" in one.output and "all segments: mrr" not in one.output


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_reports_by_extension(traces: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"report{suffix}"
    result = run(traces, "--output", str(out))
    assert result.exit_code == 0, result.output
    assert f"Report written to {out}." in result.output
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>" if suffix == ".html" else "# B vs A")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--output", "report.txt"], "unknown report format .txt"),
        (["--threshold", "mrr=high"], "expected [SEGMENT:]METRIC=VALUE"),
        (["--threshold", "mrr=1.5"], "VALUE in [0, 1]"),
        (["--guard", "ndgc@10"], "unknown metric 'ndgc@10'"),
        (["--guard", "map"], "guarded metric map is not compared (mrr)"),
        (["--metrics", "mrr@0"], "the cut-off K must be >= 1"),
        (["--alpha", "0"], "alpha must be a number in (0, 1)"),
        (
            ["--normal-approximation-min-pairs", "50"],
            "normal_approximation_min_pairs must be an integer >= 100, got 50",
        ),
    ],
)
def test_bad_options_are_one_line_errors(traces: Path, args: list[str], message: str) -> None:
    result = run(traces, *args)
    assert result.exit_code == (1 if args[0] == "--output" else 2)  # a bad option value: 2
    assert result.output.count("\n") == 1 and result.output.startswith("Error: ")
    assert message in result.output


def test_unknown_variant_and_unreadable_path(traces: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["compare", str(traces), "--control", "A", "--candidate", "Z"]
    )
    assert result.exit_code == 1
    assert result.output == ("Error: candidate variant 'Z' has no traces; variants present: A, B\n")
    same = CliRunner().invoke(main, ["compare", str(traces), "--control", "A", "--candidate", "A"])
    assert same.exit_code == 2 and "same variant" in same.output
    missing = CliRunner().invoke(
        main, ["compare", str(tmp_path / "nope"), "--control", "A", "--candidate", "B"]
    )
    assert missing.exit_code == 1
    assert missing.output == f"Error: {tmp_path / 'nope'}: no such file or directory\n"


def test_importing_the_command_stays_light() -> None:
    probe = (
        "import sys, retrieval_pipeline.cli.compare; "
        "print(sorted(m for m in ('pandas', 'scipy', 'duckdb', 'dagster') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    assert done.stdout.strip() == "[]"


def test_the_large_sample_switch_is_a_setting_of_the_report(traces: Path, tmp_path: Path) -> None:
    def setting(*args: str) -> object:
        out = tmp_path / "report.json"
        result = run(traces, "--output", str(out), *args)
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text(encoding="utf-8"))["settings"][
            "normal_approximation_min_pairs"
        ]

    assert setting() == 1000
    assert setting("--normal-approximation-min-pairs", "250") == 250
