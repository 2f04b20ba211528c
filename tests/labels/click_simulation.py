"""Simulated click logs with known examination propensities and known relevance (seeded).

Each query has ten documents of known click-once-examined probability g. Production ranks them
by g plus noise (so its order is partly wrong); variant v0 shows that order, variants v1..v3 each
move every document by up to two places (the same shuffle on every page of the variant). A page
shown at rank k is clicked with probability top * PROPENSITIES[k - 1] * g: the position-based
model, with rank 1 examined with probability `top`, so only the relative propensities can be
recovered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

# the examination propensities relative to rank 1 that the estimates must recover
PROPENSITIES = (1.0, 0.62, 0.45, 0.34, 0.27, 0.22, 0.18, 0.15, 0.13, 0.11)
LEVELS = (0.03, 0.12, 0.3, 0.55, 0.85)
START = datetime(2026, 11, 30, tzinfo=UTC)


@dataclass(frozen=True)
class ClickLog:
    records: list[dict[str, object]]  # impression records, as the files hold them
    relevance: dict[tuple[str, str], float]  # (query_id, doc_id) -> g


def simulate(
    seed: int, n_queries: int = 80, pages_per_variant: int = 100, top: float = 0.9
) -> ClickLog:
    rng = np.random.default_rng(seed)
    n_docs = len(PROPENSITIES)
    examined = top * np.asarray(PROPENSITIES)
    records: list[dict[str, object]] = []
    relevance: dict[tuple[str, str], float] = {}
    for q in range(n_queries):
        query = f"q{q}"
        g = rng.choice(LEVELS, size=n_docs)
        docs = [f"{query}-d{j}" for j in range(n_docs)]
        relevance.update({(query, doc): float(g[j]) for j, doc in enumerate(docs)})
        production = np.argsort(-(g + rng.normal(0, 0.4, n_docs)))
        for v in range(4):
            moved = np.arange(n_docs) + (rng.uniform(-2.2, 2.2, n_docs) if v else 0)
            ranking = production[np.argsort(moved)]
            clicked = rng.random((pages_per_variant, n_docs)) < examined * g[ranking]
            for i in range(pages_per_variant):
                records.append(
                    {
                        "impression_id": f"{query}-v{v}-{i}",
                        "query_id": query,
                        "timestamp": (START + timedelta(minutes=i)).isoformat(),
                        "variant": f"v{v}",
                        "shown_ids": [docs[r] for r in ranking],
                        "clicked_ids": [docs[ranking[k]] for k in np.flatnonzero(clicked[i])],
                    }
                )
    return ClickLog(records, relevance)
