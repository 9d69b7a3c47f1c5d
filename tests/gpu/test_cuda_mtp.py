"""The MTP head on the GPU (engine/cuda/mtp.py) on small synthetic models with an MTP block:
its drafts follow the CPU backend's (engine/reference_backend.py) on the same history, and a
slot drafting for itself, with drafts accepted, partly accepted and rejected, gives exactly its
plain greedy tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.backend import GREEDY, RowKind, SlotResult, SlotStep, StepPlan
from engine.cuda.backend import CudaBackend
from engine.cuda.model import from_gguf
from engine.gguf_file import open_gguf
from engine.reference_backend import ReferenceBackend
from tests.support import accuracy_cases as cases

pytestmark = pytest.mark.gpu

N_DRAFT = 3


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return cases.write_models(tmp_path_factory.mktemp("synthetic_mtp"))


def _step(backend: CudaBackend | ReferenceBackend, kind: RowKind, tokens: tuple[int, ...]) -> SlotResult:  # fmt: skip
    step = SlotStep(0, kind, tokens, backend.slot_length(0), GREEDY, n_draft=N_DRAFT)
    return backend.step(StepPlan((step,))).for_slot(0)


def test_drafts_follow_the_reference_head(models: dict[str, Path]) -> None:
    """Both backends run the CPU's decode groups (so their histories stay the same while their
    greedy tokens agree); the GPU proposes what the CPU proposes but at near-ties."""
    path = models["f32"]
    gguf = open_gguf(path)
    assert gguf.config.n_nextn == 1, "the synthetic models carry an MTP block"
    gpu = CudaBackend(from_gguf(gguf), n_slots=1, kv_tokens=4096, max_rows=64)
    cpu = ReferenceBackend.from_gguf(path, n_slots=1)
    assert gpu.has_mtp and cpu.has_mtp
    prompt = cases.prompt(9, 40, gguf.config.n_vocab)
    g, c = _step(gpu, RowKind.PREFILL, prompt), _step(cpu, RowKind.PREFILL, prompt)
    same = total = 0
    for _ in range(24):
        if g.accepted != c.accepted:
            break  # a near-tie flipped a trunk token: the histories part here
        assert len(g.drafts) == len(c.drafts) == N_DRAFT
        total += N_DRAFT
        same += sum(a == b for a, b in zip(g.drafts, c.drafts, strict=True))
        group = (c.accepted[-1], *c.drafts)
        g, c = _step(gpu, RowKind.DECODE, group), _step(cpu, RowKind.DECODE, group)
        assert gpu.slot_length(0) == cpu.slot_length(0)
    print(f"MTP drafts equal to the CPU backend's: {same}/{total}")
    assert total >= 5 * N_DRAFT
    assert same >= 0.85 * total


@pytest.mark.parametrize("quant", ["q4_k_m", "mixed"])
def test_own_drafts_keep_the_greedy_tokens(models: dict[str, Path], quant: str) -> None:
    """Decode groups made of the slot's own MTP drafts (then rollback and catch-up after each
    partial acceptance) give the plain greedy tokens, token for token."""
    gguf = open_gguf(models[quant])
    backend = CudaBackend(from_gguf(gguf), n_slots=1, kv_tokens=4096, max_rows=64)
    prompt = cases.prompt(5, 25, gguf.config.n_vocab)
    plain = list(_step(backend, RowKind.PREFILL, prompt).accepted)
    while len(plain) < 32:
        step = SlotStep(0, RowKind.DECODE, (plain[-1],), backend.slot_length(0), GREEDY)
        plain += backend.step(StepPlan((step,))).for_slot(0).accepted
    backend.reset_slot(0)
    first = _step(backend, RowKind.PREFILL, prompt)
    got, drafts, proposed, kept = list(first.accepted), first.drafts, 0, 0
    while len(got) < 32:
        result = _step(backend, RowKind.DECODE, (got[-1], *drafts))
        got += result.accepted
        proposed, kept = proposed + len(drafts), kept + result.n_draft_accepted
        drafts = result.drafts
        assert backend.slot_length(0) == len(prompt) + len(got) - 1
    print(f"{quant}: {kept}/{proposed} own MTP drafts accepted")
    assert proposed > 0
    assert got[:32] == plain[:32]
