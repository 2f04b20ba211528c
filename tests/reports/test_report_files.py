"""Every report file is written whole: a write that fails half-way leaves the previous file as it
was and no partial file beside it (`files.write_atomically`), for the comparison report, a day's
comparison files (the report and the notice) and the regression report's HTML page.

The failure is the last step before the rename, `os.fsync`, made to raise: a file written in place
would already be half-replaced by then (or the writer would not fsync at all and not fail).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from retrieval_pipeline import files
from retrieval_pipeline.ab.compare import Comparison, ComparisonSettings
from retrieval_pipeline.ab.day import DayComparison
from retrieval_pipeline.ab.pairing import compare_variants
from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.reports.comparison import write_comparison_report, write_reports
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.reports.regression_html import write_regression_html

DAY = date(2026, 11, 30)
OLD = "the previous report\n"
TREND = pd.DataFrame(columns=["partition_date", "segment", "variant", "metric", "mean"])


def _comparison() -> Comparison:
    rows = [
        {"query_id": f"q{i}", "segment": "s", "variant": variant, "mrr": value}
        for i in range(6)
        for variant, value in (("A", 0.5 + i / 20), ("B", 0.55 + i / 20))
    ]
    return compare_variants(pd.DataFrame(rows), "A", "B", ComparisonSettings(n_resamples=99))


def _day(with_comparison: bool) -> DayComparison:
    comparison = _comparison() if with_comparison else None
    return DayComparison(
        day=DAY,
        window_start=DAY,
        window_end=DAY,
        lookback_days=1,
        days_with_data=1 if with_comparison else 0,
        variants=("A", "B") if with_comparison else (),
        control="A",
        candidate="B",
        comparison=comparison,
        problem=None if with_comparison else "the window holds no traces",
    )


def _fail_mid_write(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", refuse)


def _assert_untouched(folder: Path, previous: dict[Path, str]) -> None:
    for path, text in previous.items():
        assert path.read_text(encoding="utf-8") == text, path
    assert sorted(folder.iterdir()) == sorted(previous), "a partial file was left behind"


def _check(
    folder: Path, paths: list[Path], write: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder.mkdir(exist_ok=True)
    previous = {path: f"{OLD}{path.name}\n" for path in paths}
    for path, text in previous.items():
        path.write_text(text, encoding="utf-8")
    with monkeypatch.context() as patched:
        _fail_mid_write(patched)
        with pytest.raises(OSError, match="No space left"):
            write()
    _assert_untouched(folder, previous)
    write()  # and without the failure, every file is replaced
    for path, text in previous.items():
        assert path.read_text(encoding="utf-8") != text, path
    assert sorted(folder.iterdir()) == sorted(previous)


@pytest.mark.parametrize("suffix", [".html", ".md", ".json"])
def test_the_comparison_report_is_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    path = tmp_path / "reports" / f"report{suffix}"
    comparison = _comparison()
    _check(
        path.parent,
        [path],
        lambda: write_comparison_report(comparison, path),
        monkeypatch,
    )


@pytest.mark.parametrize("with_comparison", [True, False], ids=["report", "notice"])
def test_a_days_comparison_files_are_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_comparison: bool
) -> None:
    folder = tmp_path / "reports"
    paths = [folder / f"variant_comparison_{DAY}{suffix}" for suffix in (".html", ".md", ".json")]
    result = _day(with_comparison)
    _check(
        folder,
        paths,
        lambda: write_reports(result, folder, TREND, PipelineConfig()),
        monkeypatch,
    )


def test_the_regression_page_is_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "reports"
    report = build_report(pd.DataFrame(), PipelineConfig(), DAY)
    path = folder / f"regression_report_{DAY}.html"
    _check(
        folder,
        [path],
        lambda: write_regression_html(report, TREND, PipelineConfig(), folder),
        monkeypatch,
    )
