"""Host-side token sampling and speculative verification (the reference backend's sampler).

The chain follows llama.cpp's default order: penalties (repetition, frequency, presence over the
last `penalty_last_n` context tokens) → top_k → top_p → min_p → temperature → draw. Greedy
(temperature <= 0) is the argmax after penalties.

Draws are counter-based: the uniform numbers for the token at position p come from
`(seed, p, stream)` alone, so a request's tokens do not depend on batching or chunking.

Speculative verification of a deterministic draft d against the target distribution p is the
standard rule for a point-mass proposal: accept with probability p(d); on rejection draw from p
with d removed (renormalized). The token at each position is then distributed exactly as p, and
greedy verification reduces to "accept while the argmax equals the draft".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.backend import SamplingParams

_DRAW, _ACCEPT = 0, 1  # independent random streams per position
_SEED_MASK = (1 << 63) - 1


def uniform(seed: int, position: int, stream: int = _DRAW) -> float:
    """A uniform number in [0, 1) fixed by (seed, position, stream)."""
    return float(np.random.default_rng([seed & _SEED_MASK, position, stream]).random())


def apply_penalties(
    logits: np.ndarray, context: Sequence[int], params: SamplingParams
) -> np.ndarray:
    """Return penalized logits (a copy) for the last penalty_last_n context tokens."""
    if not params.has_penalties or not context:
        return logits
    window = np.asarray(context[-params.penalty_last_n :], dtype=np.int64)
    ids, counts = np.unique(window, return_counts=True)
    out = logits.astype(np.float32, copy=True)
    values: np.ndarray = out[ids]
    if params.repetition_penalty != 1.0:
        values = np.where(
            values > 0, values / params.repetition_penalty, values * params.repetition_penalty
        )
    values = values - counts * params.frequency_penalty - params.presence_penalty
    out[ids] = values
    return out


@dataclass(frozen=True)
class Candidates:
    """The tokens left after the filters, most likely first, with their final probabilities."""

    ids: np.ndarray  # int64 [n]
    probs: np.ndarray  # float64 [n], sums to 1

    def prob_of(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max())
    return shifted / shifted.sum()


def candidates(logits: np.ndarray, params: SamplingParams) -> Candidates:
    """Filter and temper already-penalized logits into the distribution to draw from."""
    values = np.asarray(logits, dtype=np.float64)
    if params.greedy:
        return Candidates(np.array([int(np.argmax(values))]), np.array([1.0]))
    k = params.top_k if 0 < params.top_k < values.shape[0] else values.shape[0]
    if k < values.shape[0]:
        ids = np.argpartition(-values, k - 1)[:k]
        ids = ids[np.argsort(-values[ids], kind="stable")]
    else:
        ids = np.argsort(-values, kind="stable")
    kept = values[ids]
    if params.top_p < 1.0:
        cumulative = np.cumsum(_softmax(kept))
        keep = int(np.searchsorted(cumulative, params.top_p)) + 1
        ids, kept = ids[:keep], kept[:keep]
    if params.min_p > 0.0:
        probs = _softmax(kept)
        keep = max(1, int(np.count_nonzero(probs >= params.min_p * probs[0])))
        ids, kept = ids[:keep], kept[:keep]
    return Candidates(ids, _softmax(kept / params.temperature))


def _draw(cands: Candidates, u: float) -> int:
    index = int(np.searchsorted(np.cumsum(cands.probs), u * cands.probs.sum(), side="right"))
    return int(cands.ids[min(index, cands.ids.shape[0] - 1)])


def sample(
    logits: np.ndarray, params: SamplingParams, position: int, context: Sequence[int] = ()
) -> int:
    """The token at `position` given the logits of the row before it."""
    cands = candidates(apply_penalties(logits, context, params), params)
    if params.greedy:
        return int(cands.ids[0])
    return _draw(cands, uniform(params.seed, position, _DRAW))


def verify_row(
    logits: np.ndarray, draft: int, params: SamplingParams, position: int, context: Sequence[int]
) -> tuple[int, bool]:
    """Check one draft token; returns (token for this position, whether the draft was kept)."""
    cands = candidates(apply_penalties(logits, context, params), params)
    if params.greedy:
        token = int(cands.ids[0])
        return token, token == draft
    if uniform(params.seed, position, _ACCEPT) < cands.prob_of(draft):
        return draft, True
    residual = np.where(cands.ids == draft, 0.0, cands.probs)
    if residual.sum() <= 0.0:  # only the draft had mass; it cannot be rejected
        return draft, True
    return _draw(
        Candidates(cands.ids, residual / residual.sum()), uniform(params.seed, position)
    ), False


def verify(
    logits: np.ndarray,
    tokens: Sequence[int],
    start_pos: int,
    params: SamplingParams,
    penalty_context: Sequence[int] = (),
) -> tuple[list[int], int]:
    """Verify a decode group (y, d1..dn) from its logits rows [n+1, V].

    Returns (accepted tokens: the kept drafts then one sampled token, number of drafts kept).
    Row i predicts position start_pos + i + 1; its penalty context ends with tokens[i].
    """
    context = [*penalty_context, tokens[0]]
    accepted: list[int] = []
    for i, draft in enumerate(tokens[1:]):
        token, kept = verify_row(logits[i], draft, params, start_pos + i + 1, context)
        accepted.append(token)
        if not kept:
            return accepted, i
        context.append(token)
    last = len(tokens) - 1
    accepted.append(sample(logits[last], params, start_pos + last + 1, context))
    return accepted, last
