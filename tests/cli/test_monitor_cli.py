"""Tests for `retrieval-pipeline monitor`: exit codes, bad lines, stdin, resuming from a state file,
following a growing file, and a start-up free of pandas, DuckDB and Dagster."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.cli.monitor import ALERT_EXIT_CODE
from tests.live.traces import DOCS, T0, trace_fields
from tests.processes import default_signals


def line(n: int, rank: int, segment: str = "multi_hop") -> str:
    """A trace whose reciprocal rank is 1/rank, at T0 + n seconds."""
    return json.dumps(trace_fields(n, T0 + timedelta(seconds=n), rank, segment))


def stream(ranks_per_window: list[int], per_window: int = 4) -> list[str]:
    """Windows of `per_window` traces, all with the window's rank."""
    lines, n = [], 0
    for rank in ranks_per_window:
        for _ in range(per_window):
            lines.append(line(n, rank))
            n += 1
    return lines


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{text}\n" for text in lines), encoding="utf-8")
    return path


RULE = ["--window-records", "4", "--metrics", "mrr", "--threshold", "mrr=0.5"]
RULE += ["--consecutive", "2", "--min-labels", "4"]


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["monitor", *args], input=stdin)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_once_fail_on_alert_exits_3_on_a_sustained_drop(tmp_path: Path) -> None:
    # means 1, 1, 1/4, 1/4 (< 0.5 twice in a row: alert at window 4), then 1 (recovery)
    path = write(tmp_path / "t.jsonl", stream([1, 1, 4, 4, 1]))
    code, out, err = run("--follow", str(path), "--once", "--fail-on-alert", *RULE)
    assert code == ALERT_EXIT_CODE
    lines = out.splitlines()
    assert [text.split(":")[0] for text in lines if text.startswith("window")] == [
        f"window {i} 2026-03-02T00" for i in range(1, 6)
    ]
    assert (
        "ALERT (window 4) all segments: mrr 0.25 < 0.50 for 2 consecutive windows "
        "(>= 4 labels each)"
    ) in lines
    assert any(
        text.startswith("RECOVERED (window 5) multi_hop: mrr 1.00 >= 0.50") for text in lines
    )
    assert "2 alerts fired, 0 open" in err


def test_once_without_a_sustained_drop_or_without_the_flag_exits_0(tmp_path: Path) -> None:
    blip = write(tmp_path / "blip.jsonl", stream([1, 4, 1, 4, 1]))  # never two bad in a row
    assert run("--follow", str(blip), "--once", "--fail-on-alert", *RULE)[0] == 0
    drop = write(tmp_path / "drop.jsonl", stream([1, 4, 4]))
    code, out, _ = run("--follow", str(drop), "--once", *RULE)
    assert code == 0 and "ALERT" in out


def test_too_few_labels_is_no_evidence(tmp_path: Path) -> None:
    unlabelled: dict[str, object] = {"trace_id": "u", "query_id": "q"}
    unlabelled |= {"timestamp": T0.isoformat(), "retrieved_ids": DOCS, "segment": "multi_hop"}
    lines = stream([4])
    # window 2: 4 sampled, 3 labelled < --min-labels 4: neither alerts nor resets
    lines += [line(100, 4), line(101, 4), line(102, 4), json.dumps(unlabelled)]
    lines += stream([4])
    path = write(tmp_path / "t.jsonl", lines)
    code, out, _ = run("--follow", str(path), "--once", "--fail-on-alert", *RULE)
    assert code == ALERT_EXIT_CODE
    assert [text.split(") ")[0] for text in out.splitlines() if text.startswith("ALERT")] == [
        "ALERT (window 3",
        "ALERT (window 3",
    ]


def test_bad_lines_are_reported_with_file_and_line_and_skipped(tmp_path: Path) -> None:
    lines = stream([1, 1])
    lines.insert(2, "{not json")
    lines.insert(5, json.dumps({"trace_id": "x", "query_id": "q"}))
    path = write(tmp_path / "t.jsonl", lines)
    code, out, err = run("--follow", str(path), "--once", *RULE)
    assert code == 0
    assert f"{path}:3: malformed JSON" in err
    assert f"{path}:6: missing required field timestamp" in err
    assert "read 10 lines: 8 records, 2 bad; 2 windows closed" in err
    assert out.count("\nwindow ") + out.startswith("window ") == 2


def test_stdin_json_format_and_partial_last_window(tmp_path: Path) -> None:
    text = "".join(f"{x}\n" for x in stream([1, 2, 2], per_window=4)[:10])
    code, out, _ = run("--follow", "-", "--format", "json", *RULE, stdin=text)
    assert code == 0
    objects = [json.loads(x) for x in out.splitlines()]
    assert [(o["type"], o.get("index"), o.get("partial")) for o in objects] == [
        ("window", 1, False),
        ("window", 2, False),
        ("window", 3, True),  # the input ended: the open window closes as partial
    ]
    assert objects[1]["means"] == {"mrr": 1 / 2}
    assert objects[2]["sampled"] == 2 and objects[2]["segments"]["multi_hop"]["labelled"] == 2


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", stream([1]))
    assert run("--follow", str(path), "--once", "--threshold", "bleu=0.5")[0] == 2
    assert (
        run("--follow", str(path), "--once", "--window-records", "3", "--window-seconds", "9")[0]
        == 2
    )
    assert run("--follow", str(tmp_path / "missing.jsonl"), "--once")[0] == 1


