"""Each partition's own metadata, so the Dagster UI has a history: one point per day in every
Plots view, also after a backfill of many days in one run.

A run over a partition range materializes every partition with the one `MaterializeResult` the
asset returns; `context.add_asset_metadata(..., partition_key=day)` overrides its keys for that
day. The assets therefore return the range's metadata and give each day its own numbers, misses
and report paths (`result`). The builders here turn one day's (or the range's) counts into
metadata in words and numbers; a value that does not exist (a rate with nothing counted) is left
out rather than plotted as NaN.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

import dagster as dg
import pandas as pd

from retrieval_pipeline import gate
from retrieval_pipeline.ingest.files import TRACE_FIELDS
from retrieval_pipeline.ingest.phoenix_labels import LabelTally
from retrieval_pipeline.labels.agreement import agreement_by_segment
from retrieval_pipeline.records import unknown_field_lines
from retrieval_pipeline.reports.regression import RegressionReport
from retrieval_pipeline.reports.stage_why import stage_why_lines
from retrieval_pipeline.reports.why import why_table
from retrieval_pipeline.segments import OVERALL_SEGMENT
from retrieval_pipeline.text import finite, markdown_table
from retrieval_pipeline.warehouse.ingestion import IngestCounts
from retrieval_pipeline.warehouse.steps import LabelCounts, MetricCounts

# metadata values as the assets hand them to Dagster (numbers, text, dg.MetadataValue)
Metadata = dict[str, Any]


def result(
    context: dg.AssetExecutionContext,
    start: date,
    end: date,
    by_day: Mapping[date, Metadata],
    run: Metadata,
) -> dg.MaterializeResult:
    """The materialization of a one-day run: the day's metadata and `run`'s. Of a range run:
    each day its own, and `run` on every day; `run` must then hold only what is true of the
    whole range (the range itself, a table of its days, `range_summary`), since a key a day
    lacks would show the range's value on that day."""
    if start == end:  # the day's own numbers say what the range totals would repeat
        kept = {key: value for key, value in run.items() if not key.startswith("range_")}
        return dg.MaterializeResult(metadata={**kept, **by_day.get(start, {})})
    for day, metadata in by_day.items():
        context.add_asset_metadata(dict(metadata), partition_key=day.isoformat())
    return dg.MaterializeResult(metadata=run)


def ingest_metadata(
    per_day: Sequence[tuple[date, IngestCounts]], missing: Mapping[date, str], note: str = ""
) -> Metadata:
    """What `traces` read: records, valid, quarantined, and the days the store lacks; `note`
    ends the summary."""
    skipped = sum(c.skipped for _, c in per_day)
    read = sum(c.read for _, c in per_day) - skipped  # records; skipped spans are not
    quarantined = sum(c.quarantined for _, c in per_day)
    outside = sum(c.outside_day for _, c in per_day)
    empty = [d.isoformat() for d, c in per_day if c.read == 0]
    summary = (
        f"{read} records from {sum(c.files for _, c in per_day)} file(s): "
        f"{read - quarantined} valid, {quarantined} quarantined"
    )
    if skipped:
        summary += f"; {skipped} span(s) of other kinds or stages skipped"
    if outside:
        summary += (
            f"; {outside} valid record(s) have a timestamp on another UTC day"
            " (kept under the store's day)"
        )
    unknown: Counter[str] = Counter()
    for _, counts in per_day:
        unknown.update(dict(counts.unknown_fields))
    if unknown:
        ranked = sorted(unknown.items(), key=lambda item: (-item[1], item[0]))
        summary += "; " + "; ".join(unknown_field_lines(ranked, TRACE_FIELDS))
    if empty:
        summary += "; no data for " + ", ".join(empty)
    if missing:
        summary += "; missing: " + "; ".join(missing.values())
    metadata: Metadata = {
        "summary": summary + note,
        "records_read": read,
        "records_valid": read - quarantined,
        "records_quarantined": quarantined,
        "duplicate_ids_dropped": sum(c.duplicate_ids_dropped for _, c in per_day),
        "records_outside_day": outside,
        "spans_skipped": skipped,
        # pieces validated at once (RETRIEVAL_PIPELINE_VALIDATION_WORKERS, docs/scaling.md)
        "validation_workers": max((c.validation_workers for _, c in per_day), default=1),
    }
    if read:
        metadata["quarantine_rate"] = quarantined / read
    if unknown:
        metadata["unknown_fields"] = ", ".join(f"{name} ({n})" for name, n in ranked)
    return metadata


