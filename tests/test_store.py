"""The trace-store interface and its local-directory default."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest

from retrieval_pipeline.store import LocalTraceStore, MissingDayError, TraceStore, TraceStoreError

DAY = date(2026, 11, 30)


def touch(path: Path, text: str = "{}\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    day = store / "traces" / "date=2026-11-30"
    for name in ("b.jsonl", "a.jsonl.gz", "c.parquet", "notes.txt", ".partial.jsonl"):
        touch(day / name)
    touch(day / "nested" / "deeper.jsonl")
    (store / "traces" / "date=2026-11-29").mkdir()
    (store / "traces" / "not-a-day").mkdir()
    touch(store / "traces" / "date=2026-11-28.jsonl")  # a file, not a day folder
    return store


def test_is_a_trace_store(root: Path) -> None:
    assert isinstance(LocalTraceStore(root), TraceStore)


def test_days_are_the_date_folders_oldest_first(root: Path) -> None:
    assert LocalTraceStore(root).days() == [date(2026, 11, 29), DAY]


def test_trace_files_in_name_order_known_suffixes_only(root: Path) -> None:
    files = LocalTraceStore(root).trace_files(DAY)
    assert [f.name for f in files] == ["a.jsonl.gz", "b.jsonl", "c.parquet"]
    assert all(f.is_absolute() for f in files)


def test_an_empty_day_has_no_files(root: Path) -> None:
    assert LocalTraceStore(root).trace_files(date(2026, 11, 29)) == []


def test_a_missing_day_is_an_error_naming_the_path(root: Path) -> None:
    with pytest.raises(MissingDayError) as caught:
        LocalTraceStore(root).trace_files(date(2026, 12, 1))
    expected = root / "traces" / "date=2026-12-01"
    assert str(caught.value) == f"no traces for 2026-12-01 under {expected}"
    assert isinstance(caught.value, FileNotFoundError)


def test_a_store_without_traces_has_no_days(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert LocalTraceStore(tmp_path / "empty").days() == []


def test_a_missing_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceStoreError, match=r"trace store root .*nowhere does not exist"):
        LocalTraceStore(tmp_path / "nowhere").days()


def test_corpus_is_the_newest_snapshot(root: Path) -> None:
    store = LocalTraceStore(root)
    assert store.corpus_file() is None
    old = touch(root / "corpus" / "z-old.parquet")
    new = touch(root / "corpus" / "a-new.csv", "doc_id\nd1\n")
    touch(root / "corpus" / "readme.md")
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    assert store.corpus_file() == new
    os.utime(old, (3_000_000, 3_000_000))
    assert store.corpus_file() == old


def test_an_empty_corpus_folder_has_no_snapshot(root: Path) -> None:
    (root / "corpus").mkdir()
    assert LocalTraceStore(root).corpus_file() is None


@pytest.mark.parametrize("part", ["..", "../elsewhere", "traces/../../x", "/etc", ""])
def test_paths_leaving_the_root_are_refused(root: Path, part: str) -> None:
    with pytest.raises(TraceStoreError, match="refusing path"):
        LocalTraceStore(root).path(part)


def test_a_symlinked_file_resolving_outside_is_refused(root: Path, tmp_path: Path) -> None:
    outside = touch(tmp_path / "outside" / "secret.jsonl")
    (root / "traces" / "date=2026-11-30" / "link.jsonl").symlink_to(outside)
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        LocalTraceStore(root).trace_files(DAY)


def test_a_symlinked_day_resolving_outside_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    touch(outside / "x.jsonl")
    (root / "traces" / "date=2026-12-02").symlink_to(outside, target_is_directory=True)
    store = LocalTraceStore(root)
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        store.trace_files(date(2026, 12, 2))
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        store.days()


def test_a_symlinked_corpus_resolving_outside_is_refused(root: Path, tmp_path: Path) -> None:
    outside = touch(tmp_path / "corpus.csv", "doc_id\nd1\n")
    (root / "corpus").mkdir()
    (root / "corpus" / "corpus.csv").symlink_to(outside)
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        LocalTraceStore(root).corpus_file()


def test_a_symlink_inside_the_root_is_fine(root: Path) -> None:
    day = root / "traces" / "date=2026-11-30"
    (day / "z-alias.jsonl").symlink_to(day / "b.jsonl")
    names = [f.name for f in LocalTraceStore(root).trace_files(DAY)]
    assert names == ["a.jsonl.gz", "b.jsonl", "c.parquet", "z-alias.jsonl"]


def test_a_symlinked_root_is_followed(root: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    files = LocalTraceStore(alias).trace_files(DAY)
    assert [f.name for f in files] == ["a.jsonl.gz", "b.jsonl", "c.parquet"]


def test_describe_names_the_root(root: Path) -> None:
    assert str(root) in LocalTraceStore(root).describe()
