"""`monitor --follow` on a log that is truncated or rotated, and a `--state` file that is damaged
(issue 27, class 6 and 10): the new file is read from its start, saying so once (it printed
"shrank ... not read again" on every poll and then resumed mid-line; a rotated file already longer
than the old offset lost its first lines silently); a state file missing a key fails in words."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main
from retrieval_pipeline.live.rules import MonitorConfigError
from retrieval_pipeline.live.tailing import Arrival, FileProgress, StoreCursor, read_new_lines
from tests.cli.test_monitor_cli import line, write

RULE = ["--window-records", "4", "--metrics", "mrr", "--format", "json"]


def texts(arrivals: list[Arrival]) -> list[str]:
    return [json.loads(a.text)["query_id"] for a in arrivals]


def test_a_truncated_log_is_read_again_from_its_start_saying_so_once(tmp_path: Path) -> None:
    log = write(tmp_path / "app.jsonl", [line(n, 1) for n in range(10)])
    found, progress, problem = read_new_lines(log, FileProgress(), restart=True)
    assert (len(found), problem) == (10, None)
    write(log, [line(n, 1) for n in range(100, 103)])  # truncated, then 3 new lines
    found, progress, problem = read_new_lines(log, progress, restart=True)
    assert texts(found) == ["q100", "q101", "q102"]
    assert [a.line for a in found] == [1, 2, 3]
    assert problem is not None and "truncated to" in problem and "from its start" in problem
    found, progress, problem = read_new_lines(log, progress, restart=True)
    assert (found, problem) == ([], None)  # said once


def test_a_rotated_log_longer_than_the_old_offset_is_read_whole(tmp_path: Path) -> None:
    log = write(tmp_path / "app.jsonl", [line(n, 1) for n in range(10)])
    found, progress, _ = read_new_lines(log, FileProgress(), restart=True)
    assert len(found) == 10
    os.rename(log, tmp_path / "app.jsonl.1")
    write(log, [line(n, 1) for n in range(200, 260)])  # 60 lines, past the old offset
    found, progress, problem = read_new_lines(log, progress, restart=True)
    assert len(found) == 60 and texts(found)[0] == "q200"  # none of the 60 lost
    assert problem is not None and "replaced by another file (rotated)" in problem
    assert read_new_lines(log, progress, restart=True)[1:] == (progress, None)


def test_the_trace_store_keeps_its_append_only_rule(tmp_path: Path) -> None:
    # without restart (the live sensor's store, append-only) a shrunk file is not read again
    log = write(tmp_path / "app.jsonl", [line(n, 1) for n in range(10)])
    _, progress, _ = read_new_lines(log, FileProgress())
    write(log, [line(100, 1)])
    found, _, problem = read_new_lines(log, progress)
    assert found == [] and problem is not None and "not read again" in problem


def test_the_command_reads_a_rotated_log_from_its_start(tmp_path: Path) -> None:
    log, state = tmp_path / "app.jsonl", tmp_path / "state.json"
    options = ["monitor", "--follow", str(log), "--once", "--state", str(state), *RULE]
    write(log, [line(n, 1) for n in range(4)])
    first = CliRunner().invoke(main, options)
    assert first.exit_code == 0, first.output
    os.rename(log, tmp_path / "app.jsonl.1")
    write(log, [line(n, 1) for n in range(10, 22)])
    second = CliRunner().invoke(main, options)
    assert second.exit_code == 0, second.output
    assert second.stderr.count("replaced by another file (rotated)") == 1
    windows = [json.loads(x) for x in second.stdout.splitlines()]
    assert [w["records"] for w in windows if w["type"] == "window"] == [4, 4, 4]


@pytest.mark.parametrize(
    ("drop", "key"), [(("monitor",), "monitor"), (("monitor", "open_windows"), "open_windows")]
)
def test_a_state_file_missing_a_key_fails_in_words(
    tmp_path: Path, drop: tuple[str, ...], key: str
) -> None:
    log, state = tmp_path / "app.jsonl", tmp_path / "state.json"
    options = ["monitor", "--follow", str(log), "--once", "--state", str(state), *RULE]
    write(log, [line(n, 1) for n in range(6)])
    assert CliRunner().invoke(main, options).exit_code == 0
    saved = json.loads(state.read_text())
    holder = saved
    for part in drop[:-1]:
        holder = holder[part]
    del holder[drop[-1]]
    state.write_text(json.dumps(saved))
    result = CliRunner().invoke(main, options)
    assert result.exit_code == 1
    assert f"state file {state} lacks the key {key!r}; delete it to start afresh" in result.stderr
    assert "Traceback" not in result.output


def test_a_sensor_cursor_missing_a_key_fails_in_words() -> None:
    text = json.loads(StoreCursor().to_json())
    del text["files"]
    with pytest.raises(MonitorConfigError, match="the live sensor cursor lacks the key 'files'"):
        StoreCursor.from_json(json.dumps(text))