def ingest_table(per_day: Sequence[tuple[date, IngestCounts]]) -> dg.MetadataValue:
    return dg.MetadataValue.md(
        markdown_table(
            ["day", "files", "read", "valid", "quarantined"],
            [[d.isoformat(), c.files, c.read, c.valid, c.quarantined] for d, c in per_day],
        )
    )


def label_metadata(counts: LabelCounts) -> Metadata:
    metadata: Metadata = {
        "summary": (
            f"{counts.labels} labels, {counts.stale} dropped as stale"
            f" ({counts.traces_with_stale} traces affected)"
        ),
        "labels": counts.labels,
        "stale_labels": counts.stale,
        "traces_with_stale_labels": counts.traces_with_stale,
    }
    if counts.labels:
        metadata["stale_label_rate"] = counts.stale / counts.labels
    return metadata


def metric_metadata(
    counts: MetricCounts, metrics: Sequence[str], judged_only: bool = False
) -> Metadata:
    lists = " (condensed lists: unjudged documents removed)" if judged_only else ""
    metadata: Metadata = {
        "summary": (
            f"{counts.traces} traces scored on {', '.join(metrics)}{lists}: {counts.annotated} "
            f"annotated ({counts.by_own_labels} by their own labels, {counts.by_judgments} by "
            f"the judgments), {counts.unannotated} unannotated, {counts.no_relevant} with no "
            f"relevant label, {counts.empty} empty results (nothing retrieved, scored 0)"
        ),
        "traces": counts.traces,
        "annotated_traces": counts.annotated,
        "traces_labelled_by_own_labels": counts.by_own_labels,
        "traces_labelled_by_judgments": counts.by_judgments,
        "unannotated_traces": counts.unannotated,
        "no_relevant_traces": counts.no_relevant,
        "empty_results": counts.empty,
        "metrics": ", ".join(metrics),
    }
    if counts.traces:
        metadata["coverage"] = counts.annotated / counts.traces
    return metadata


def segment_metadata(rows: pd.DataFrame, with_day: bool) -> Metadata:
    """Rows, verdicts and misses of `segment_metrics` rows (one day's or a range's)."""
    misses = gate.misses_of(rows)
    statuses = rows["status"].value_counts().to_dict() if not rows.empty else {}
    groups = rows.drop_duplicates(["partition_date", "segment", "variant"]) if len(rows) else rows
    summary = (
        f"{len(groups)} segment/variant rows: "
        + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        if len(rows)
        else "no data: no traces in these partitions"
    )
    return {
        "summary": summary,
        "rows": len(rows),
        "misses": len(misses),
        "misses_in_words": "\n".join(m.words(with_day=with_day) for m in misses) or "none",
    }


# The Plots view sorts its plots by label (Dagster 1.13's UI: the first 100 numeric labels of
# the latest materialization, then sorted), so the labels set the order: the counts of misses,
# then each variant's overall headline metrics, then the segments, then the watch list; each
# threshold is a series of its own, named after its metric, so it sorts beside it.
MISSES_LABEL = "Misses"
WATCH_LABEL = "Watch list"
THRESHOLD_SUFFIX = " threshold"


def plot_label(segment: str, variant: str, metric: str) -> str:
    """`Overall ndcg@10 (candidate)`, `Segment multi_hop: ndcg@10 (candidate)`."""
    if segment == OVERALL_SEGMENT:
        return f"Overall {metric} ({variant})"
    return f"Segment {segment}: {metric} ({variant})"