def test_state_file_resumes_without_double_counting(tmp_path: Path) -> None:
    lines = stream([1, 1, 4, 4, 1, 4])
    whole = write(tmp_path / "whole.jsonl", lines)
    _, expected, _ = run("--follow", str(whole), "--once", "--format", "json", *RULE)
    text = whole.read_bytes()
    growing, state = tmp_path / "growing.jsonl", tmp_path / "state.json"
    options = ["--follow", str(growing), "--once", "--state", str(state), "--format", "json"]
    outputs = []
    # Cut anywhere, mid-line included: a half-written line is read once it is complete.
    cuts = [0, 150, 151, 1200, len(text) // 2 + 7, len(text)]
    for start, stop in itertools.pairwise(cuts):
        with growing.open("ab") as handle:
            handle.write(text[start:stop])
        code, out, err = run(*options, *RULE)
        assert code == 0 and ", 0 bad" in err
        outputs.append(out)
    resumed = [json.loads(x) for out in outputs for x in out.splitlines()]
    single = [json.loads(x) for x in expected.splitlines()]
    # With a state file the last window stays open for the next run, where one pass closes it
    # as partial at the end: compare what both closed for good.
    assert resumed == [o for o in single if not o.get("partial")]
    assert len([o for o in resumed if o["type"] == "window"]) == 6
    saved = json.loads(state.read_text())
    assert saved["monitor"]["totals"]["records"] == len(lines)


def test_state_file_of_another_source_is_refused(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", stream([1]))
    b = write(tmp_path / "b.jsonl", stream([1]))
    state = tmp_path / "state.json"
    assert run("--follow", str(a), "--once", "--state", str(state))[0] == 0
    code, _, err = run("--follow", str(b), "--once", "--state", str(state))
    assert code == 1 and "follows" in err


def test_follow_mode_waits_for_complete_lines_and_exits_3_on_the_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "live.jsonl"
    path.write_text("")
    lines = stream([1, 4, 4, 1])  # windows of 4; the alert completes with line 12
    printed: list[str] = []
    polls = 0

    def between_polls(seconds: float) -> None:
        """The follower's wait between two reads of the file: the writer acts here, so each
        read sees exactly what the test means it to."""
        nonlocal polls
        polls += 1
        printed.extend(capsys.readouterr().out.splitlines(keepends=True))
        if polls == 1:  # the first read found the file empty
            with path.open("a", encoding="utf-8") as handle:
                handle.write("".join(f"{text}\n" for text in lines[:11]) + lines[11][:30])
        elif polls == 4:  # three reads saw the half-written line, and the command still follows
            assert printed[-1].startswith("window 2 ")
            assert not any("ALERT" in text for text in printed), (
                "no alert before the line is complete"
            )
            with path.open("a", encoding="utf-8") as handle:
                handle.write(lines[11][30:] + "\n" + "".join(f"{text}\n" for text in lines[12:]))
        elif polls > 4:
            raise AssertionError(f"still following after the line was completed; got {printed!r}")

    # The command waits with time.sleep between reads: each wait is one step of the test.
    monkeypatch.setattr(time, "sleep", between_polls)
    command = ["monitor", "--follow", str(path), *RULE, "--fail-on-alert", "--poll-seconds", "0.05"]
    code = main(command, standalone_mode=False)
    captured = capsys.readouterr()
    out = captured.out
    assert code == ALERT_EXIT_CODE, captured.err
    assert polls == 4
    assert out.startswith("window 3 ")
    assert "ALERT (window 3) all segments: mrr 0.25 < 0.50" in out
    assert "window 4" not in out  # stopped at the alert, though window 4 was complete too


def test_the_command_starts_without_pandas_duckdb_or_dagster(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", stream([1, 1]))
    code = (
        "import sys\n"
        "from retrieval_pipeline.cli import main\n"
        f"try:\n    main(['monitor', '--follow', {str(path)!r}, '--once'])\n"
        "except SystemExit:\n    pass\n"
        "heavy = ('pandas', 'duckdb', 'dagster', 'pyarrow')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=default_signals,
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("option", ["--help"])
def test_help_lists_the_options(option: str) -> None:
    code, out, _ = run(option)
    assert code == 0
    for name in ("--follow", "--window-seconds", "--window-records", "--sample-rate"):
        assert name in out
    for name in ("--threshold", "--consecutive", "--min-labels", "--fail-on-alert", "--once"):
        assert name in out
