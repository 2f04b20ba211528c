"""The output files of `evaluate`, per query and quarantined: a table as Parquet, CSV or JSON
lines, chosen by the file's extension."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """Write `frame` as Parquet, CSV or JSON lines, chosen by the file's extension."""
    suffix = output_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True, force_ascii=False)


OUTPUT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def output_format(path: Path) -> str:
    """The output format of `path`, its extension; ValueError naming the ones known."""
    suffix = path.suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise ValueError(
            f"{path}: unknown output format {suffix or '(none)'}; use {', '.join(OUTPUT_SUFFIXES)}"
        )
    return suffix
