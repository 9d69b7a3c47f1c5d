"""CudaBackend end to end on small synthetic models: whole-model logits against the exact numpy
reference (engine/reference.py) in every quant mix (top-1 >= 99.5 %, mean KL <= 1e-3), batch
invariance (a slot's greedy tokens alone == beside 7 others == with its prompt chunked), and
speculative rollback (drafts, accepted or not, never change the greedy tokens).
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.backend import GREEDY, RowKind, SlotStep, StepPlan
from engine.cuda.backend import CudaBackend
from engine.cuda.kernels import Ops
from engine.cuda.model import from_gguf
from engine.gguf_file import open_gguf
from engine.reference import ReferenceModel
from engine.reference_ops import kl_rows, top2_gap
from engine.synthetic import write_synthetic
from tests.support import accuracy_cases as cases

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return cases.write_models(tmp_path_factory.mktemp("synthetic"))


_prompt = cases.prompt


def _prefill_logits(backend: CudaBackend, slot: int, tokens: tuple[int, ...]) -> np.ndarray:
    step = SlotStep(
        slot, RowKind.PREFILL, tokens, backend.slot_length(slot), GREEDY, return_logits=True
    )
    out = backend.step(StepPlan((step,))).for_slot(slot).logits
    assert out is not None
    return out


# The q8_0 KV pool and f16 product operands move logits by up to ~0.09 (numpy emulation of the
# three sources on this model, bench/NOTES.md), so a position whose exact top-2 gap is below that
# may flip: top-1 must agree wherever the gap is clear. The bar for the quantized mixes (issue 4
# item 3) is llama.cpp's own quantized path on the same cases, measured on the CPU by
# tests/integration/test_llamacpp_quantized_accuracy.py (this machine has no llama.cpp).
CLEAR_GAP = 0.1
# Top-1 agreement over the 4,800 positions (accuracy_cases.N_PROMPTS says why that many): the
# issue's 99.5 % for every mix. With d*sc and dmin*m each rounded to f16 before the weight
# (quant.cuh until v23) q4_k_m gave 99.48 % and mixed 99.27 % on the H200 (bench/NOTES.md v22c);
# bench/accuracy_emulation.py, which reproduced those, puts today's fragments (d*sc*q exact plus
# -dmin*m as an f16 pair, rounded about once) at 99.75 % and 99.58 %, and the H200 measured
# 99.62 % for both (v23d).
TOP1_BAR = 0.995


def _report(line: str) -> None:
    """Print a figure, and append it to $OJ_FIGURES if set: pytest-xdist shows printed output
    only when the whole run ends, and a device call's time limit may come first."""
    print(line)
    if figures := os.environ.get("OJ_FIGURES"):
        with open(figures, "a") as out:
            out.write(line + "\n")


@functools.cache
def _exact_logits(path: Path) -> np.ndarray:
    """The exact reference's logits over every accuracy prompt of a model, in prompt order (one
    computation per model and process: the numpy forward dominates these tests' time)."""
    gguf = open_gguf(path)
    ref = ReferenceModel(gguf)
    tokens = cases.prompts(gguf.config.n_vocab)
    return np.concatenate([ref.forward(ref.new_state(), t).logits for t in tokens])


def _against_reference(
    path: Path, att_tc: int | None = None, core_below: int = 0
) -> tuple[CudaBackend, np.ndarray, np.ndarray, np.ndarray]:
    """The accuracy prompts prefilled in chunks -> (backend, and per position: KL from the exact
    logits, top-1 agreement, whether the exact top-2 gap is clear), positions in prompt order.
    att_tc: the attention kernel choice (KernelDims.att_tc), if not the default, with rows
    below core_below on the CUDA cores (KernelDims.att_core_below)."""
    gguf = open_gguf(path)
    backend = CudaBackend(from_gguf(gguf), n_slots=cases.SLOTS, kv_tokens=4096, max_rows=64)
    if att_tc is not None:
        dims = replace(backend.fwd.ops.dims, att_tc=att_tc, att_core_below=core_below)
        backend.fwd.use_ops(Ops(dims))
    got = []
    for i, tokens in enumerate(cases.prompts(gguf.config.n_vocab)):
        slot = i % cases.SLOTS
        backend.reset_slot(slot)
        got += [_prefill_logits(backend, slot, chunk) for chunk in cases.chunks(tokens)]
    exact, ours = _exact_logits(path), np.concatenate(got)
    agree = np.argmax(exact, -1) == np.argmax(ours, -1)
    return backend, kl_rows(exact, ours), agree, top2_gap(exact) >= CLEAR_GAP


