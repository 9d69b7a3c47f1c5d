"""Speculative decoding and checkpoints on the real reference backend (tiny synthetic model),
driven through the scheduler: forced acceptance gives n_draft + 1 tokens per step and the same
tokens; the sampled output distribution is exactly the model's; an edit to earlier context
restarts from the nearest checkpoint and still gives the fresh result.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from engine.backend import GREEDY, RowKind, SamplingParams, StepPlan, StepResult
from engine.drafting import ScriptedDrafts
from engine.reference_backend import ReferenceBackend
from engine.sampling import candidates
from engine.scheduler import Scheduler, SchedulerConfig
from engine.scheduler_events import Finished, GenerationRequest, RequestEvent, Started, TokensOut
from tests.integration.test_server import tiny_model_path


@pytest.fixture(scope="module")
def backend() -> ReferenceBackend:
    return ReferenceBackend.from_gguf(tiny_model_path(), n_slots=2, kv_tokens=4096)


class Recorder:
    """Wraps a backend to keep every plan it ran."""

    def __init__(self, backend: ReferenceBackend) -> None:
        self.inner = backend
        self.plans: list[StepPlan] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def step(self, plan: StepPlan, **kwargs: Any) -> StepResult:
        self.plans.append(plan)
        return self.inner.step(plan, **kwargs)  # e.g. while_running (overlaps_host_work)


def generate(scheduler: Scheduler, request: GenerationRequest) -> tuple[list[int], Finished, int]:
    events: list[RequestEvent] = []
    scheduler.submit(request, events.append)
    while not any(isinstance(e, Finished) for e in events):
        scheduler.step_once()
    tokens = [t for e in events if isinstance(e, TokensOut) for t in e.tokens]
    started = next(e for e in events if isinstance(e, Started))
    finished = next(e for e in events if isinstance(e, Finished))
    return tokens, finished, started.cached_tokens


PROMPT = [11, 523, 99, 1200, 7, 64, 301, 1999, 42, 8, 777, 5]


def test_forced_acceptance_gives_n_draft_plus_one_tokens_per_step(
    backend: ReferenceBackend,
) -> None:
    plain, _, _ = generate(
        Scheduler(backend, SchedulerConfig(speculation="off")),
        GenerationRequest(PROMPT, GREEDY, 13),
    )
    recorder = Recorder(backend)
    scheduler = Scheduler(recorder, SchedulerConfig(n_draft=3))  # type: ignore[arg-type]
    scripted = ScriptedDrafts([PROMPT + plain], n_draft=3)
    tokens, finished, _ = generate(
        scheduler, GenerationRequest(PROMPT, GREEDY, 13, draft_provider=scripted)
    )
    assert tokens == plain
    decode = [s for p in recorder.plans for s in p.slots if s.kind is RowKind.DECODE]
    assert len(decode) == 3  # 1 token from the prefill, then 4 per step
    assert finished.usage.drafts_accepted == finished.usage.drafts_proposed == 9
    # the benchmark switch: the same drafts accepted unverified
    forced = Scheduler(backend, SchedulerConfig(n_draft=3, force_accept=True))
    scripted = ScriptedDrafts([PROMPT + plain], n_draft=3)
    tokens, _, _ = generate(forced, GenerationRequest(PROMPT, GREEDY, 13, draft_provider=scripted))
    assert tokens == plain


def test_mtp_drafts_keep_greedy_tokens(backend: ReferenceBackend) -> None:
    plain, _, _ = generate(
        Scheduler(backend, SchedulerConfig(speculation="off")),
        GenerationRequest(PROMPT, GREEDY, 10),
    )
    spec, finished, _ = generate(
        Scheduler(backend, SchedulerConfig(n_draft=4)), GenerationRequest(PROMPT, GREEDY, 10)
    )
    assert spec == plain and finished.usage.drafts_proposed > 0


def test_edit_to_earlier_context_restarts_from_nearest_checkpoint(
    backend: ReferenceBackend,
) -> None:
    config = SchedulerConfig(checkpoint_interval=64, speculation="off")
    original = [int(t) for t in np.random.default_rng(1).integers(10, 2000, 150)]
    edited = list(original)
    edited[140] = 3
    fresh, _, _ = generate(Scheduler(backend, config), GenerationRequest(edited, GREEDY, 4))
    scheduler = Scheduler(backend, config)
    generate(scheduler, GenerationRequest(original, GREEDY, 4))
    tokens, _, cached = generate(scheduler, GenerationRequest(edited, GREEDY, 4))
    assert cached == 128 and tokens == fresh


def _last_logits(backend: ReferenceBackend, tokens: Sequence[int]) -> np.ndarray:
    state = backend.model.new_state()
    return np.asarray(backend.model.forward(state, tokens).logits[-1])


def _chi2_limit(dof: int, z: float = 3.09) -> float:
    """Wilson–Hilferty approximation of the chi-square quantile (z = 3.09: p ≈ 0.001)."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


@pytest.mark.slow
def test_sampled_speculation_keeps_the_model_distribution(backend: ReferenceBackend) -> None:
    """Joint distribution of the first two tokens, drafts on, against the exact model."""
    params = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    first = candidates(_last_logits(backend, PROMPT), params)
    second = {
        int(t): candidates(_last_logits(backend, [*PROMPT, int(t)]), params) for t in first.ids
    }
    best = {t: int(c.ids[0]) for t, c in second.items()}  # drafts the target often accepts

    def propose(context: Sequence[int], mtp: Sequence[int], n: int) -> list[int]:
        return [best[context[-1]]] if len(context) == len(PROMPT) + 1 and n > 0 else []

    scheduler = Scheduler(backend, SchedulerConfig(n_draft=1))
    counts: Counter[tuple[int, int]] = Counter()
    accepted = 0
    n = 240
    for seed in range(n):
        request = GenerationRequest(
            PROMPT, SamplingParams(**{**params.__dict__, "seed": seed}), 3, draft_provider=propose
        )
        tokens, finished, _ = generate(scheduler, request)
        counts[(tokens[0], tokens[1])] += 1
        accepted += finished.usage.drafts_accepted
    assert 0 < accepted < n  # both the acceptance and the rejection path ran
    expected = {
        (int(a), int(b)): n * pa * pb
        for a, pa in zip(first.ids, first.probs, strict=True)
        for b, pb in zip(second[int(a)].ids, second[int(a)].probs, strict=True)
    }
    assert set(counts) <= set(expected)
    big = {cell: e for cell, e in expected.items() if e >= 5}
    rest_expected = n - sum(big.values())
    chi2 = sum((counts[c] - e) ** 2 / e for c, e in big.items())
    if rest_expected >= 5:
        rest = n - sum(counts[c] for c in big)
        chi2 += (rest - rest_expected) ** 2 / rest_expected
    dof = len(big) - (0 if rest_expected >= 5 else 1)
    assert chi2 < _chi2_limit(max(dof, 1)), (chi2, dof)
