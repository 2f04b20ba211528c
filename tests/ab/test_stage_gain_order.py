"""A reranker's gain does not depend on the order its rows arrive in: DuckDB's parallel scans keep
none, and the bootstrap interval of the same pairs must not change between runs or doors (the
nightly and `evaluate --stages` once disagreed in the 3rd digit of `ci_high` under load)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from retrieval_pipeline.ab.stages import stage_gains
from retrieval_pipeline.segments import OVERALL_SEGMENT

SUFFIX = ":input"


def stages(n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    spans = [f"s{i:03d}" for i in range(n)]
    segments = ["faq" if i % 3 else "long_tail" for i in range(n)]
    given = pd.DataFrame(
        {"trace_id": [s + SUFFIX for s in spans], "segment": segments, "mrr": rng.random(n)}
    )
    reranked = pd.DataFrame({"trace_id": spans, "segment": segments, "mrr": rng.random(n)})
    return given, reranked


def test_the_gain_and_its_interval_are_the_same_in_any_row_order() -> None:
    given, reranked = stages(25, seed=3)
    ordered = stage_gains(given, reranked, ["mrr"], SUFFIX, n_resamples=999)
    shuffled = stage_gains(
        given.sample(frac=1, random_state=1),
        reranked.sample(frac=1, random_state=2),
        ["mrr"],
        SUFFIX,
        n_resamples=999,
    )
    assert [g.segment for g in ordered] == ["faq", "long_tail", OVERALL_SEGMENT]
    for a, b in zip(ordered, shuffled, strict=True):
        assert (a.segment, a.metric) == (b.segment, b.metric)
        assert a.stats == b.stats
    # the gain itself, by hand: the mean of output - input over the segment's pairs
    faq = given["segment"] == "faq"
    expected = float(
        (reranked.loc[faq, "mrr"].to_numpy() - given.loc[faq, "mrr"].to_numpy()).mean()
    )
    assert ordered[0].stats.delta is not None
    assert np.isclose(ordered[0].stats.delta, expected, rtol=1e-12)
