"""Phoenix document annotations as relevance labels (issue 35, item 1; docs/phoenix.md).

A document annotation named `relevance` (configurable) on a RETRIEVER span grades the document
at its `document_position`: `result.score` when present (a graded label), else the label text
(`relevant` 1; `unrelated`, `irrelevant`, `not relevant` 0); anything else is quarantined with
its reason. On one document HUMAN wins over LLM, LLM over CODE; only the kinds configured
(`[phoenix] label_kinds`, HUMAN and LLM by default) count. Each chosen grade keeps its source
(`phoenix:human`, `phoenix:llm`, `phoenix:code`). Where HUMAN and LLM both graded a document, the
pair is kept for the agreement report (labels/agreement.py).

This module only decides; reading the annotations from the server is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KIND_ORDER = ("HUMAN", "LLM", "CODE")  # earlier wins on one document
LABEL_GRADES = {"relevant": 1.0, "unrelated": 0.0, "irrelevant": 0.0, "not relevant": 0.0}


@dataclass(frozen=True)
class DocumentLabel:
    span_id: str
    position: int
    grade: float
    source: str  # phoenix:human, phoenix:llm, phoenix:code


@dataclass
class PhoenixLabels:
    """The labels chosen, the annotations refused (with reasons), the HUMAN/LLM pairs."""

    labels: list[DocumentLabel] = field(default_factory=list)
    quarantined: list[tuple[str, int | None, str]] = field(default_factory=list)
    overlaps: list[tuple[float, float]] = field(default_factory=list)  # (human, llm)
    skipped: int = 0  # another name, or a kind that does not count


def grade_of(score: object, label: object) -> tuple[float | None, str | None]:
    """The grade an annotation's result gives, or None and why it gives none."""
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float):
            return None, f"score {score!r} is not a number"
        if not math.isfinite(score):
            return None, f"score {score!r} is not finite"
        return float(score), None
    if isinstance(label, str) and label.strip().lower() in LABEL_GRADES:
        return LABEL_GRADES[label.strip().lower()], None
    return None, (
        f"label {label!r} is none of {sorted(LABEL_GRADES)} and there is no score: "
        "give the annotation a score, or one of those labels"
    )


def choose_labels(
    annotations: Iterable[Mapping[str, Any]],
    *,
    name: str = "relevance",
    kinds: tuple[str, ...] = ("HUMAN", "LLM"),
) -> PhoenixLabels:
    """Annotations as dicts with span_id, name, annotator_kind, document_position, score, label."""
    out = PhoenixLabels()
    graded: dict[tuple[str, int], dict[str, float]] = {}
    for annotation in annotations:
        kind = str(annotation.get("annotator_kind", "")).upper()
        if annotation.get("name") != name or kind not in kinds:
            out.skipped += 1
            continue
        span_id = str(annotation["span_id"])
        position = annotation.get("document_position")
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            out.quarantined.append(
                (span_id, None, f"document_position {position!r} is not a position >= 0")
            )
            continue
        grade, reason = grade_of(annotation.get("score"), annotation.get("label"))
        if grade is None:
            out.quarantined.append((span_id, position, f"{kind} {name}: {reason}"))
            continue
        graded.setdefault((span_id, position), {})[kind] = grade
    for (span_id, position), by_kind in sorted(graded.items()):
        winner = next(k for k in KIND_ORDER if k in by_kind)
        out.labels.append(
            DocumentLabel(span_id, position, by_kind[winner], f"phoenix:{winner.lower()}")
        )
        if "HUMAN" in by_kind and "LLM" in by_kind:
            out.overlaps.append((by_kind["HUMAN"], by_kind["LLM"]))
    return out
