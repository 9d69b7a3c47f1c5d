"""The host sampler: filters, penalties, seeded draws, and the speculative acceptance rule."""

from __future__ import annotations

import numpy as np
import pytest

from engine.backend import GREEDY, SamplingParams
from engine.sampling import apply_penalties, candidates, sample, verify, verify_row


def test_greedy_is_argmax_after_penalties() -> None:
    logits = np.array([1.0, 3.0, 2.0, 0.5], dtype=np.float32)
    assert sample(logits, GREEDY, 5) == 1
    params = SamplingParams(temperature=0.0, repetition_penalty=2.0)
    # token 1 repeated: 3.0 / 2 = 1.5 < 2.0, so token 2 wins
    assert sample(logits, params, 5, context=[1]) == 2


def test_penalties_follow_llama_cpp_rules() -> None:
    logits = np.array([2.0, -2.0, 1.0], dtype=np.float32)
    params = SamplingParams(
        repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25, penalty_last_n=3
    )
    out = apply_penalties(logits, [9, 0, 1, 1], params)  # window = [0, 1, 1]
    assert out[0] == pytest.approx(2.0 / 2 - 0.5 - 0.25)
    assert out[1] == pytest.approx(-2.0 * 2 - 1.0 - 0.25)
    assert out[2] == pytest.approx(1.0)
    assert logits[0] == 2.0  # input untouched


def test_filters_keep_the_expected_candidates() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    top_k = candidates(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert list(top_k.ids) == [0, 1]
    assert top_k.probs == pytest.approx([0.625, 0.375])
    top_p = candidates(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.85, min_p=0.0))
    assert list(top_p.ids) == [0, 1, 2]
    min_p = candidates(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.5))
    assert list(min_p.ids) == [0, 1]
    hot = candidates(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0))
    assert hot.probs[3] > 0.05  # a higher temperature flattens


def test_seeded_draws_repeat_and_depend_on_position() -> None:
    logits = np.zeros(50, dtype=np.float32)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    first = [sample(logits, params, p) for p in range(20)]
    assert first == [sample(logits, params, p) for p in range(20)]
    assert len(set(first)) > 5
    other = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=8)
    assert first != [sample(logits, other, p) for p in range(20)]


def test_greedy_verification_keeps_matching_drafts_only() -> None:
    rows = np.zeros((4, 6), dtype=np.float32)
    for row, best in enumerate([3, 4, 1, 2]):
        rows[row, best] = 5.0
    accepted, kept = verify(rows, (9, 3, 4, 0), 10, GREEDY)
    assert (accepted, kept) == ([3, 4, 1], 2)
    accepted, kept = verify(rows, (9, 3, 4, 1), 10, GREEDY)
    assert (accepted, kept) == ([3, 4, 1, 2], 3)


@pytest.mark.parametrize("draft", [0, 2, 5])
def test_speculative_acceptance_preserves_the_distribution(draft: int) -> None:
    """Whatever the (deterministic) draft, the token at a position is distributed as p."""
    p = np.array([0.4, 0.25, 0.2, 0.1, 0.05, 0.0])
    logits = np.log(np.maximum(p, 1e-30))
    n = 6000
    counts = np.zeros(6)
    for seed in range(n):
        params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
        token, _ = verify_row(logits, draft, params, 3, ())
        counts[token] += 1
    expected = p * n
    mask = expected > 0
    chi2 = float((((counts - expected) ** 2)[mask] / expected[mask]).sum())
    assert counts[5] == 0
    assert chi2 < 20.5  # 4 degrees of freedom, p ≈ 0.0004


def test_sampling_params_report_their_problems() -> None:
    bad = SamplingParams(temperature=-1, top_p=0.0, min_p=2.0, repetition_penalty=0.0)
    problems = " ".join(bad.problems())
    for name in ("temperature", "top_p", "min_p", "repetition_penalty"):
        assert name in problems
    assert SamplingParams().problems() == []
