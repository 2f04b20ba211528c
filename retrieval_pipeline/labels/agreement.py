"""Agreement between two raters of the same documents: Cohen's kappa, plain and weighted.

Where one document has both a HUMAN and an LLM relevance label (Phoenix document annotations,
docs/phoenix.md), the nightly reports how far the model judge agrees with people: Cohen's kappa
on the binarised labels (relevant: grade >= the relevance level) and quadratic-weighted kappa on
the grades, with the number of pairs behind each. Pure arithmetic, no DuckDB, no Dagster.

Kappa is 1 - observed disagreement / disagreement expected by chance (from the two raters'
marginals). Weighted kappa weighs a disagreement between categories i and j (their positions in
the sorted grades either rater gave) by ((i - j) / (k - 1))^2, as
sklearn.metrics.cohen_kappa_score(weights="quadratic") does. When chance disagreement is zero
(both raters gave one and the same category throughout) kappa is undefined: None.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from retrieval_pipeline.segments import OVERALL_SEGMENT


@dataclass(frozen=True)
class Agreement:
    """Two raters on `pairs` documents: kappa on relevant/not, weighted kappa on grades."""

    pairs: int
    agreed: int  # pairs with the same binarised label
    kappa: float | None
    weighted_kappa: float | None

    def describe(self) -> str:
        """One line for the report: `kappa 0.615 (binary), 0.702 (graded, quadratic), 20 pairs`."""
        return (
            f"kappa {_number(self.kappa)} (binary), {_number(self.weighted_kappa)} "
            f"(graded, quadratic), {self.agreed}/{self.pairs} pairs agree on relevant"
        )


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def kappa(
    first: Sequence[float], second: Sequence[float], *, quadratic: bool = False
) -> float | None:
    """Cohen's kappa of two equally long rating lists; quadratic weights when `quadratic`."""
    if len(first) != len(second):
        raise ValueError(f"two raters must rate the same items: {len(first)} != {len(second)}")
    n = len(first)
    if n == 0:
        return None
    categories = sorted(set(first) | set(second))
    index = {c: i for i, c in enumerate(categories)}
    k = len(categories)

    def weight(i: int, j: int) -> float:
        if not quadratic:
            return 0.0 if i == j else 1.0
        return ((i - j) / (k - 1)) ** 2 if k > 1 else 0.0

    observed = Counter((index[a], index[b]) for a, b in zip(first, second, strict=True))
    rows = Counter(index[a] for a in first)
    cols = Counter(index[b] for b in second)
    disagreement = sum(weight(i, j) * count for (i, j), count in observed.items()) / n
    expected = sum(weight(i, j) * rows[i] * cols[j] for i in rows for j in cols) / (n * n)
    if expected == 0:
        return None
    return 1.0 - disagreement / expected


def agreement(pairs: Sequence[tuple[float, float]], relevance_level: float = 1.0) -> Agreement:
    """The agreement of (human grade, model grade) pairs of the same documents."""
    human = [float(h) for h, _ in pairs]
    model = [float(m) for _, m in pairs]
    human_bin = [float(g >= relevance_level) for g in human]
    model_bin = [float(g >= relevance_level) for g in model]
    return Agreement(
        pairs=len(pairs),
        agreed=sum(a == b for a, b in zip(human_bin, model_bin, strict=True)),
        kappa=kappa(human_bin, model_bin),
        weighted_kappa=kappa(human, model, quadratic=True),
    )


def agreement_by_segment(
    rows: Iterable[tuple[str, float, float, int]], relevance_level: float = 1.0
) -> dict[str, Agreement]:
    """The agreement per segment, and over every segment (`__all__`), of (segment, human grade,
    model grade, documents) rows: each row stands for `documents` pairs."""
    pairs: dict[str, list[tuple[float, float]]] = {}
    for segment, human, model, documents in rows:
        for name in (OVERALL_SEGMENT, segment):
            pairs.setdefault(name, []).extend([(human, model)] * int(documents))
    return {name: agreement(held, relevance_level) for name, held in sorted(pairs.items())}
