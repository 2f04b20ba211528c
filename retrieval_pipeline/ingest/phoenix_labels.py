"""Phoenix document annotations as relevance labels (issue 35, item 1; docs/phoenix.md).

A document annotation named `relevance` (configurable: one name or several) on a RETRIEVER span
grades the document at its `document_position`: `result.score` when present (a graded label, 0
to 100 as a record's grades), else the label text (`relevant` 1; `unrelated`, `irrelevant`,
`not relevant` 0); anything else is quarantined with its reason. On one document HUMAN wins over
LLM, LLM over CODE, and within one kind the earlier name; only the kinds configured
(`[phoenix] label_kinds`, HUMAN and LLM by default) count. Each chosen grade keeps its source
(`phoenix:human`, `phoenix:llm`, `phoenix:code`). Where HUMAN and LLM both graded a document, the
pair is kept for the agreement report (labels/agreement.py); `LabelTally` counts what a day's
annotations gave.

This module only decides; reading the annotations from the server is the caller's.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrieval_pipeline.records import MAX_GRADE

KIND_ORDER = ("HUMAN", "LLM", "CODE")  # earlier wins on one document
LABEL_GRADES = {"relevant": 1.0, "unrelated": 0.0, "irrelevant": 0.0, "not relevant": 0.0}
FIRST_REASONS = 5  # the reasons of refused annotations a tally keeps, for the metadata


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
        if not 0 <= score <= MAX_GRADE:  # a record's grade range: one bad label, not its span
            return None, f"score {score!r} is not a grade from 0 to {MAX_GRADE}"
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
    name: str | Sequence[str] = "relevance",
    kinds: tuple[str, ...] = ("HUMAN", "LLM"),
) -> PhoenixLabels:
    """Annotations as dicts with span_id, name, annotator_kind, document_position, score, label.
    `name` may be several names: on one document the kind decides, then the earlier name."""
    out = PhoenixLabels()
    names = (name,) if isinstance(name, str) else tuple(name)
    graded: dict[tuple[str, int], dict[str, tuple[int, float]]] = {}
    for annotation in annotations:
        kind = str(annotation.get("annotator_kind", "")).upper()
        if annotation.get("name") not in names or kind not in kinds:
            out.skipped += 1
            continue
        rank = names.index(str(annotation["name"]))
        span_id = str(annotation["span_id"])
        position = annotation.get("document_position")
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            out.quarantined.append(
                (span_id, None, f"document_position {position!r} is not a position >= 0")
            )
            continue
        grade, reason = grade_of(annotation.get("score"), annotation.get("label"))
        if grade is None:
            out.quarantined.append((span_id, position, f"{kind} {annotation['name']}: {reason}"))
            continue
        held = graded.setdefault((span_id, position), {})
        if kind not in held or rank < held[kind][0]:
            held[kind] = (rank, grade)
    for (span_id, position), by_kind in sorted(graded.items()):
        winner = next(k for k in KIND_ORDER if k in by_kind)
        out.labels.append(
            DocumentLabel(span_id, position, by_kind[winner][1], f"phoenix:{winner.lower()}")
        )
        if "HUMAN" in by_kind and "LLM" in by_kind:
            out.overlaps.append((by_kind["HUMAN"][1], by_kind["LLM"][1]))
    return out


@dataclass
class LabelTally:
    """What a day's Phoenix document annotations gave: labels used per source, spans labelled
    by them, spans whose own (metadata) labels won, annotations refused with their reasons or
    skipped, and the (segment, HUMAN grade, LLM grade) pairs of documents both graded."""

    labels: Counter[str] = field(default_factory=Counter)
    spans_labelled: int = 0
    spans_with_own_labels: int = 0
    quarantined: int = 0
    reasons: list[str] = field(default_factory=list)  # the first few, for the metadata
    skipped: int = 0
    pairs: Counter[tuple[str, float, float]] = field(default_factory=Counter)

    def refuse(self, span_id: str, position: int | None, reason: str) -> None:
        self.quarantined += 1
        if len(self.reasons) < FIRST_REASONS:
            self.reasons.append(f"span {span_id} document {position}: {reason}")

    def add(self, other: LabelTally) -> None:
        """Count `other`'s too (the days of a range), keeping the first few reasons."""
        self.labels.update(other.labels)
        self.spans_labelled += other.spans_labelled
        self.spans_with_own_labels += other.spans_with_own_labels
        self.quarantined += other.quarantined
        self.reasons += other.reasons[: max(0, FIRST_REASONS - len(self.reasons))]
        self.skipped += other.skipped
        self.pairs.update(other.pairs)

    def summary(self) -> str:
        """One line: `12 labels from Phoenix (phoenix:human 9, phoenix:llm 3) on 4 spans; ...`."""
        used = sum(self.labels.values())
        shares = ", ".join(f"{source} {n}" for source, n in sorted(self.labels.items()))
        words = f"{used} labels from Phoenix ({shares or 'none'}) on {self.spans_labelled} spans"
        if self.spans_with_own_labels:
            words += f"; {self.spans_with_own_labels} annotated spans kept their own labels"
        if self.quarantined:
            words += f"; {self.quarantined} annotations refused, first: {self.reasons[0]}"
        return words
