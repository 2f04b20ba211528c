"""The stages of a retrieval (first-stage retriever, a reranker's input and its output) side by
side, and the reranker's gain over its input per segment with its interval, in words and as data.
Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from retrieval_pipeline.ab.stages import StageGain
from retrieval_pipeline.segments import OVERALL_SEGMENT, segment_label
from retrieval_pipeline.text import MISSING, finite, markdown_table, number

STAGE_WORDS = {
    "retriever": "first-stage retrieval",
    "reranker_input": "the reranker's input",
    "reranker": "the reranker's output",
}


def stages_data(
    means: Mapping[str, Mapping[str, float | None]],
    scored: Mapping[str, int],
    gains: Sequence[StageGain],
) -> dict[str, object]:
    """Per stage its valid records and metric means; per segment and metric the gain.
    `records_scored` is the deprecated alias of `records_valid` (docs/evaluate.md, "Words")."""
    return {
        "stages": {
            stage: {
                "records_valid": scored[stage],
                "records_scored": scored[stage],
                "means": dict(means[stage]),
            }
            for stage in means
        },
        "reranker_stage": bool(scored.get("reranker_input") or scored.get("reranker")),
        "reranker_gain": [
            {
                "segment": gain.segment,
                "metric": gain.metric,
                "pairs": gain.stats.n,
                "input_mean": gain.stats.control_mean,
                "output_mean": gain.stats.candidate_mean,
                "gain": gain.stats.delta,
                "ci_low": gain.stats.ci_low,
                "ci_high": gain.stats.ci_high,
                "ci_method": gain.stats.ci_method,
            }
            for gain in gains
        ],
    }


def stages_text(
    means: Mapping[str, Mapping[str, float | None]],
    scored: Mapping[str, int],
    gains: Sequence[StageGain],
) -> str:
    """The stage means, then the gain table: where a regression came from."""
    lines = ["Stages (each scored against the same labels):"]
    for stage, values in means.items():
        if stage != "retriever" and not scored[stage]:
            continue
        shown = ", ".join(f"{name} {number(value, 4)}" for name, value in values.items())
        lines.append(f"  {STAGE_WORDS.get(stage, stage)}: {scored[stage]} valid records; {shown}")
    if not scored.get("reranker_input") and not scored.get("reranker"):
        lines.append(
            "No reranker stage: no RERANKER span among the traces (trace records hold the first "
            "stage only), so there is no gain to report."
        )
        return "\n".join(lines)
    if not any(gain.stats.n for gain in gains):
        lines.append("No reranker span with both its input and output annotated: no gain.")
        return "\n".join(lines)
    lines += ["", "Reranker gain over its input (output - input, paired per span, 95% interval):"]
    lines.append(f"  {'segment':<20}{'metric':<14}{'pairs':>6}{'input':>9}{'output':>9}  gain")
    for gain in gains:
        stats = gain.stats
        interval = (
            f" [{number(stats.ci_low, 4, signed=True)}, {number(stats.ci_high, 4, signed=True)}]"
            if stats.ci_low is not None and stats.ci_high is not None
            else ""
        )
        lines.append(
            f"  {segment_label(gain.segment):<20}{gain.metric:<14}{stats.n:>6}"
            f"{number(stats.control_mean, 4):>9}{number(stats.candidate_mean, 4):>9}  "
            f"{number(stats.delta, 4, signed=True)}{interval}"
        )
    return "\n".join(lines)


# a day's (stage means, reranker gains) as stored (`ab.stages` columns, with partition_date)
StageRows = tuple[pd.DataFrame, pd.DataFrame]
NO_RERANKER = "no reranker stage: the day holds no RERANKER span"


def overall_gains(gains: pd.DataFrame, metrics: Sequence[str]) -> dict[str, float]:
    """The reranker's overall gain of each of `metrics` that has one."""
    found: dict[str, float] = {}
    for row in gains.to_dict(orient="records") if len(gains) else []:
        value = finite(row["gain"], numbers_only=True)
        if row["segment"] == OVERALL_SEGMENT and row["metric"] in metrics and value is not None:
            found[str(row["metric"])] = value
    return found


def stage_day_summary(means: pd.DataFrame, gains: pd.DataFrame, metrics: Sequence[str]) -> str:
    """One line: the reranker's overall gain of `metrics`, or that there is no reranker stage."""
    if means.empty:
        return NO_RERANKER
    shown = overall_gains(gains, metrics)
    words = ", ".join(
        f"{metric} {number(value, 4, signed=True)}" for metric, value in shown.items()
    )
    pairs = int(gains["pairs"].max()) if len(gains) else 0
    return f"reranker gain over its input, overall: {words or MISSING} ({pairs} paired spans)"


def stage_day_metadata(
    means: pd.DataFrame, gains: pd.DataFrame, metrics: Sequence[str]
) -> dict[str, object]:
    """A day's stage metadata the UI plots: per headline metric the overall gain and each
    stage's overall mean per variant (left out where missing, rather than plotted as 0), the
    summary and a table of the gains."""
    metadata: dict[str, object] = {
        "summary": stage_day_summary(means, gains, metrics),
        "reranker_stage": not means.empty,
    }
    if means.empty:
        return metadata
    for metric, gain in overall_gains(gains, metrics).items():
        metadata[f"{metric} reranker gain"] = gain
    overall = means[(means["segment"] == OVERALL_SEGMENT) & means["metric"].isin(metrics)]
    for row in overall.to_dict(orient="records"):
        value = finite(row["mean"], numbers_only=True)
        if value is not None:
            metadata[f"{row['metric']} ({row['stage']}, {row['variant']})"] = value
    metadata["reranker_gains"] = gains_markdown(gains)
    return metadata


def gains_markdown(gains: pd.DataFrame) -> str:
    """The gains as a Markdown table: segment, metric, pairs, input, output, gain, interval."""
    rows = [
        [
            segment_label(str(row["segment"])),
            row["metric"],
            int(row["pairs"]),
            number(row["input_mean"], 4),
            number(row["output_mean"], 4),
            number(row["gain"], 4, signed=True),
            f"{number(row['ci_low'], 4, signed=True)}..{number(row['ci_high'], 4, signed=True)}",
        ]
        for row in (gains.to_dict(orient="records") if len(gains) else [])
    ]
    header = ["segment", "metric", "pairs", "input", "output", "gain", "95% CI"]
    return markdown_table(header, rows)


def stages_markdown(means: pd.DataFrame, gains: pd.DataFrame) -> list[str]:
    """The regression report's section on the reranker: its gain per segment, or that the day
    has no reranker stage (never a gain of 0)."""
    parts = ["## Reranker stage"]
    if means.empty:
        return [*parts, "No reranker stage: the day holds no RERANKER span."]
    parts.append(
        "The reranker's output against its input, each scored against the retriever's labels; "
        "gain = output - input, paired per reranker span, with its 95% interval."
    )
    parts.append(gains_markdown(gains))
    return parts


def stages_dict(means: pd.DataFrame, gains: pd.DataFrame) -> dict[str, object]:
    """The report's stages as data: whether the day had a reranker stage, its overall stage
    means and its gains (missing values as null)."""

    def records(frame: pd.DataFrame) -> list[dict[str, object]]:
        kept = frame.drop(columns=["partition_date"], errors="ignore")
        return [
            {k: finite(v) if isinstance(v, float) else v for k, v in row.items()}
            for row in kept.to_dict(orient="records")
        ]

    return {
        "reranker_stage": not means.empty,
        "summary": stage_day_summary(means, gains, sorted(set(gains.get("metric", [])))),
        "means": records(means),
        "gains": records(gains),
    }