@pytest.mark.parametrize("quant", cases.MIXES)
def test_logits_match_the_exact_reference(models: dict[str, Path], quant: str) -> None:
    _, kl, agree, clear = _against_reference(models[quant])
    theirs = cases.llamacpp_figures(quant) if quant in cases.QUANTIZED_MIXES else None
    _report(
        f"{quant}: mean KL {kl.mean():.2e}, top-1 {agree.mean():.4f} over {agree.size} positions"
    )
    _report(f"{quant}: llama.cpp's quantized path: {theirs or 'not measured (not quantized)'}")
    assert kl.mean() <= 1e-3, f"mean KL {kl.mean():.2e}"
    assert agree[clear].all(), f"top-1 differs at {int((~agree[clear]).sum())} clear positions"
    if theirs is not None:  # on the positions llama.cpp's figures cover
        n = theirs.positions
        assert n == cases.LLAMACPP_PROMPTS * cases.PROMPT_LENGTH, "stale llama.cpp figures"
        ours = kl[:n].mean(), agree[:n].mean()
        _report(f"{quant}: on those {n} positions: mean KL {ours[0]:.2e}, top-1 {ours[1]:.4f}")
        assert ours[0] < theirs.mean_kl, f"mean KL {ours[0]:.2e} not below llama.cpp's"
        assert ours[1] >= theirs.top1, f"top-1 {ours[1]:.4f} below llama.cpp's"
    assert agree.mean() >= TOP1_BAR, f"top-1 agreement {agree.mean():.4f}"


def _greedy(
    backend: CudaBackend, prompts: dict[int, tuple[int, ...]], n_new: int, chunk: int = 512
) -> dict[int, list[int]]:
    """Prefill every slot (in chunks), then decode n_new greedy tokens with all slots per step."""
    for slot in prompts:
        backend.reset_slot(slot)
    out: dict[int, list[int]] = {s: [] for s in prompts}
    pending = dict(prompts)
    while pending:  # one chunk of every pending prompt per step
        steps = []
        for slot, rest in pending.items():
            part = rest[:chunk]
            steps.append(
                SlotStep(
                    slot,
                    RowKind.PREFILL,
                    part,
                    backend.slot_length(slot),
                    GREEDY,
                    sample=len(rest) <= chunk,
                )
            )
        result = backend.step(StepPlan(tuple(steps)))
        for s in steps:
            pending[s.slot] = pending[s.slot][chunk:]
            if s.sample:
                out[s.slot] = result.for_slot(s.slot).accepted
        pending = {k: v for k, v in pending.items() if v}
    for _ in range(n_new - 1):
        plan = StepPlan(
            tuple(
                SlotStep(s, RowKind.DECODE, (toks[-1],), backend.slot_length(s), GREEDY)
                for s, toks in out.items()
            )
        )
        result = backend.step(plan)
        for slot in out:
            out[slot] += result.for_slot(slot).accepted
    return out


def test_greedy_tokens_do_not_depend_on_the_batch_or_the_chunking(models: dict[str, Path]) -> None:
    gguf = open_gguf(models["q4_k_m"])
    backend = CudaBackend(from_gguf(gguf), n_slots=8, kv_tokens=4096, max_rows=512)
    prompts = {s: _prompt(10 + s, 30 + 7 * s, gguf.config.n_vocab) for s in range(8)}
    alone = _greedy(backend, {0: prompts[0]}, 16)[0]
    together = _greedy(backend, prompts, 16)
    assert together[0] == alone
    chunked = _greedy(backend, {0: prompts[0]}, 16, chunk=7)[0]
    assert chunked == alone
    for s in range(1, 8):  # no cross-bleed: each slot alone gives what it gave in the crowd
        assert _greedy(backend, {s: prompts[s]}, 16)[s] == together[s]