def plot_values(report: RegressionReport) -> dict[str, float]:
    """The numbers the Plots view draws, most telling first (the UI keeps the first 100 labels):
    each variant's overall headline metrics, the day's misses, then every other segment's
    headline metrics; each mean followed by its threshold (`... threshold`) where one is set.
    A mean that is not a number is left out rather than plotted; its threshold still is."""
    if report.rows.empty:
        return {}
    rows = report.rows.to_dict(orient="records")
    missed = {(m.segment, m.variant, m.metric) for m in report.misses}

    def rank(row: dict[str, Any]) -> tuple[int, str, str, str]:
        key = (row["segment"], row["variant"], row["metric"])
        group = 0 if row["segment"] == OVERALL_SEGMENT else 1 if key in missed else 2
        return (group, str(key[0]), str(key[1]), str(key[2]))

    out: dict[str, float] = {}
    for row in sorted(rows, key=rank):
        key = (row["segment"], row["variant"], row["metric"])
        if row["metric"] not in report.headline_metrics and key not in missed:
            continue
        label = plot_label(*(str(part) for part in key))
        mean, threshold = finite(row["mean"]), finite(row.get("threshold"))
        if mean is not None:
            out[label] = mean
        if threshold is not None:
            out[label + THRESHOLD_SUFFIX] = threshold
    return out


def report_metadata(report: RegressionReport, stem: str) -> Metadata:
    """One day's report: its summary, misses, the report itself, its files, and its numbers
    for the Plots view (`plot_values`, with the counts of misses and of the watch list)."""
    return {
        "summary": report.summary(),
        MISSES_LABEL: len(report.misses),
        "misses_in_words": "\n".join(m.words() for m in report.misses) or "none",
        **plot_values(report),
        WATCH_LABEL: len(report.watch()),
        "watch_in_words": "\n".join(w.words() for w in report.watch()) or "none",
        "report": dg.MetadataValue.md(report.to_markdown()),
        "files": "\n".join(f"{stem}.{suffix}" for suffix in ("md", "json", "html")),
        "markdown_path": dg.MetadataValue.path(f"{stem}.md"),
        **why_metadata(report),
    }


def why_metadata(report: RegressionReport) -> Metadata:
    """Why each miss and significant drop moved (docs/why.md): a small table, one row per
    finding, and each finding's three lines; nothing on a day without findings."""
    found: Metadata = {}
    if report.why:
        found |= {
            "why": dg.MetadataValue.md(why_table(report.why)),
            "why_in_words": "\n".join(line for e in report.why for line in e.lines()),
        }
    if report.stage_why:  # first stage against reranking (docs/why.md, "The reranker's stages")
        found["reranker_why"] = stage_why_lines(report.stage_why)
    return found


def told(
    context: dg.AssetExecutionContext, summary: str, warning: bool, metadata: Mapping[str, Any]
) -> dg.MaterializeResult:
    """Log `summary` (a warning when something was rejected) and return it first in the metadata."""
    (context.log.warning if warning else context.log.info)(summary)
    return dg.MaterializeResult(metadata={"summary": summary, **metadata})


def phoenix_label_metadata(tallies: Sequence[LabelTally], relevance_level: float = 1.0) -> Metadata:
    """The labels the days' Phoenix document annotations gave, per source, and the HUMAN/LLM
    agreement per segment, in words and numbers (docs/phoenix.md)."""
    total = LabelTally()
    for tally in tallies:
        total.add(tally)
    rows = [(s, h, m, n) for (s, h, m), n in sorted(total.pairs.items())]
    return {
        "phoenix_labels": total.summary(),
        "phoenix_annotations_refused": total.quarantined,
        **{f"phoenix_labels ({source})": n for source, n in sorted(total.labels.items())},
        **agreement_metadata(rows, relevance_level),
    }


def agreement_metadata(
    rows: Iterable[tuple[str, float, float, int]], relevance_level: float = 1.0
) -> Metadata:
    """Cohen's kappa (binarised) and weighted kappa (grades) per segment, with their pair
    counts; an undefined kappa is left out of the numbers (said in the words)."""
    by_segment = agreement_by_segment(rows, relevance_level)
    out: Metadata = {
        "label_agreement": "\n".join(f"{s}: {a.describe()}" for s, a in by_segment.items())
        or "no document graded by both a HUMAN and an LLM annotation"
    }
    for segment, agreement in by_segment.items():
        out[f"kappa_pairs ({segment})"] = agreement.pairs
        if agreement.kappa is not None:
            out[f"kappa ({segment})"] = agreement.kappa
        if agreement.weighted_kappa is not None:
            out[f"weighted_kappa ({segment})"] = agreement.weighted_kappa
    return out
