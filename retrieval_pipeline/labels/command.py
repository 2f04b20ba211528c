"""`labels-from-clicks`, file to file: impression logs in, a judgments file and the propensities
out. The command line's module calls `labels_from_clicks` and prints `summary_lines`.

The judgments file is the judgments format (`query_id`, `doc_id`, `grade`, `judged_at`,
`label_source = "clicks"`) with the click columns beside it (`estimate`, `impressions`,
`effective_impressions`, `clicks`), which a judgments reader ignores. Its kind follows its name:
`.jsonl` / `.ndjson` (JSON lines), `.parquet` or `.csv`. The judgments and PROPENSITIES.json are
written side by side and replaced together (`files.write_atomically`); the quarantine file, when
asked for, is JSON lines of every record that could not be used, with its file, line and reason.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_pipeline.files import write_atomically
from retrieval_pipeline.labels.clicks import (
    ClickLabelOptions,
    ClickLabels,
    ClickTable,
    Propensities,
    click_labels,
    estimate_propensities,
)
from retrieval_pipeline.labels.impressions import (
    ImpressionCounts,
    QuarantinedImpression,
    read_impressions,
)
from retrieval_pipeline.text import json_text, number

JUDGMENT_SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".csv")
# Quarantined records kept in memory for the summary; the quarantine file holds them all.
EXAMPLES = 5


class LabelsOutputError(ValueError):
    """An output path that cannot be written as asked."""


@dataclass(frozen=True)
class ClickLabelsRun:
    """What one run read, estimated and wrote."""

    counts: ImpressionCounts
    propensities: Propensities
    labels: ClickLabels
    options: ClickLabelOptions
    quarantine_examples: tuple[QuarantinedImpression, ...]
    shown_below_max_rank: int


def labels_from_clicks(
    clicks: Sequence[Path | str],
    out: Path,
    propensities_out: Path,
    options: ClickLabelOptions | None = None,
    quarantine_out: Path | None = None,
) -> ClickLabelsRun:
    """Read the impression logs, estimate propensities, label the (query, document) pairs and
    write the judgments and PROPENSITIES.json (and the quarantined records, if asked)."""
    options = options or ClickLabelOptions()
    _judgments_kind(out)  # refuse an unknown kind before reading anything
    counts = ImpressionCounts()
    examples: list[QuarantinedImpression] = []
    table = ClickTable(options.max_rank)
    sink = _QuarantineFile(quarantine_out) if quarantine_out is not None else None
    try:

        def quarantine(record: QuarantinedImpression) -> None:
            if len(examples) < EXAMPLES:
                examples.append(record)
            if sink is not None:
                sink.write(record)

        table.add_all(read_impressions(clicks, counts, quarantine))
    except BaseException:
        if sink is not None:
            sink.abandon()
        raise
    if sink is not None:
        sink.finish()
    propensities = estimate_propensities(table)
    labels = click_labels(table, propensities, options)
    document = propensities.as_json() | {
        "clip": options.clip,
        "min_impressions": options.min_impressions,
        "cut_points": list(options.cut_points),
    }
    for path in (out, propensities_out):
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(
        {
            out: judgments_bytes(labels.judgments, out),
            propensities_out: json_text(document, indent=2, ensure_ascii=True) + "\n",
        }
    )
    return ClickLabelsRun(
        counts, propensities, labels, options, tuple(examples), table.shown_below_max_rank
    )


def _judgments_kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in JUDGMENT_SUFFIXES:
        raise LabelsOutputError(
            f"{path}: name the judgments file .jsonl, .ndjson, .parquet or .csv (its kind "
            "follows its name)"
        )
    return suffix


def judgments_bytes(table: pa.Table, path: Path) -> bytes:
    """The judgments as the file named `path` holds them (by its extension)."""
    kind = _judgments_kind(path)
    if kind == ".parquet":
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        return buffer.getvalue()
    rows = table.to_pylist()
    for row in rows:
        row["judged_at"] = row["judged_at"].isoformat().replace("+00:00", "Z")
    if kind == ".csv":
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=table.column_names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return text.getvalue().encode("utf-8")
    lines = (json_text(row) + "\n" for row in rows)
    return "".join(lines).encode("utf-8")


class _QuarantineFile:
    """Quarantined records as JSON lines, written beside the path and renamed over it at the end,
    so that a run that fails leaves the previous file in place."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.partial = path.with_name(f".{path.name}.partial")
        self.handle = open(self.partial, "w", encoding="utf-8")  # noqa: SIM115

    def write(self, record: QuarantinedImpression) -> None:
        fields = {
            "source_file": record.source_file,
            "source_line": record.source_line,
            "impression_id": record.impression_id,
            "field": record.field,
            "reason": record.reason,
            "raw_record": record.raw_record,
        }
        self.handle.write(json_text(fields) + "\n")

    def finish(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.partial, self.path)

    def abandon(self) -> None:
        self.handle.close()
        self.partial.unlink(missing_ok=True)


def summary_lines(run: ClickLabelsRun) -> list[str]:
    """What a person is told after a run, in words and numbers."""
    counts, labels, props = run.counts, run.labels, run.propensities
    rows = labels.judgments.num_rows
    lines = [
        f"{counts.read} impression records read from {counts.files} file(s): {counts.used} used, "
        f"{counts.quarantined} quarantined, {counts.skipped_empty} showed nothing.",
        f"{labels.pairs} (query, document) pairs in the top {props.max_rank}: {rows} labelled, "
        f"{labels.unjudged} left unjudged (fewer than {run.options.min_impressions} "
        "impressions).",
        "propensity by rank (relative to rank 1; pairs that informed it): "
        + ", ".join(
            f"{rank}: {'unknown' if value is None else number(value)} ({props.pairs[rank]})"
            for rank, value in props.values.items()
        ),
    ]
    if rows:
        judgments = labels.judgments
        lines.append(
            "per labelled pair: median "
            f"{number(float(np.median(judgments['impressions'].to_numpy())), 1)} impressions, "
            f"{number(float(np.median(judgments['effective_impressions'].to_numpy())), 1)} "
            f"effective (weights capped at 1 / {number(run.options.clip)})."
        )
    unknown = [rank for rank, value in props.values.items() if value is None]
    if unknown:
        lines.append(
            f"ranks {', '.join(map(str, unknown))} have no estimate (no (query, document) pair "
            f"links them to rank 1); their {labels.unused_impressions} impressions were not used."
        )
    if run.shown_below_max_rank:
        lines.append(
            f"{run.shown_below_max_rank} documents shown below rank {props.max_rank} were not "
            "counted."
        )
    lines += [f"quarantined: {record.describe()}" for record in run.quarantine_examples]
    return lines