@pytest.mark.parametrize("quant", ["f32", "q4_k_m"])
def test_tensor_core_attention_matches_the_exact_reference(
    tmp_path_factory: pytest.TempPathFactory, quant: str
) -> None:
    """The 27B's attention heads (256 wide, 4 query heads per KV head) run attn_decode_tc by
    default, whose scores and P.V products take f16 operands: whole-model logits within the
    bars above and no further from the exact ones than attention on the CUDA cores (attn_decode)
    gets on the same model, and greedy tokens independent of the batch and the chunking."""
    path = write_synthetic(
        tmp_path_factory.mktemp("wide") / f"tiny-wide-{quant}.gguf", "tiny-wide", quant, 5
    )
    figures = {}
    for att_tc in (0, 1):
        backend, kl, agree, clear = _against_reference(path, att_tc)
        _report(
            f"tiny-wide {quant} att_tc={att_tc}: mean KL {kl.mean():.2e}, top-1 {agree.mean():.4f}"
        )
        assert backend.fwd.ops.attention_kernel == ("attn_decode_tc" if att_tc else "attn_decode")
        assert kl.mean() <= 1e-3, f"mean KL {kl.mean():.2e}"
        assert agree[clear].all(), f"top-1 differs at {int((~agree[clear]).sum())} clear positions"
        figures[att_tc] = kl.mean(), agree
    (kl_cuda, agree_cuda), (kl_tc, agree_tc) = figures[0], figures[1]
    assert kl_tc <= 1.25 * kl_cuda + 2e-5, f"mean KL {kl_tc:.2e} against {kl_cuda:.2e}"
    # at most 2 more flips per 480 positions (the bar of the 480-position cases before)
    slack = max(2, agree_cuda.size // 240)
    assert agree_tc.sum() >= agree_cuda.sum() - slack, "more top-1 flips than attn_decode"
    n_vocab = open_gguf(path).config.n_vocab
    prompts = {s: _prompt(40 + s, 50 + 9 * s, n_vocab) for s in range(4)}
    for core_below in (0, 24):  # tensor cores for all rows; rows below 24 on the CUDA cores
        if core_below:  # passes that straddle the position: the bars still hold
            backend, kl, agree, clear = _against_reference(path, 1, core_below)
            assert kl.mean() <= 1e-3, f"mean KL {kl.mean():.2e}"
            assert agree[clear].all(), f"top-1 differs at {int((~agree[clear]).sum())} positions"
        alone = _greedy(backend, {0: prompts[0]}, 12)[0]
        assert _greedy(backend, prompts, 12, chunk=16)[0] == alone  # 4 x 16 rows: max_rows
        assert _greedy(backend, {0: prompts[0]}, 12, chunk=7)[0] == alone


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
"""


def test_prefill_queued_behind_a_busy_gpu_keeps_each_chunks_metadata(
    models: dict[str, Path],
) -> None:
    """Prefill chunks that sample nothing read nothing back, so the host queues them while the
    GPU is still busy: each chunk's metadata must still reach the GPU intact (the per-pass
    metadata goes through one pinned buffer and an asynchronous copy). The GPU is held busy
    by a spinning kernel; the chunks' tokens, logits and continuation must equal a run that
    waits for the GPU after every chunk."""
    import cupy as cp

    gguf = open_gguf(models["q4_k_m"])
    backend = CudaBackend(from_gguf(gguf), n_slots=2, kv_tokens=4096, max_rows=64)
    prompt = _prompt(5, 60, gguf.config.n_vocab)
    spin = cp.RawKernel(SPIN, "spin")

    def run(wait_each_chunk: bool) -> tuple[np.ndarray, list[int]]:
        backend.reset_slot(0)
        if not wait_each_chunk:
            spin((1,), (1,), (np.int64(400_000_000),))  # ~0.2 s of a busy stream
        chunks = [prompt[i : i + 8] for i in range(0, len(prompt), 8)]
        for part in chunks[:-1]:
            step = SlotStep(0, RowKind.PREFILL, part, backend.slot_length(0), GREEDY, sample=False)
            backend.step(StepPlan((step,)))
            if wait_each_chunk:
                cp.cuda.Device().synchronize()
        logits = _prefill_logits(backend, 0, chunks[-1])
        return logits, _greedy_from(backend, [int(np.argmax(logits[-1]))], 8)

    want_logits, want_tokens = run(wait_each_chunk=True)
    got_logits, got_tokens = run(wait_each_chunk=False)
    assert np.array_equal(got_logits, want_logits)
    assert got_tokens == want_tokens


def test_drafts_never_change_greedy_tokens(models: dict[str, Path]) -> None:
    """Drafts that are right (all accepted), half right and wrong (rolled back)."""
    gguf = open_gguf(models["q4_k_m"])
    backend = CudaBackend(from_gguf(gguf), n_slots=2, kv_tokens=4096, max_rows=64)
    prompt = _prompt(5, 25, gguf.config.n_vocab)
    plain = _greedy(backend, {0: prompt}, 20)[0]
    for mode in ("right", "half", "wrong"):
        backend.reset_slot(1)
        first = (
            backend.step(StepPlan((SlotStep(1, RowKind.PREFILL, prompt, 0, GREEDY),)))
            .for_slot(1)
            .accepted
        )
        got = list(first)
        while len(got) < 20:
            future = plain[len(got) : len(got) + 3]
            drafts = (
                list(future)
                if mode == "right"
                else [*future[:1], 7, 8]
                if mode == "half"
                else [1, 2, 3]
            )
            step = SlotStep(
                1, RowKind.DECODE, (got[-1], *drafts[:3]), backend.slot_length(1), GREEDY
            )
            got += backend.step(StepPlan((step,))).for_slot(1).accepted
            assert backend.slot_length(1) == len(prompt) + len(got) - 1
        assert got[:20] == plain, mode


def test_checkpoint_restore_repeats_the_continuation(models: dict[str, Path]) -> None:
    gguf = open_gguf(models["q4_k_m"])
    backend = CudaBackend(from_gguf(gguf), n_slots=1, kv_tokens=2048, max_rows=64)
    prompt = _prompt(8, 33, gguf.config.n_vocab)
    step = SlotStep(0, RowKind.PREFILL, prompt, 0, GREEDY, checkpoints=(20,))
    result = backend.step(StepPlan((step,))).for_slot(0)
    ((length, ckpt),) = result.checkpoints
    assert length == 20
    first = _greedy_from(backend, result.accepted, 8)
    backend.restore_checkpoint(0, ckpt)
    rest = SlotStep(0, RowKind.PREFILL, prompt[20:], 20, GREEDY)
    again = backend.step(StepPlan((rest,))).for_slot(0).accepted
    assert _greedy_from(backend, again, 8) == first


def test_tokens_are_handed_out_before_a_layout_is_captured(models: dict[str, Path]) -> None:
    """`while_running` runs once per step, after the pass is queued; on the run that captures
    the layout's graph, before the capture (which waits for the device): the tokens of the
    step before need not wait for it. The graph's tokens are the direct runs'."""
    gguf = open_gguf(models["q4_k_m"])
    backend = CudaBackend(from_gguf(gguf), n_slots=1, kv_tokens=2048, max_rows=64)
    prompt = _prompt(9, 21, gguf.config.n_vocab)
    token = backend.step(StepPlan((SlotStep(0, RowKind.PREFILL, prompt, 0, GREEDY),))).for_slot(0)
    seen: list[int] = []  # graphs captured when each hand-out ran

    def hook() -> None:
        seen.append(len(backend.fwd._graphs))

    tokens = list(token.accepted)
    for _ in range(4):  # one-row decode steps: direct, direct + capture, then the graph
        step = SlotStep(0, RowKind.DECODE, (tokens[-1],), backend.slot_length(0), GREEDY)
        tokens += backend.step(StepPlan((step,)), while_running=hook).for_slot(0).accepted
    assert seen == [0, 0, 1, 1]
    plain = CudaBackend(from_gguf(gguf), n_slots=1, kv_tokens=2048, max_rows=64, use_graphs=False)
    first = plain.step(StepPlan((SlotStep(0, RowKind.PREFILL, prompt, 0, GREEDY),))).for_slot(0)
    assert _greedy_from(plain, list(first.accepted), len(tokens)) == tokens


def test_prompts_cut_at_checkpoints_together_match_each_alone(models: dict[str, Path]) -> None:
    """Three prompts in one step, each cut at two checkpoints (CudaBackend._passes runs their
    k-th pieces in one pass): the first token of each is what it gets alone, and each slot's
    checkpoints restore to the same continuation."""
    gguf = open_gguf(models["q4_k_m"])
    backend = CudaBackend(from_gguf(gguf), n_slots=3, kv_tokens=4096, max_rows=256)
    prompts = {s: _prompt(60 + s, 30 + 7 * s, gguf.config.n_vocab) for s in range(3)}
    cuts = {s: (12 + s, len(p) - 1) for s, p in prompts.items()}
    alone = {}
    for s, p in prompts.items():
        backend.reset_slot(s)
        step = SlotStep(s, RowKind.PREFILL, p, 0, GREEDY)
        alone[s] = backend.step(StepPlan((step,))).for_slot(s).accepted
        backend.reset_slot(s)
    plan = StepPlan(
        tuple(
            SlotStep(s, RowKind.PREFILL, p, 0, GREEDY, checkpoints=cuts[s])
            for s, p in prompts.items()
        )
    )
    result = backend.step(plan)
    for s, p in prompts.items():
        out = result.for_slot(s)
        assert out.accepted == alone[s]
        assert [length for length, _ in out.checkpoints] == list(cuts[s])
        for length, ckpt in out.checkpoints:
            backend.restore_checkpoint(s, ckpt)
            rest = SlotStep(s, RowKind.PREFILL, p[length:], length, GREEDY)
            assert backend.step(StepPlan((rest,))).for_slot(s).accepted == alone[s]


def _greedy_from(backend: CudaBackend, tokens: list[int], n: int) -> list[int]:
    out = list(tokens)
    while len(out) < n:
        step = SlotStep(0, RowKind.DECODE, (out[-1],), backend.slot_length(0), GREEDY)
        out += backend.step(StepPlan((step,))).for_slot(0).accepted
    return out


def test_selftest_passes_on_this_gpu(models: dict[str, Path]) -> None:
    from engine.cuda.selftest import run_selftest

    result = run_selftest(models["mixed"])  # also checks the file's types and compiles its shape
    assert result.ok, result.reason
    assert result.decode_tok_per_s > 0
    assert "passed" in result.detail


def test_overlapped_launches_give_the_same_bits(models: dict[str, Path]) -> None:
    """Programmatic dependent launch (engine/cuda/launch.py) lets a kernel start before the one
    before it ends; every kernel waits for its inputs, so logits and greedy tokens are bit for
    bit those of plain launches."""
    from engine.cuda import launch

    if not launch.pdl_enabled():
        pytest.skip("programmatic dependent launch needs sm_90+ (or OPENJET_PDL=0 is set)")
    gguf = open_gguf(models["q4_k_m"])
    prompts = {s: _prompt(40 + s, 25 + 9 * s, gguf.config.n_vocab) for s in range(4)}
    runs = []
    try:
        for on in (False, True):
            launch.set_pdl(on)
            backend = CudaBackend(from_gguf(gguf), n_slots=4, kv_tokens=4096, max_rows=64)
            logits = _prefill_logits(backend, 0, prompts[0])
            runs.append((logits, _greedy(backend, prompts, 12, chunk=16)))
    finally:
        launch.set_pdl(None)
    (plain_logits, plain_tokens), (pdl_logits, pdl_tokens) = runs
    np.testing.assert_array_equal(pdl_logits, plain_logits)
    assert pdl_tokens == plain_tokens


def test_fused_launches_give_the_same_bits(models: dict[str, Path]) -> None:
    """Decode passes and prompt chunks on the row kernels finish SwiGLU in the gate|up product
    (kernels.matmul_swiglu) and run a mixer's two input products of different types in one
    launch (kernels.matmul_pair), and the mixers write their outputs packed for the output
    products; chunks on the tiled kernel, and every pass with MatmulConfig.swiglu_epilogue,
    pair_products or packed_mixer_out off, do without. Logits and greedy tokens are the same
    bit for bit every way, and a prompt's tokens do not depend on which way its chunks took."""
    from engine.cuda import build

    gguf = open_gguf(models["q4_k_m"])
    prompt = _prompt(77, 300, gguf.config.n_vocab)
    saved, runs = build.MATMUL_CONFIG, []
    try:
        ways: list[dict[str, Any]] = [
            {},
            {"swiglu_epilogue": False},
            {"pair_products": False},
            {"packed_mixer_out": False},
        ]
        for fields in ways:
            build.MATMUL_CONFIG = replace(saved, **fields)
            backend = CudaBackend(from_gguf(gguf), n_slots=2, kv_tokens=4096, max_rows=512)
            layers = backend.fwd.m.layers
            assert all(layer.ffn_interleaved for layer in layers)
            assert any(len(layer.mixer_in) == 2 for layer in layers)  # Q6_K and Q4_K: a pair
            logits = _prefill_logits(backend, 0, prompt[:20])  # 20 rows: the row kernels
            whole = _greedy(backend, {0: prompt, 1: prompt[:50]}, 12)  # 350 rows: tiled
            chunked = _greedy(backend, {0: prompt}, 12, chunk=9)[0]
            runs.append((logits, whole, chunked))
    finally:
        build.MATMUL_CONFIG = saved
    logits, whole, chunked = runs[0]
    assert chunked == whole[0]
    for other in runs[1:]:
        np.testing.assert_array_equal(other[0], logits)
        assert other[1] == whole and other[2] == chunked
