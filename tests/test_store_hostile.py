"""The local trace store under hostile folders (issue 27, class 10): it lists trace files as
`evaluate` does (`x.ndjson`, `UPPER.JSONL`), and a file name that is not UTF-8, a symlink loop or
a folder that cannot be listed is a `TraceStoreError` naming the path, the step's words, never a
raw exception; a folder named like a day that is no day (`date=2026-13-45`) is left out, named."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from retrieval_pipeline.ingest.files import JSONL_SUFFIXES, OTLP_ONLY_SUFFIXES, PARQUET_SUFFIXES
from retrieval_pipeline.store import TRACE_SUFFIXES, LocalTraceStore, TraceStoreError

DAY = date(2026, 11, 30)


def day_folder(tmp_path: Path, day: str = "2026-11-30") -> Path:
    folder = tmp_path / "store" / "traces" / f"date={day}"
    folder.mkdir(parents=True)
    return folder


def test_the_store_reads_the_files_evaluate_reads(tmp_path: Path) -> None:
    assert set(TRACE_SUFFIXES) == set(JSONL_SUFFIXES + PARQUET_SUFFIXES + OTLP_ONLY_SUFFIXES)
    folder = day_folder(tmp_path)
    names = ["a.ndjson", "B.JSONL", "c.Jsonl.Gz", "d.ndjson.gz", "e.PARQUET", "f.txt", "g.json"]
    for name in names:
        (folder / name).write_text("{}\n")
    listed = [p.name for p in LocalTraceStore(tmp_path / "store").trace_files(DAY)]
    # g.json is listed: ingestion reads it as a span export, or stops the day naming it
    assert listed == ["B.JSONL", "a.ndjson", "c.Jsonl.Gz", "d.ndjson.gz", "e.PARQUET", "g.json"]


def test_a_folder_named_like_a_day_that_is_no_day_is_left_out_with_a_reason(
    tmp_path: Path,
) -> None:
    day_folder(tmp_path)
    day_folder(tmp_path, "2026-13-45")
    store = LocalTraceStore(tmp_path / "store")
    assert store.days() == [DAY]
    (reason,) = store.ignored
    assert reason.startswith(f"ignoring {tmp_path / 'store' / 'traces' / 'date=2026-13-45'}: ")
    assert "2026-13-45 is not a date (month must be in 1..12)" in reason


def test_a_file_name_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    folder = day_folder(tmp_path)
    (folder / "good.jsonl").write_text("{}\n")
    with open(os.fsencode(folder) + b"/bad\xff.jsonl", "w") as handle:
        handle.write("{}\n")
    with pytest.raises(TraceStoreError, match=r"the file name b'bad\\xff.jsonl' is not UTF-8"):
        LocalTraceStore(tmp_path / "store").trace_files(DAY)


def test_a_symlink_loop_is_named(tmp_path: Path) -> None:
    folder = day_folder(tmp_path)
    (folder / "a.jsonl").symlink_to(folder / "b.jsonl")
    (folder / "b.jsonl").symlink_to(folder / "a.jsonl")
    with pytest.raises(TraceStoreError, match=r"refusing .*a\.jsonl: it cannot be resolved"):
        LocalTraceStore(tmp_path / "store").trace_files(DAY)


def test_a_folder_that_cannot_be_listed_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = day_folder(tmp_path)
    listing = Path.iterdir

    def refuse(path: Path) -> Iterator[Path]:
        if path == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(Path, "iterdir", refuse)  # as root, chmod 000 would not stop the test
    with pytest.raises(TraceStoreError, match=f"cannot read {folder}: Permission denied"):
        LocalTraceStore(tmp_path / "store").trace_files(DAY)
