"""Cohen's kappa against a table computed by hand (sklearn is not in the venv)."""

from __future__ import annotations

import pytest

from retrieval_pipeline.labels.agreement import agreement, agreement_by_segment, kappa


def test_kappa_on_a_hand_computed_table() -> None:
    # 10 documents; human (rows) vs model (columns):
    #            model 1  model 0
    # human 1       4        1      -> 5
    # human 0       2        3      -> 5
    #               6        4
    # observed agreement po = (4 + 3) / 10 = 0.7
    # chance agreement   pe = (5*6 + 5*4) / 100 = 0.5
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    human = [1] * 5 + [0] * 5
    model = [1, 1, 1, 1, 0, 1, 1, 0, 0, 0]
    assert kappa(human, model) == pytest.approx(0.4)


def test_weighted_kappa_on_a_hand_computed_table() -> None:
    # grades 0, 1, 2 (k = 3): weights ((i - j) / 2)^2 -> 0 on the diagonal, 1/4 one apart, 1 two.
    # pairs (human, model): (0,0) (1,1) (2,2) (2,1) (0,1) (2,0)   n = 6
    # observed weighted disagreement = (0 + 0 + 0 + 1/4 + 1/4 + 1) / 6 = 1.5 / 6 = 0.25
    # human marginals: 0:2 1:1 2:3   model marginals: 0:2 1:3 2:1
    # expected = sum_ij w_ij * h_i * m_j / 36
    #   i=0: w01*2*3 + w02*2*1 = 1.5 + 2    = 3.5
    #   i=1: w10*1*2 + w12*1*1 = 0.5 + 0.25 = 0.75
    #   i=2: w20*3*2 + w21*3*3 = 6 + 2.25   = 8.25
    #   -> 12.5 / 36
    # weighted kappa = 1 - 0.25 / (12.5 / 36) = 1 - 9 / 12.5 = 0.28
    pairs = [(0, 0), (1, 1), (2, 2), (2, 1), (0, 1), (2, 0)]
    result = agreement(pairs, relevance_level=1)
    assert result.weighted_kappa == pytest.approx(0.28)
    # binarised (>= 1): (0,0) (1,1) (1,1) (1,1) (0,1) (1,0): agree 4 of 6
    # rows 1:4 0:2, cols 1:4 0:2 -> pe = (16 + 4) / 36 = 5/9; po = 4/6
    # kappa = (2/3 - 5/9) / (1 - 5/9) = (1/9) / (4/9) = 0.25
    assert result.kappa == pytest.approx(0.25)
    assert (result.pairs, result.agreed) == (6, 4)


def test_kappa_is_undefined_when_both_raters_give_one_category() -> None:
    result = agreement([(1, 1), (1, 1)])
    assert result.kappa is None and result.weighted_kappa is None
    assert "undefined" in result.describe()
    assert kappa([], []) is None


def test_raters_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="same items"):
        kappa([1, 0], [1])


def test_agreement_per_segment_and_overall_from_counted_pairs() -> None:
    # faq: (1, 1) twice and (0, 1) twice; web: (0, 0) once
    rows = [("faq", 1.0, 1.0, 2), ("faq", 0.0, 1.0, 2), ("web", 0.0, 0.0, 1)]
    by_segment = agreement_by_segment(rows)
    assert list(by_segment) == ["__all__", "faq", "web"]
    # faq: the model says 1 throughout: pe = (2/4)(4/4) + (2/4)(0/4) = 1/2, po = 1/2 -> 0
    assert by_segment["faq"].kappa == pytest.approx(0.0)
    assert (by_segment["faq"].pairs, by_segment["faq"].agreed) == (4, 2)
    assert by_segment["web"].kappa is None  # one category throughout
    # all 5: po = 3/5; human 1:2 0:3, model 1:4 0:1 -> pe = (2*4 + 3*1) / 25 = 11/25
    assert by_segment["__all__"].kappa == pytest.approx((3 / 5 - 11 / 25) / (1 - 11 / 25))
