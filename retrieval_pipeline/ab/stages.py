"""The reranker's gain over its input: each reranker span's output ranking against the ranking it
was given, scored against the same labels, paired per span, per segment and overall.

A regression in the final ranking can come from first-stage retrieval (what the reranker is
given got worse) or from reranking (what it makes of it got worse); the stage means and this
paired gain tell the two apart (docs/spans.md). The records of the two stages come from one
reranker span each (`ingest.spans`): the input's trace_id is the output's with a suffix after it
(`ingest.spans.INPUT_SUFFIX`, handed in: this room sits below `ingest`). Pure: pandas and
numpy, the statistics of `ab.stats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from retrieval_pipeline.ab.stats import PairedStats, paired_statistics
from retrieval_pipeline.segments import OVERALL_SEGMENT


@dataclass(frozen=True)
class StageGain:
    """One segment and metric: the paired reranker spans (both stages annotated), the mean of
    the input and of the output over them, and the gain output - input with its interval."""

    segment: str
    metric: str
    stats: PairedStats


def reranker_records(
    given: pd.DataFrame, reranked: pd.DataFrame, input_suffix: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The records of reranker spans alone in the two stages' per-trace tables: a stage run
    also scores the plain trace records among the files (they have no stage), which are
    first-stage records. An input record's trace_id ends in `input_suffix`; an output record's
    is its span's."""
    inputs = given[given["trace_id"].str.endswith(input_suffix)]
    spans = set(inputs["trace_id"].str.removesuffix(input_suffix))
    return inputs, reranked[reranked["trace_id"].isin(spans)]


def stage_gains(
    given: pd.DataFrame,
    reranked: pd.DataFrame,
    metrics: Sequence[str],
    input_suffix: str,
    n_resamples: int = 9999,
    seed: int = 0,
) -> list[StageGain]:
    """The gain per segment (then `OVERALL_SEGMENT`) and metric, from the per-trace tables of the
    `reranker_input` and `reranker` stages (`trace_id`, `segment`, one column per metric, null
    when unannotated). A span whose metric is null in either stage is left out of that cell."""
    keys = given.assign(span=given["trace_id"].str.removesuffix(input_suffix))
    pairs = keys.merge(
        reranked.assign(span=reranked["trace_id"]),
        on="span",
        suffixes=("_input", "_output"),
        validate="one_to_one",
    )
    # in one order whatever order the rows came in (DuckDB's parallel scans keep none): the
    # bootstrap interval of the same pairs must not change between runs or doors
    pairs = pairs.rename(columns={"segment_output": "segment"}).sort_values("span", kind="stable")
    segments = [*sorted(pairs["segment"].unique()), OVERALL_SEGMENT]
    gains: list[StageGain] = []
    for segment in segments:
        rows = pairs if segment == OVERALL_SEGMENT else pairs[pairs["segment"] == segment]
        for metric in metrics:
            both = rows[[f"{metric}_input", f"{metric}_output"]].dropna()
            stats = paired_statistics(
                both[f"{metric}_input"].to_numpy(float),
                both[f"{metric}_output"].to_numpy(float),
                n_resamples=n_resamples,
                seed=seed,
            )
            gains.append(StageGain(segment, metric, stats))
    return gains


STAGE_METRIC_COLUMNS = [
    "stage",
    "segment",
    "variant",
    "metric",
    "traces",
    "annotated_traces",
    "mean",
]
GAIN_COLUMNS = [
    "segment",
    "metric",
    "pairs",
    "input_mean",
    "output_mean",
    "gain",
    "ci_low",
    "ci_high",
    "ci_method",
]


def stage_means(stage: str, per_query: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """One stage's per-trace table as rows per segment and variant, then per variant over every
    segment (`OVERALL_SEGMENT`), and metric: records, annotated records and the mean over the
    annotated ones (null when none is)."""
    rows: list[dict[str, object]] = []
    for variant in sorted(per_query["variant"].dropna().unique()):
        of_variant = per_query[per_query["variant"] == variant]
        segments = [*sorted(of_variant["segment"].unique()), OVERALL_SEGMENT]
        for segment in segments:
            cell = (
                of_variant
                if segment == OVERALL_SEGMENT
                else of_variant[of_variant["segment"] == segment]
            )
            for metric in metrics:
                scored = cell[metric].dropna()
                rows.append(
                    {
                        "stage": stage,
                        "segment": segment,
                        "variant": variant,
                        "metric": metric,
                        "traces": len(cell),
                        "annotated_traces": len(scored),
                        "mean": float(scored.mean()) if len(scored) else None,
                    }
                )
    return pd.DataFrame(rows, columns=STAGE_METRIC_COLUMNS)


def gains_frame(gains: Sequence[StageGain]) -> pd.DataFrame:
    """The gains as rows (segment, metric, pairs, input and output means, gain, interval)."""
    rows = [
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
    ]
    return pd.DataFrame(rows, columns=GAIN_COLUMNS)


STAGE_QUERY_COLUMNS = [
    "span_id",
    "query_id",
    "segment",
    "variant",
    "metric",
    "input_value",
    "output_value",
]


def stage_query_rows(
    given: pd.DataFrame, reranked: pd.DataFrame, metrics: Sequence[str], input_suffix: str
) -> pd.DataFrame:
    """Per reranker span and metric, the input's and the output's value (null when that stage's
    record is unannotated), with the span's query, segment and variant: what the stage Why
    splits per query (`stage_query_metrics`, docs/why.md)."""
    keys = given.assign(span_id=given["trace_id"].str.removesuffix(input_suffix))
    pairs = keys.merge(
        reranked.assign(span_id=reranked["trace_id"]),
        on="span_id",
        suffixes=("_input", "_output"),
        validate="one_to_one",
    )
    frames = [
        pd.DataFrame(
            {
                "span_id": pairs["span_id"],
                "query_id": pairs["query_id_output"],
                "segment": pairs["segment_output"],
                "variant": pairs["variant_output"],
                "metric": metric,
                "input_value": pairs[f"{metric}_input"].astype("float64"),
                "output_value": pairs[f"{metric}_output"].astype("float64"),
            }
        )
        for metric in metrics
    ]
    if not frames or pairs.empty:
        return pd.DataFrame(columns=STAGE_QUERY_COLUMNS)
    return pd.concat(frames, ignore_index=True)[STAGE_QUERY_COLUMNS]
