"""The stages of a retrieval (first-stage retriever, a reranker's input and its output) side by
side, and the reranker's gain over its input per segment with its interval, in words and as data.
Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from retrieval_pipeline.ab.stages import StageGain
from retrieval_pipeline.segments import segment_label
from retrieval_pipeline.text import number

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
    """Per stage its scored records and metric means; per segment and metric the gain."""
    return {
        "stages": {
            stage: {"records_scored": scored[stage], "means": dict(means[stage])} for stage in means
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
        lines.append(f"  {STAGE_WORDS.get(stage, stage)}: {scored[stage]} records; {shown}")
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
